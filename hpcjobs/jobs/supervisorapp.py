"""The job's supervisor as one file: a zipapp of :mod:`hpcjobs.runtime.supervisor` and the
contract it shares with the submit side, :mod:`hpcjobs.contract` (under an ``hpcjobs`` package
that holds nothing else).

``hpcjobs submit`` writes it next to the job's output, at :func:`supervisor_path`, and the
batch script runs it with the site's ``python3``: nothing of hpcjobs has to be installed on the
compute nodes. ``hpcjobs render`` writes it there too (:func:`ensure_supervisor`), so that a
script it prints can be given to ``sbatch`` by hand. Its name holds a hash of what it is made of
(each entry's name and bytes), so a job that is still running keeps the supervisor it was
submitted with when a newer hpcjobs submits another job into the same folder. The archive is
the same bytes for the same sources (fixed time stamps, sorted entries); naming it does not
build it, which a render would pay for on every start: a render builds and writes it only when
the file is not there yet.
"""

from __future__ import annotations

import functools
import hashlib
import io
import zipfile
from pathlib import Path

import hpcjobs.contract as contract
import hpcjobs.runtime.supervisor as package
from hpcjobs.contract import names
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.records import FileStore, LocalFiles

#: Where supervisors are kept, under a job's output folder.
FOLDER = names.SUPPORT_DIR
#: The package name inside the archive (not "supervisor": a node may have supervisord's).
PACKAGE = "hpcjobs_supervisor"
_MAIN = f"import sys\n\nfrom {PACKAGE}.cli import main\n\nsys.exit(main(sys.argv[1:]))\n"
_STAMP = (1980, 1, 1, 0, 0, 0)


#: The ``hpcjobs`` package inside the archive: the contract only.
_CONTRACT_ROOT = b'"""hpcjobs, as the job\'s supervisor carries it: the contract only."""\n'


@functools.cache
def _entries() -> tuple[tuple[str, bytes], ...]:
    """The archive's entries, in order: its ``__main__.py``, the contract under ``hpcjobs/``,
    then the supervisor's modules."""
    shared = Path(contract.__file__).parent
    source = Path(package.__file__).parent
    contract_modules = [
        (f"hpcjobs/contract/{path.name}", path.read_bytes()) for path in sorted(shared.glob("*.py"))
    ]
    modules = [
        (f"{PACKAGE}/{path.name}", path.read_bytes())
        for path in sorted(source.glob("*.py"))
        if path.name != "__main__.py"
    ]
    return (
        ("__main__.py", _MAIN.encode()),
        ("hpcjobs/__init__.py", _CONTRACT_ROOT),
        *contract_modules,
        *modules,
    )


@functools.cache
def supervisor_app() -> bytes:
    """The zipapp's bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, data in _entries():
            info = zipfile.ZipInfo(name, _STAMP)
            info.external_attr = 0o600 << 16
            # Stored, not compressed: the bytes then follow from the entries alone, as the name
            # does; two submit hosts whose zlib compresses differently write the same file.
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return buffer.getvalue()


def supervisor_name() -> str:
    """The zipapp's file name: ``supervisor-<first 16 hex digits of a SHA-256>.pyz``, over each
    entry's name and bytes (length-prefixed, so that no two sets of entries hash alike)."""
    digest = hashlib.sha256()
    for name, data in _entries():
        for part in (name.encode(), data):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return f"supervisor-{digest.hexdigest()[:16]}.pyz"


def supervisor_path(output_dir: str | Path) -> Path:
    """Where the batch script of a job writing to ``output_dir`` finds its supervisor."""
    return Path(output_dir) / FOLDER / supervisor_name()


def write_supervisor(path: Path, files: FileStore | None = None) -> Path:
    """Write the supervisor to ``path`` (its folder is created private), through ``files``
    (default: this machine; a remote submission passes its SSH runner). Returns ``path``.

    Raises:
        BadInputError: the folder cannot be created or written here (exit 2).
        TransportError: the SSH runner could not write it (exit 4).
    """
    store = files or LocalFiles()
    store.makedirs(str(path.parent))
    try:
        store.write_bytes(str(path), supervisor_app())
    except OSError as exc:  # this machine's; the SSH runner raises TransportError
        raise BadInputError(
            f"cannot write the job's supervisor {path}: {exc.strerror or exc}",
            hint=f"choose another output dir (--output-dir), or make {path.parent} writable",
        ) from exc
    return path


def ensure_supervisor(path: Path) -> bool:
    """Write the supervisor to ``path`` on this machine unless a file is already there (its
    name is its content's hash, so one there is this one); building the archive is paid only
    for a write. Returns whether it wrote it.

    Raises:
        BadInputError: the folder cannot be created or written (exit 2).
    """
    if path.is_file():
        return False
    write_supervisor(path)
    return True


__all__ = [
    "FOLDER",
    "ensure_supervisor",
    "supervisor_app",
    "supervisor_name",
    "supervisor_path",
    "write_supervisor",
]
