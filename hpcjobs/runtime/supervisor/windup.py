"""Ending a run's step from a watch (the stall watch, the grow watch): the program's warning
signal, the grace time to checkpoint, then the steps killed. One way, for both.

For a stall, the grace ends early once the program has saved: when a complete checkpoint at
or past the step the program had reached at the warning (its ``PROGRESS``) is newer than the
one there was (:func:`newest_checkpoint`), the steps get :data:`AFTER_SAVE_S` more seconds to
exit by themselves. A hung rank cannot act on the warning, so the grace would otherwise always
run out; a program that keeps its checkpoints elsewhere gets the whole grace. The grow watch
does not end early: its program is healthy and exits by itself once it has saved."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

#: Seconds the steps get to exit by themselves once a checkpoint saved after the warning is
#: complete.
AFTER_SAVE_S = 1.0
#: What the watches' log lines add to "ending the step in N s".
EARLIER = f", or {AFTER_SAVE_S:g} s after a checkpoint is saved"
#: Seconds between two looks at the checkpoint folder during the grace (one listing each).
LOOK_S = 0.5


class Mark(NamedTuple):
    """The newest complete checkpoint: its step, and its marker's inode and modification
    time."""

    step: int
    inode: int
    mtime_ns: int


NO_CHECKPOINT = Mark(-1, 0, 0)


def newest_checkpoint(folder: str) -> Mark:
    """The newest ``step-N`` folder in ``folder`` holding ``COMPLETE`` (the checkpoint folder's
    format, :mod:`hpcjobs.runtime.checkpoint`), with its marker's inode and modification time,
    so that the same step saved again counts as new; :data:`NO_CHECKPOINT` when there is none
    (or no folder)."""
    best: Mark = NO_CHECKPOINT
    if not folder:
        return best
    try:
        entries = os.listdir(folder)
    except OSError:
        return best
    for name in entries:
        number = name[len("step-") :]
        if not name.startswith("step-") or not number.isdecimal() or int(number) < best.step:
            continue
        try:
            marker = os.stat(os.path.join(folder, name, "COMPLETE"))
        except OSError:
            continue
        best = Mark(int(number), marker.st_ino, marker.st_mtime_ns)
    return best


def progress_step(folder: str) -> int:
    """The step in the checkpoint folder's ``PROGRESS`` file (-1: none, or no folder)."""
    if not folder:
        return -1
    try:
        with open(os.path.join(folder, "PROGRESS")) as handle:
            value = handle.read().strip()
    except OSError:
        return -1
    return int(value) if value.isdecimal() else -1


class StepControl(NamedTuple):
    """What a watch needs to end a run's step: the launcher (``child``), the warning signal's
    name (without ``SIG``), the seconds the program gets after the warning (``grace``), the job's
    log, how the job's steps are killed, and how the warning goes out (``send``: the
    supervisor's delivery to the processes that listen for it; None: to the launcher)."""

    child: subprocess.Popen[bytes]
    warning: str
    grace: float
    log: Callable[[str], None]
    kill_steps: Callable[[], None]
    send: Callable[[], None] | None = None


def warn(step: StepControl, checkpoints: str) -> Callable[[], Mark | None]:
    """Send the warning (``step.send``, else SIG``step.warning`` to the launcher). Returns a
    look at ``checkpoints``: the checkpoint saved since the warning (newer than the one there
    was, at or past the program's progress then), or None."""
    before, reached = newest_checkpoint(checkpoints), progress_step(checkpoints)
    if step.send is not None:
        step.send()
    else:
        with contextlib.suppress(OSError):
            step.child.send_signal(getattr(signal, "SIG" + step.warning))

    def saved() -> Mark | None:
        newest = newest_checkpoint(checkpoints)
        return newest if newest != before and newest.step >= max(before.step, reached) else None

    return saved


def kill(step: StepControl, stop: threading.Event) -> None:
    """Kill the job's steps and, 3 s later (unless ``stop``), the launcher."""
    step.kill_steps()
    if not stop.wait(3) and step.child.poll() is None:
        with contextlib.suppress(OSError):
            step.child.kill()


def end_step(step: StepControl, stop: threading.Event, checkpoints: str = "") -> bool:
    """Send the warning (``step.send``, else SIG``step.warning`` to the launcher); once
    ``step.grace`` seconds have passed with the step still there, kill the job's steps and, 3 s
    later, the launcher. A checkpoint completed in ``checkpoints`` (the folder) after the
    warning, at or past the program's progress then (not a save of an older step finishing
    late), shortens the grace to :data:`AFTER_SAVE_S` from then (said in the log). The waits end
    early once the step is gone or ``stop`` is set (the decision waits for them). Whether the
    grace ended early on a checkpoint."""
    child, log = step.child, step.log
    since = warn(step, checkpoints)
    deadline = time.monotonic() + step.grace
    saved = False
    look = time.monotonic() + LOOK_S
    while time.monotonic() < deadline:
        if child.poll() is not None or stop.wait(0.2):
            return saved
        if checkpoints and not saved and time.monotonic() >= look:
            look = time.monotonic() + LOOK_S
            newest = since()
            if newest is not None:
                saved = True
                deadline = min(deadline, time.monotonic() + AFTER_SAVE_S)
                log(
                    f"checkpoint step {newest.step} saved after the warning; ending the "
                    f"step in {AFTER_SAVE_S:g} s"
                )
    kill(step, stop)
    return saved


#: How long a swap waits for the program's next checkpoint (docs/faults.md, "Stragglers").
SWAP_WAIT_S = 1800.0


def end_at_checkpoint(
    step: StepControl, stop: threading.Event, checkpoints: str, wait: float = SWAP_WAIT_S
) -> bool:
    """End the step at the program's next checkpoint, never before: send the warning (a
    program that saves on it saves now), and once a checkpoint newer than the one there now is
    complete in ``checkpoints``, at or past the program's progress then, kill the job's steps
    :data:`AFTER_SAVE_S` later. Whether the step ended (by itself after the warning, or at the
    checkpoint); False when ``wait`` seconds passed without a checkpoint, or ``stop`` was set
    with the step still there: it runs on."""
    child = step.child
    since = warn(step, checkpoints)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if child.poll() is not None:
            return True
        if stop.wait(LOOK_S):
            return child.poll() is not None
        newest = since()
        if newest is not None:
            step.log(f"checkpoint step {newest.step} saved; ending the step in {AFTER_SAVE_S:g} s")
            if stop.wait(AFTER_SAVE_S) or child.poll() is not None:
                return child.poll() is not None
            kill(step, stop)
            return True
    return False
