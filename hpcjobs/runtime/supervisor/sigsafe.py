"""Writing from a signal handler: the one way the supervisor, and a task of the executor, say
something while a signal is being handled."""

from __future__ import annotations

import contextlib
import os


def to_stderr(text: str) -> None:
    """Write ``text`` to standard error with the system call itself, past ``sys.stderr``.

    Python runs a signal handler in the main thread wherever that thread is: inside
    ``sys.stderr.write`` (a log line, the program's own output), a second buffered write from
    the handler fails ("reentrant call inside <_io.BufferedWriter name='<stderr>'>"), and the
    handler's work (forwarding a cancel, checkpointing) with it. A line shorter than the pipe's
    atomic size (4 KiB) goes out in one ``write(2)``, so lines from both never interleave.
    """
    data = text.encode("utf-8", "backslashreplace")
    with contextlib.suppress(OSError):  # standard error closed: nothing to tell anyone
        while data:
            data = data[os.write(2, data) :]
