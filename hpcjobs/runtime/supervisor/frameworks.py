"""The newest checkpoint a program keeps in its framework's own layout (docs/frameworks.md).

A program that knows nothing of hpcjobs resumes by itself from where its framework saved:
PyTorch Lightning from ``hpc_ckpt_<N>.ckpt`` in its ``default_root_dir`` (the job's working
folder by default), the Hugging Face Trainer from ``<output_dir>/checkpoint-<step>/``,
Accelerate from ``save_state`` folders, a torchrun script from a
``torch.distributed.checkpoint`` folder (one holding ``.metadata``). The supervisor looks for
them to say what a run will resume from, and logs what it found; it never moves or deletes them.

Where it looks: each given folder and the folders directly inside it (an ``output_dir`` of the
Trainer, Accelerate's ``checkpoints/``), at most :data:`MAX_ENTRIES` entries in all: a bounded
listing once per run, never per step. Only the standard library: a Lightning checkpoint's step
is read from the pickle inside it without loading a tensor (:func:`lightning_step`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

#: At most this many folder entries are looked at in all.
MAX_ENTRIES = 5000
#: A Lightning checkpoint's pickle larger than this is not read (its step stays unknown).
MAX_PICKLE = 64 << 20

LIGHTNING = "lightning"
HF_TRAINER = "hf_trainer"
ACCELERATE = "accelerate"
DCP = "torch_dcp"

#: What each kind is called in the supervisor's log.
KIND_NAMES = {
    LIGHTNING: "PyTorch Lightning",
    HF_TRAINER: "Hugging Face Trainer",
    ACCELERATE: "Accelerate",
    DCP: "torch.distributed.checkpoint",
}

_LIGHTNING = re.compile(r"hpc_ckpt_([0-9]+)\.ckpt")
_HF = re.compile(r"checkpoint-([0-9]+)")
_ACCELERATE = re.compile(r"checkpoint_([0-9]+)")
_TRAILING_NUMBER = re.compile(r"([0-9]+)$")


class Found(NamedTuple):
    """A checkpoint in a framework's layout."""

    kind: str  #: one of LIGHTNING, HF_TRAINER, ACCELERATE, DCP
    path: str
    #: The last training step it holds, counted from 0 as hpcjobs' checkpoints are (a framework
    #: that counts steps done, N, holds step N - 1); None: not known.
    step: int | None
    mtime: float

    def describe(self) -> str:
        done = "steps done unknown" if self.step is None else f"{self.step + 1} steps done"
        return f"{KIND_NAMES[self.kind]} checkpoint {self.path} ({done})"


class _Stub:
    """Stands for any class a checkpoint's pickle names (tensors, storages, numpy)."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        pass

    def __setstate__(self, _state: object) -> None:
        pass


class _Mapping(dict):  # type: ignore[type-arg]
    """Stands for an ordered mapping (its state, if any, is left out)."""

    def __setstate__(self, _state: object) -> None:
        pass


class _Unpickler(pickle.Unpickler):
    """Reads a checkpoint's plain values; every class and tensor it names becomes a stub, so
    that nothing of the file's code runs and no tensor is loaded."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "collections" and name == "OrderedDict":
            return _Mapping
        return _Stub

    def persistent_load(self, _pid: Any) -> Any:
        return None


def lightning_step(path: str) -> int | None:
    """The last step a Lightning checkpoint holds (a ``torch.save`` zip file: its
    ``global_step``, the steps done, minus 1); None when it cannot be read."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), "")
            if not name or archive.getinfo(name).file_size > MAX_PICKLE:
                return None
            with archive.open(name) as handle:
                data = _Unpickler(handle).load()
    except Exception:
        return None
    step = data.get("global_step") if isinstance(data, dict) else None
    return step - 1 if isinstance(step, int) and not isinstance(step, bool) else None


def _hf_step(path: str, number: int) -> int | None:
    """A Trainer checkpoint's last step: its folder's number (steps done) minus 1, once
    ``trainer_state.json`` is there (written after the weights: without it the folder is
    incomplete)."""
    return number - 1 if os.path.isfile(os.path.join(path, "trainer_state.json")) else None


def _classify(entry: os.DirEntry[str]) -> Found | None:
    name = entry.name
    try:
        mtime = entry.stat().st_mtime
        is_dir = entry.is_dir()
    except OSError:
        return None
    match = _LIGHTNING.fullmatch(name)
    if match and not is_dir:
        return Found(LIGHTNING, entry.path, None, mtime)
    if not is_dir:
        return None
    match = _HF.fullmatch(name)
    if match:
        step = _hf_step(entry.path, int(match.group(1)))
        return Found(HF_TRAINER, entry.path, step, mtime) if step is not None else None
    if os.path.isfile(os.path.join(entry.path, ".metadata")):
        number = _TRAILING_NUMBER.search(name)
        return Found(DCP, entry.path, int(number.group(1)) if number else None, mtime)
    if _ACCELERATE.fullmatch(name) and any(
        os.path.isfile(os.path.join(entry.path, marker))
        for marker in ("random_states_0.pkl", "model.safetensors", "pytorch_model.bin")
    ):
        return Found(ACCELERATE, entry.path, None, mtime)
    return None


def _scan(folders: Sequence[str]) -> Iterable[os.DirEntry[str]]:
    """The entries of ``folders`` and of the folders directly inside them, bounded."""
    seen = 0
    todo = [(folder, 0) for folder in folders if folder]
    visited: set[str] = set()
    while todo:
        folder, depth = todo.pop(0)
        real = os.path.realpath(folder)
        if real in visited:
            continue
        visited.add(real)
        try:
            with os.scandir(folder) as entries:
                listed = list(entries)
        except OSError:
            continue
        for entry in listed:
            seen += 1
            if seen > MAX_ENTRIES:
                return
            yield entry
            hidden = entry.name.startswith(".") or _HF.fullmatch(entry.name)
            with contextlib.suppress(OSError):
                if depth == 0 and not hidden and entry.is_dir(follow_symlinks=False):
                    todo.append((entry.path, 1))


#: Where Lightning's ``ModelCheckpoint`` saves by default, under ``default_root_dir``.
LIGHTNING_LOGS = "lightning_logs"
_MODEL_CHECKPOINT = re.compile(r".*step=([0-9]+).*\.ckpt")


def adopt_lightning(folder: str) -> str:
    """Make the newest checkpoint Lightning's ``ModelCheckpoint`` saved under ``folder``'s
    ``lightning_logs/version_*/checkpoints/`` the one Lightning resumes from by itself on Slurm,
    where it is newer than every ``hpc_ckpt_<N>.ckpt`` there: a hard link (a copy where links
    are refused) ``hpc_ckpt_<N+1>.ckpt``, made atomically. Run before a run after the first,
    for a program that saved no HPC checkpoint before it stopped (a lost node, a crash). The
    path made ("" for none). Nothing is moved or deleted."""
    logs = os.path.join(folder, LIGHTNING_LOGS)
    if not os.path.isdir(logs):
        return ""
    number, newest_hpc = 0, 0.0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            match = _LIGHTNING.fullmatch(entry.name)
            if match:
                number = max(number, int(match.group(1)))
                with contextlib.suppress(OSError):
                    newest_hpc = max(newest_hpc, entry.stat().st_mtime)
    best, best_mtime = "", newest_hpc
    seen = 0
    with contextlib.suppress(OSError), os.scandir(logs) as versions:
        for version in versions:
            checkpoints = os.path.join(version.path, "checkpoints")
            with contextlib.suppress(OSError), os.scandir(checkpoints) as files:
                for entry in files:
                    seen += 1
                    if seen > MAX_ENTRIES:
                        break
                    if not _MODEL_CHECKPOINT.fullmatch(entry.name):
                        continue
                    with contextlib.suppress(OSError):
                        mtime = entry.stat().st_mtime
                        if mtime > best_mtime:
                            best, best_mtime = entry.path, mtime
    if not best:
        return ""
    target = os.path.join(folder, f"hpc_ckpt_{number + 1}.ckpt")
    tmp = os.path.join(folder, f".hpc_ckpt_{number + 1}.ckpt.hpcjobs-{os.getpid()}")
    try:
        try:
            os.link(best, tmp)
        except OSError:
            shutil.copy2(best, tmp)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return ""
    return target


def newest(folders: Sequence[str]) -> Found | None:
    """The newest checkpoint in a framework's layout in ``folders`` (see the module docs), with
    its step where it can be read; None when there is none."""
    best: Found | None = None
    for entry in _scan(folders):
        found = _classify(entry)
        if found is not None and (best is None or found.mtime > best.mtime):
            best = found
    if best is not None and best.kind == LIGHTNING:
        best = best._replace(step=lightning_step(best.path))
    return best
