"""Ending a run's step from a watch: the grace, shortened by a checkpoint saved after the
warning (hpcjobs.runtime.supervisor.windup)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.runtime.supervisor.windup import (
    AFTER_SAVE_S,
    NO_CHECKPOINT,
    StepControl,
    end_step,
    newest_checkpoint,
)


def launcher_ignoring(tmp_path: Path, name: str = "USR2") -> subprocess.Popen[bytes]:
    """A launcher that ignores SIG``name`` (the warning: as a step with a hung rank does),
    once it does."""
    ready = tmp_path / f"ignoring-{name}"
    child = subprocess.Popen(["sh", "-c", f"trap '' {name}; touch {ready}; exec sleep 60"])
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def _step_with_a_checkpoint(
    tmp_path: Path,
) -> tuple[Path, CheckpointDir, subprocess.Popen[bytes], list[float], Callable[[], None]]:
    """A checkpoint folder holding step 1, a launcher ignoring the warning, and a kill_steps
    that records when it ran (and kills the launcher)."""
    folder = tmp_path / "ckpt"
    ckpt = CheckpointDir(folder, keep=3)
    with ckpt.save(1) as tmp:
        (tmp / "state").write_text("1")
    child = launcher_ignoring(tmp_path)
    killed: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        child.kill()

    return folder, ckpt, child, killed, kill


def _save_later(ckpt: CheckpointDir, step: int, delay: float) -> threading.Thread:
    """Save ``step`` ``delay`` seconds from now, from a thread (started)."""

    def save() -> None:
        time.sleep(delay)
        with ckpt.save(step) as tmp:
            (tmp / "state").write_text(str(step))

    saver = threading.Thread(target=save)
    saver.start()
    return saver


def test_the_newest_complete_checkpoint_and_the_same_step_saved_again(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    assert newest_checkpoint(str(folder)) == NO_CHECKPOINT  # no folder
    assert newest_checkpoint("") == NO_CHECKPOINT
    ckpt = CheckpointDir(folder, keep=5)
    for step in (3, 12):
        with ckpt.save(step) as tmp:
            (tmp / "state").write_text(str(step))
    (folder / "step-000000099").mkdir()  # no COMPLETE: not a checkpoint
    (folder / "step-x").mkdir()
    first = newest_checkpoint(str(folder))
    assert first.step == 12
    with ckpt.save(12) as tmp:  # the same step again: a new marker
        (tmp / "state").write_text("again")
    assert newest_checkpoint(str(folder)).step == 12
    assert newest_checkpoint(str(folder)) != first


def test_a_checkpoint_saved_after_the_warning_ends_the_grace(tmp_path: Path) -> None:
    folder, ckpt, child, killed, kill = _step_with_a_checkpoint(tmp_path)

    saver = _save_later(ckpt, 2, 1.0)
    started = time.monotonic()
    try:
        logged: list[str] = []
        step = StepControl(child, "USR2", 30, logged.append, kill)
        assert end_step(step, threading.Event(), str(folder))
        assert logged == [
            f"checkpoint step 2 saved after the warning; ending the step in {AFTER_SAVE_S:g} s"
        ]
        # Saved about 1 s in, then AFTER_SAVE_S for the steps to exit: far from the 30 s.
        assert killed and killed[0] - started < 1.0 + AFTER_SAVE_S + 2.5
    finally:
        saver.join()
        child.kill()


def test_without_a_new_checkpoint_the_whole_grace_runs(tmp_path: Path) -> None:
    folder, _ckpt, child, killed, kill = _step_with_a_checkpoint(tmp_path)
    started = time.monotonic()
    try:
        step = StepControl(child, "USR2", 2, lambda _: None, kill)
        assert not end_step(step, threading.Event(), str(folder))
        assert killed and killed[0] - started >= 2
    finally:
        child.kill()


def test_a_late_save_of_an_older_step_does_not_end_the_grace(tmp_path: Path) -> None:
    """A periodic save that started before the warning and finishes after it is not the
    warning's save: the program had reached step 10, the checkpoint is of step 5."""
    folder, ckpt, child, killed, kill = _step_with_a_checkpoint(tmp_path)
    ckpt.note_progress(10)

    saver = _save_later(ckpt, 5, 0.5)
    started = time.monotonic()
    try:
        step = StepControl(child, "USR2", 2.5, lambda _: None, kill)
        assert not end_step(step, threading.Event(), str(folder))
        assert killed and killed[0] - started >= 2.5
    finally:
        saver.join()
        child.kill()
