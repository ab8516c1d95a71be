"""Crash-safe checkpoints in a directory: atomic saves, retention, and finding the latest.

A checkpoint is a folder ``step-000000123/`` holding whatever files the application writes and a
``COMPLETE`` marker written last. Saving goes through a temporary folder: files are written and
fsynced there, the marker is written and fsynced, then the folder is renamed into place and its
parent fsynced. A job killed at any moment leaves either the previous checkpoints untouched or a
temporary folder that :meth:`CheckpointDir.latest` ignores.

Typical use (from any training loop; torch is not required)::

    from hpcjobs.runtime.checkpoint import CheckpointDir

    ckpt = CheckpointDir.from_env(keep=3)          # $HPCJOBS_CHECKPOINT_DIR
    last = ckpt.latest()
    start = last.step + 1 if last else 0
    ...
    with ckpt.save(step) as folder:                # a temporary folder
        torch.save(state, folder / "state.pt")
    ...
    ckpt.mark_done({"digest": digest})            # a requeued job will not run again
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcjobs.atomicfile import PRIVATE, PRIVATE_DIR, write_atomic
from hpcjobs.contract.jobenv import (
    DONE,
    ENV_CHECKPOINT_DIR,
    ENV_FINGERPRINT,
    ENV_PROGRESS_DIR,
    ENV_RESTART_COUNT,
    ENV_RUN_FILE,
)
from hpcjobs.errors import BadInputError
from hpcjobs.runtime.progress import ProgressWriter

log = logging.getLogger(__name__)

COMPLETE = "COMPLETE"
PROGRESS = "PROGRESS"
_STEP_RE = re.compile(r"^step-(\d{9,})$")
_TMP_RE = re.compile(r"^step-(\d{9,})\.tmp-")
#: Temporary folders younger than this may belong to a save still in progress elsewhere.
STALE_TMP_SECONDS = 600.0


class CheckpointFolderTaken(BadInputError):
    """Another run owns the checkpoint folder now; this job must not write into it."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint on disk."""

    step: int
    path: Path
    meta: dict[str, Any]


class CheckpointDir:
    """One job's checkpoint folder.

    Args:
        root: The folder (created with mode 0700 if missing).
        keep: How many complete checkpoints to keep; at least 2, so that the one being
            written never replaces the only good one.
    """

    def __init__(self, root: str | os.PathLike[str], *, keep: int = 3) -> None:
        if keep < 2:
            raise BadInputError(f"keep must be at least 2 (got {keep})")
        self.root = Path(root)
        self.keep = keep

    @classmethod
    def from_env(cls, *, keep: int = 3, default: str | None = None) -> CheckpointDir:
        """The folder named by ``$HPCJOBS_CHECKPOINT_DIR`` (or ``default``)."""
        value = os.environ.get(ENV_CHECKPOINT_DIR) or default
        if not value:
            raise BadInputError(
                f"{ENV_CHECKPOINT_DIR} is not set",
                hint="run under 'hpcjobs submit --checkpoint-dir DIR', or pass a folder",
            )
        return cls(value, keep=keep)

    # ---- reading --------------------------------------------------------------------------

    def checkpoints(self) -> list[Checkpoint]:
        """Every complete, intact checkpoint, oldest first."""
        found = []
        for step, path in self._step_dirs():
            meta = _read_complete(path)
            if meta is not None:
                found.append(Checkpoint(step, path, meta))
        return found

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint; partial or corrupt ones are skipped."""
        for step, path in reversed(self._step_dirs()):
            meta = _read_complete(path)
            if meta is not None:
                return Checkpoint(step, path, meta)
            log.warning("skipping incomplete or corrupt checkpoint %s", path)
        return None

    def _step_dirs(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        dirs = []
        for entry in self.root.iterdir():
            match = _STEP_RE.match(entry.name)
            if match and entry.is_dir():
                dirs.append((int(match.group(1)), entry))
        return sorted(dirs)

    # ---- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def save(self, step: int, meta: dict[str, Any] | None = None) -> Iterator[Path]:
        """Yield a temporary folder to write checkpoint ``step`` into; publish it atomically.

        If the body raises, the temporary folder is removed and nothing is published.
        """
        if step < 0:
            raise BadInputError(f"checkpoint step must be >= 0 (got {step})")
        _make_private_dir(self.root)
        token = f"{os.uname().nodename}-{os.getpid()}-{time.monotonic_ns()}"
        tmp = self.root / f"step-{step:09d}.tmp-{token}"
        tmp.mkdir(mode=PRIVATE_DIR)
        began = time.time()
        try:
            yield tmp
            self._publish(tmp, step, meta or {})
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _report(lambda writer: writer.saved(time.time() - began))
        self.prune()

    def _check_owner(self) -> None:
        """Refuse to write into a folder that another run has taken over since this job began.

        Inside an hpcjobs job the script exports this run's fingerprint and the RUN file of
        its checkpoint folder; a ``submit --fresh`` or ``--resume`` of another run rewrites
        that file. Writing on would mix two runs in one folder.
        """
        expected = os.environ.get(ENV_FINGERPRINT)
        run_file = os.environ.get(ENV_RUN_FILE)
        if not expected or not run_file:
            return
        owner_dir = Path(os.path.abspath(run_file)).parent
        root = Path(os.path.abspath(self.root))
        if root != owner_dir and root.parent != owner_dir:
            return  # not this job's checkpoint folder
        try:
            owner = json.loads(Path(run_file).read_text()).get("fingerprint")
        except (OSError, ValueError, AttributeError):
            return
        if owner and owner != expected:
            raise CheckpointFolderTaken(
                f"checkpoint folder {owner_dir} now belongs to another run ({owner}); "
                f"this job (run {expected}) writes nothing more there",
                hint="the folder was taken over with 'hpcjobs submit --fresh' or '--resume'; "
                "this run's earlier checkpoints are in the folder set aside next to it",
            )

    def _publish(self, tmp: Path, step: int, meta: dict[str, Any]) -> None:
        self._check_owner()
        files = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            _fsync_file(path)
            files[str(path.relative_to(tmp))] = path.stat().st_size
        record = {
            "step": step,
            "time": time.time(),
            "job_id": os.environ.get("SLURM_JOB_ID"),
            "restart": os.environ.get(ENV_RESTART_COUNT),
            "files": files,
            "meta": meta,
        }
        body = json.dumps(record, sort_keys=True)
        record_text = json.dumps(
            {**record, "sha256": hashlib.sha256(body.encode()).hexdigest()}, sort_keys=True
        )
        _write_synced(tmp / COMPLETE, record_text)
        _fsync_dir(tmp)
        final = self.root / f"step-{step:09d}"
        if final.exists():
            # Re-saving a step (e.g. after a restart) replaces it; the old copy goes first
            # into a trash name so the swap is two renames, never a half-deleted folder.
            trash = self.root / f"{final.name}.tmp-old-{time.monotonic_ns()}"
            os.rename(final, trash)
            os.rename(tmp, final)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.rename(tmp, final)
        _fsync_dir(self.root)
        log.info("checkpoint step %d saved to %s", step, final)

    def prune(self) -> list[Path]:
        """Delete old complete checkpoints beyond ``keep`` and stale temporary folders."""
        removed = []
        complete = self.checkpoints()
        for ckpt in complete[: max(0, len(complete) - self.keep)]:
            shutil.rmtree(ckpt.path, ignore_errors=True)
            removed.append(ckpt.path)
        now = time.time()
        if self.root.is_dir():
            for entry in self.root.iterdir():
                if _TMP_RE.match(entry.name) and entry.is_dir():
                    with contextlib.suppress(OSError):
                        if now - entry.stat().st_mtime > STALE_TMP_SECONDS:
                            shutil.rmtree(entry, ignore_errors=True)
                            removed.append(entry)
        return removed

    def note_progress(self, step: int) -> None:
        """Record the last step reached (cheap: call it every step, from one rank).

        ``hpcjobs history`` uses it to report the work lost at each interruption: the
        progress reached before the stop minus the checkpoint the next run resumed from.
        Inside an hpcjobs job it also reports the step, with the time, in this rank's files
        under ``$HPCJOBS_PROGRESS_DIR`` (:mod:`hpcjobs.runtime.progress`), which ``hpcjobs report``
        reads for goodput and step times.
        """
        _make_private_dir(self.root)
        # Every step: no flush to disk (a crash of the machine loses a step's note, no more).
        write_atomic(self.root / PROGRESS, f"{step}\n", fsync=False)
        _report(lambda writer: writer.step(step))

    def progress(self) -> int | None:
        try:
            text = (self.root / PROGRESS).read_text().strip()
        except OSError:
            return None
        return int(text) if text.isdigit() else None

    # ---- done marker ----------------------------------------------------------------------

    def mark_done(self, result: dict[str, Any] | None = None) -> Path:
        """Record that the job finished, so a requeued run exits at once with success."""
        self._check_owner()
        _make_private_dir(self.root)
        path = self.root / DONE
        _write_synced(path, json.dumps({"time": time.time(), "result": result or {}}))
        _fsync_dir(self.root)
        return path

    def is_done(self) -> bool:
        return (self.root / DONE).is_file()

    def done_result(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.root / DONE).read_text())
        except (OSError, ValueError):
            return None
        result = data.get("result")
        return result if isinstance(result, dict) else {}


def report_step(step: int) -> None:
    """Report that this rank finished ``step`` in its own progress file only (the stall watch and
    ``hpcjobs report`` read it), for ranks other than the one calling ``note_progress``."""
    _report(lambda writer: writer.step(step))


def _report(write: Callable[[ProgressWriter], None]) -> None:
    """Report to ``$HPCJOBS_PROGRESS_DIR`` when it is set; a failure there only logs."""
    if not os.environ.get(ENV_PROGRESS_DIR):
        return

    writer = ProgressWriter.from_env()
    if writer is None:
        return
    try:
        write(writer)
    except OSError as exc:
        log.warning("cannot report progress in %s: %s", writer.folder, exc)


def _read_complete(path: Path) -> dict[str, Any] | None:
    """The checkpoint's metadata if its marker is intact and its files match; else None."""
    try:
        record = json.loads((path / COMPLETE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    digest = record.pop("sha256", None)
    body = json.dumps(record, sort_keys=True)
    if digest != hashlib.sha256(body.encode()).hexdigest():
        return None
    for name, size in record.get("files", {}).items():
        try:
            if (path / name).stat().st_size != size:
                return None
        except OSError:
            return None
    meta = record.get("meta")
    return meta if isinstance(meta, dict) else {}


def _make_private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)


def _write_synced(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename durable. Some file systems refuse directory fsync: best effort there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
