"""What hpcjobs keeps about each submission, and where.

Each submission gets its own folder in the job's output dir,
``<output_dir>/submit-<UTC time>-<token prefix>/``, holding the exact script(s) given to sbatch
and ``record.json``: the job spec, the site, the hpcjobs and Slurm versions, the submission
token, the job ids and the time. Folders are created 0700 and files 0600 (with that mode from
the start, never chmod-ed afterwards), because scripts and specs may name private paths.

A small index, ``$XDG_STATE_HOME/hpcjobs/jobs/<job id>.json``, points from a job id back to
its record, so ``hpcjobs logs`` still finds the files after Slurm has forgotten the job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from hpcjobs.atomicfile import PRIVATE, PRIVATE_DIR, write_atomic
from hpcjobs.errors import BadInputError

RECORD_NAME = "record.json"
RECORD_FORMAT = 1


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700; existing folders are left as is.

    Raises:
        BadInputError: the folder cannot be created (a file is in the way, no permission).
    """
    path = path.expanduser()
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIR)
        except FileExistsError:
            continue
        except OSError as exc:
            raise BadInputError(
                f"cannot create folder {folder}: {exc.strerror}",
                hint="choose another output dir, or fix its permissions",
            ) from exc
        # The umask can only take bits away; make sure nothing else was taken either.
        os.chmod(folder, PRIVATE_DIR)
    if not path.is_dir():
        raise BadInputError(f"{path} exists and is not a folder")
    return path


class FileStore(Protocol):
    """Where a submission's files go: this machine, or a login node over SFTP."""

    def makedirs(self, path: str, mode: int = PRIVATE_DIR) -> None: ...

    def write_text(self, path: str, text: str, mode: int = PRIVATE) -> None: ...

    def write_bytes(self, path: str, data: bytes, mode: int = PRIVATE) -> None: ...


class LocalFiles:
    """:class:`FileStore` on this machine: 0700 folders, atomic 0600 files."""

    def makedirs(self, path: str, mode: int = PRIVATE_DIR) -> None:
        make_private_dir(Path(path))

    def write_text(self, path: str, text: str, mode: int = PRIVATE) -> None:
        write_atomic(Path(path), text)

    def write_bytes(self, path: str, data: bytes, mode: int = PRIVATE) -> None:
        write_atomic(Path(path), data)


def record_text(record: Mapping[str, Any]) -> str:
    """A submission record as JSON text."""
    body = {"format": RECORD_FORMAT, **record}
    return json.dumps(body, indent=2, sort_keys=True, default=str) + "\n"


def write_record(path: Path, record: Mapping[str, Any]) -> Path:
    """Write a submission record (JSON, 0600, atomic)."""
    body = {"format": RECORD_FORMAT, **record}
    return write_atomic(path, json.dumps(body, indent=2, sort_keys=True, default=str) + "\n")


def read_record(path: Path) -> dict[str, Any]:
    """Read a submission record.

    Raises:
        BadInputError: the file is missing or not a record.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInputError(f"cannot read submission record {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise BadInputError(f"{path} is not a submission record")
    return data


def default_index_dir() -> Path:
    """``$XDG_STATE_HOME/hpcjobs/jobs`` (``~/.local/state/hpcjobs/jobs``)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hpcjobs" / "jobs"


def index_scope(host: str | None = None) -> str:
    """Which cluster a job id belongs to: the login host, or this machine's SLURM_CONF.

    Job ids repeat across clusters (and sandboxes); the index keeps them apart by scope.
    """
    if host:
        return "host-" + hashlib.sha256(host.encode()).hexdigest()[:12]
    conf = os.environ.get("SLURM_CONF", "")
    return "local-" + hashlib.sha256(conf.encode()).hexdigest()[:12] if conf else "local"


def _entry_file(folder: Path, job_id: str, host: str | None) -> Path:
    base = job_id.split("_", 1)[0]
    return folder / index_scope(host) / f"{_safe_id(base)}.json"


def remember(
    job_ids: Iterable[str],
    record_path: Path,
    *,
    index_dir: Path | None = None,
    output_dir: str | None = None,
    host: str | None = None,
) -> None:
    """Note in the index that ``job_ids`` were submitted with the record at ``record_path``.

    ``host`` is the login node of a remote submission (its record lives there); ``output_dir``
    is where the job's logs and event log are.
    """
    folder = index_dir or default_index_dir()
    for job_id in job_ids:
        path = str(record_path) if host else str(record_path.resolve())
        entry = {"job_id": job_id, "record": path, "output_dir": output_dir, "host": host}
        target = _entry_file(folder, job_id, host)
        make_private_dir(target.parent)
        write_atomic(target, json.dumps(entry) + "\n")


def index_entry(
    job_id: str, *, index_dir: Path | None = None, host: str | None = None
) -> dict[str, Any] | None:
    """The index entry of a job submitted to this cluster (``12_3`` looks up ``12``), if any."""
    entry = _entry_file(index_dir or default_index_dir(), job_id, host)
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def find_record(
    job_id: str, *, index_dir: Path | None = None, host: str | None = None
) -> Path | None:
    """The record of the submission that created ``job_id`` (``12_3`` looks up ``12``)."""
    data = index_entry(job_id, index_dir=index_dir, host=host)
    if data is None:
        return None
    path = Path(str(data.get("record", "")))
    return path if path.is_file() else None


def expand_output_pattern(
    pattern: str,
    *,
    job_id: str,
    array_job_id: str | None = None,
    task: str | None = None,
    name: str = "",
    user: str = "",
) -> str:
    """Fill in sbatch's ``%`` placeholders in an ``--output``/``--error`` pattern.

    Handles ``%j %A %a %x %u %%`` (with optional zero-padding width, as in ``%4a``); other
    placeholders stay as they are.
    """
    values = {
        "j": job_id,
        "A": array_job_id or job_id,
        "a": task or "4294967294",
        "x": name,
        "u": user,
    }

    def fill(match: re.Match[str]) -> str:
        width, key = match.group(1), match.group(2)
        if key == "%":
            return "%"
        value = values.get(key)
        if value is None:
            return match.group(0)
        return value.zfill(int(width)) if width and value.isdigit() else value

    return re.sub(r"%([0-9]{0,2})([jAaxu%])", fill, pattern)


def _safe_id(job_id: str) -> str:
    if not re.fullmatch(r"[0-9]+(?:_[0-9]+)?", job_id):
        raise BadInputError(f"not a job id: {job_id!r}")
    return job_id
