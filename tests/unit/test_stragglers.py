"""Stragglers in the stall watch (hpcjobs/runtime/supervisor/stall.py, pace.py): real threads,
a real child process, node summaries written as the agents write them, a 2 s window."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from hpcjobs.runtime.supervisor.pace import KEEP_OUT, SWAP, Straggler
from hpcjobs.runtime.supervisor.stall import StallWatch
from hpcjobs.runtime.supervisor.windup import StepControl
from tests.unit.test_agent import _summary

WINDOW = 2.0
EVERY = 0.1


def run_nodes(folder: Path, paces: dict[str, float], stop: threading.Event) -> None:
    """Each node's one rank advances at its pace (steps per second) until ``stop``; the
    summaries say so every 0.05 s."""
    began = time.monotonic()
    last: dict[str, tuple[int, float]] = {}
    while not stop.wait(0.05):
        now = time.monotonic()
        for rank, (node, pace) in enumerate(paces.items()):
            step = int(pace * (now - began))
            if last.get(node, (-1, 0.0))[0] != step:
                last[node] = (step, now)
            _summary(folder, node, "5", {rank: (step, now - last[node][1])})


class Watched(NamedTuple):
    watch: StallWatch
    child: subprocess.Popen[bytes]
    logged: list[str]
    killed: list[bool]


@contextlib.contextmanager
def watching(
    folder: Path, paces: dict[str, float], can_swap: bool, checkpoints: str = ""
) -> Iterator[Watched]:
    """The stall watch over a real child (``sleep``) while the nodes advance at ``paces``;
    everything stopped afterwards."""
    child = subprocess.Popen(["sleep", "60"])
    logged: list[str] = []
    killed: list[bool] = []

    def kill() -> None:
        killed.append(True)
        child.kill()

    step = StepControl(child, "USR2", 0, logged.append, kill, send=lambda: None)
    watch = StallWatch(
        step, str(folder), "5", 0, EVERY, checkpoints, 0.8, WINDOW, lambda _node: can_swap
    )
    stop = threading.Event()
    writer = threading.Thread(target=run_nodes, args=(folder, paces, stop))
    writer.start()
    watch.start()
    try:
        yield Watched(watch, child, logged, killed)
    finally:
        stop.set()
        watch.close()
        writer.join()
        child.kill()
        child.wait()


def test_a_slow_node_without_a_spare_is_flagged_once_and_the_run_goes_on(tmp_path: Path) -> None:
    paces = {"n1": 40.0, "n2": 24.0, "n3": 40.0}
    with watching(tmp_path, paces, can_swap=False) as (watch, child, _logged, killed):
        deadline = time.monotonic() + 15
        flags: list[tuple[Straggler, str]] = []
        while not flags and time.monotonic() < deadline:
            flags += watch.take_flags()
            time.sleep(0.05)
        ((slow, action),) = flags
        assert slow.node == "n2" and action == KEEP_OUT
        time.sleep(2 * WINDOW)  # flagged once per run; nobody else is slow
        assert watch.take_flags() == [] and child.poll() is None and not killed
        assert watch.straggler is None


def test_with_a_spare_the_step_ends_at_the_next_checkpoint_not_before(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    paces = {"n1": 40.0, "n2": 24.0}
    with watching(tmp_path, paces, True, str(checkpoints)) as (watch, child, logged, killed):
        deadline = time.monotonic() + 15
        while watch.straggler is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.straggler is not None and watch.straggler.node == "n2"
        ((slow, action),) = watch.take_flags()
        assert (slow.node, action) == ("n2", SWAP)
        time.sleep(1.0)
        assert not killed and child.poll() is None  # no checkpoint yet: the run goes on
        (checkpoints / "step-30").mkdir()
        (checkpoints / "step-30" / "COMPLETE").touch()
        assert child.wait(timeout=10) != 0 and killed == [True]
        assert any("checkpoint step 30 saved" in line for line in logged), logged
        assert watch.straggler is not None  # the decision swaps it
