"""Write a file atomically: readers see the old content or the new, never a part.

The one way hpcjobs writes its own files (records, site-config drafts, job files, the sandbox's
keys and configs): the data goes to a temporary file in the same folder, created with O_EXCL
and its final mode (no window with wider permissions, no following a planted symlink), is
flushed to disk, and is renamed over the target.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

#: The mode of a file only its owner may read: every file hpcjobs writes, unless it says otherwise.
PRIVATE = 0o600
#: The mode of a folder only its owner may enter.
PRIVATE_DIR = 0o700
#: A file every user may read (configs that daemons running as other users read, job files).
READABLE = 0o644


def write_atomic(path: Path, data: str | bytes, *, mode: int = PRIVATE, fsync: bool = True) -> Path:
    """Write ``data`` (text is UTF-8) to ``path`` atomically, as a new file with ``mode``.

    ``fsync=False`` skips the flush to disk for files rewritten many times a second whose loss
    in a crash of the machine costs nothing (progress reports): the rename stays atomic.

    Raises:
        OSError: The folder cannot be written; nothing is left behind.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, flags, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # the umask may have taken bits the mode asks for
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return path
