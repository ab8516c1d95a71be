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

#: The mode of a file only its owner may read.
PRIVATE = 0o600


def write_atomic(path: Path, data: str | bytes, *, mode: int = PRIVATE) -> Path:
    """Write ``data`` (text is UTF-8) to ``path`` atomically, as a new file with ``mode``.

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
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # the umask may have taken bits the mode asks for
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return path
