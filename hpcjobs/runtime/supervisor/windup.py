"""Ending a run's step from a watch (the stall watch, the grow watch): the program's warning
signal, the grace time to checkpoint, then the steps killed. One way, for both."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable


def end_step(
    child: subprocess.Popen[bytes],
    warning: str,
    grace: float,
    stop: threading.Event,
    kill_steps: Callable[[], None],
) -> None:
    """Send ``child`` (the launcher) SIG``warning``; once ``grace`` seconds have passed with the
    step still there, kill the job's steps (``kill_steps``) and, 3 s later, the launcher. The
    waits end early once the step is gone or ``stop`` is set (the decision waits for them)."""
    with contextlib.suppress(OSError):
        child.send_signal(getattr(signal, "SIG" + warning))
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if child.poll() is not None or stop.wait(0.2):
            return
    kill_steps()
    if not stop.wait(3) and child.poll() is None:
        with contextlib.suppress(OSError):
            child.kill()
