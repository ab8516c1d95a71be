"""The stall watch: ends a run whose ranks stopped advancing (docs/requeue.md, "Stalls").

It reads the node agents' summaries (``node-<node>`` in the chain's progress folder, see
:mod:`.agent`) once per agent cycle: O(nodes) reads, whatever the number of ranks. A rank whose
step has not changed for the stall timeout is stalled (:func:`.decide.find_stall`); the run gets
the warning signal, the grace time to checkpoint (shorter once a checkpoint is saved,
:func:`.windup.end_step`), and then its steps are killed.
"""

from __future__ import annotations

import glob
import os
import threading
import time

from .agent import read_summary
from .decide import Stall, find_stall, judged_rank
from .windup import EARLIER, StepControl, end_step

#: A summary this many agent cycles old (plus a margin) no longer counts: its node's ranks are
#: not judged until their agent writes again.
STALE_CYCLES = 3


class StallWatch:
    """Watches one run's step (``step``) from a thread: the agents' summaries of job ``job`` in
    ``folder``, every ``every`` seconds; a rank at one step for ``timeout`` seconds ends it."""

    def __init__(
        self,
        step: StepControl,
        folder: str,
        job: str,
        timeout: int,
        every: float,
        checkpoints: str = "",
    ) -> None:
        self.step = step
        self.folder = folder
        self.job = job
        self.timeout = timeout
        self.every = every
        #: The checkpoint folder: a checkpoint saved there after the warning ends the grace.
        self.checkpoints = checkpoints
        #: What the watch found: (the suspect node, "" when nobody is blamed; the stall).
        self.found: tuple[str, Stall] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        steps: dict[int, int] = {}
        seen: dict[int, float] = {}
        node_of: dict[int, str] = {}
        wait = self.every
        while not self._stop.wait(wait):
            if self.step.child.poll() is not None:
                return
            now, wall = time.monotonic(), time.time()
            fresh: set[int] = set()
            for path in glob.glob(os.path.join(glob.escape(self.folder), "node-*")):
                if path.endswith((".log", ".tmp")):
                    continue
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        summary = read_summary(handle.read(), wall)
                except OSError:
                    continue
                if summary.job != self.job or summary.age > STALE_CYCLES * self.every + 10:
                    continue
                for rank, (step, idle) in summary.ranks.items():
                    fresh.add(rank)
                    if steps.get(rank) != step:
                        steps[rank], seen[rank], node_of[rank] = step, now - idle, summary.node
            judged = {r: steps[r] for r in fresh}
            found = find_stall(judged, {r: seen[r] for r in fresh}, now, self.timeout)
            if found is not None:
                node = "" if found.tied else node_of.get(found.rank, "")
                self.found = (node, found)
                self._end(found, node)
                return
            # At most one early look between two cycles: O(nodes) reads per cycle, at most twice.
            early = wait < self.every
            wait = self.every if early else self._next_wait(judged, seen, time.monotonic())

    def _next_wait(self, steps: dict[int, int], seen: dict[int, float], now: float) -> float:
        """One agent cycle, or less where the rank the watch judges
        (:func:`.decide.judged_rank`) would pass the timeout sooner: the watch then looks again
        just after that moment, and finds a hang up to a cycle earlier. ``steps`` holds the
        ranks judged now."""
        if not steps:
            return self.every
        judged = judged_rank(steps, {r: seen[r] for r in steps})
        due = seen[judged] + self.timeout + 0.05 - now
        return min(self.every, due) if due > 0 else self.every

    def _end(self, found: Stall, node: str) -> None:
        warning, grace, log = "SIG" + self.step.warning, self.step.grace, self.step.log
        if found.tied:
            log(
                f"stall: rank {found.rank} and {found.tied} other rank(s) have been at step "
                f"{found.step} for {found.idle} s (tied: no node is blamed); sending {warning}, "
                f"ending the step in {grace} s{EARLIER}"
            )
        else:
            where = f" (node {node})" if node else ""
            log(
                f"stall: rank {found.rank} has been at step {found.step} for {found.idle} s"
                f"{where}; sending {warning}, ending the step in {grace} s{EARLIER}"
            )
        end_step(self.step, self._stop, self.checkpoints)
