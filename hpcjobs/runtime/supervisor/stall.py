"""The stall watch: ends a run whose ranks stopped advancing (docs/requeue.md, "Stalls"), and
finds a node slower than its peers (docs/faults.md, "Stragglers").

It reads the node agents' summaries (``node-<node>`` in the chain's progress folder, see
:mod:`.agent`) once per agent cycle: O(nodes) reads, whatever the number of ranks. A rank whose
step has not changed for the stall timeout is stalled (:func:`.decide.find_stall`); the run gets
the warning signal, the grace time to checkpoint (shorter once a checkpoint is saved,
:func:`.windup.end_step`), and then its steps are killed. From the same reads, each node's pace
(:mod:`.pace`): a straggler is swapped where ``can_swap`` says a spare is there (the step ends
at the program's next checkpoint, :func:`.windup.end_at_checkpoint`), else flagged; the main
thread takes the flags (:meth:`StallWatch.take_flags`) and logs them.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Callable

from hpcjobs.contract.faultdefaults import STRAGGLER_WINDOW_S

from .agent import read_summary
from .decide import Stall, find_stall, judged_rank
from .pace import KEEP_OUT, SWAP, PaceLog, Straggler, find_straggler
from .windup import EARLIER, SWAP_WAIT_S, StepControl, end_at_checkpoint, end_step

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
        straggler_ratio: float = 0.0,
        straggler_window: float = STRAGGLER_WINDOW_S,
        can_swap: Callable[[str], bool] | None = None,
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
        #: A straggler the watch swaps (the step ends at the next checkpoint).
        self.straggler: Straggler | None = None
        self.ratio = straggler_ratio if can_swap is not None else 0.0
        self.can_swap = can_swap
        self.pace = PaceLog(straggler_window)
        #: The nodes flagged in this run (each once), and the flags the main thread has not
        #: taken yet: (the straggler, SWAP or KEEP_OUT).
        self.flagged: list[str] = []
        self._flags: list[tuple[Straggler, str]] = []
        self._flags_lock = threading.Lock()
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
                if self.ratio and summary.ranks:
                    rank = min(summary.ranks, key=lambda r: summary.ranks[r][0])
                    self.pace.note(summary.node, steps[rank], seen[rank], now)
            judged = {r: steps[r] for r in fresh}
            found = None
            if self.timeout > 0:
                found = find_stall(judged, {r: seen[r] for r in fresh}, now, self.timeout)
            if found is None and self.ratio and self._straggler(now):
                return
            if found is not None:
                node = "" if found.tied else node_of.get(found.rank, "")
                self.found = (node, found)
                self._end(found, node)
                return
            # At most one early look between two cycles: O(nodes) reads per cycle, at most twice.
            early = wait < self.every
            wait = self.every if early else self._next_wait(judged, seen, time.monotonic())

    def take_flags(self) -> list[tuple[Straggler, str]]:
        """The stragglers flagged since the last call, with what is done: SWAP or KEEP_OUT."""
        with self._flags_lock:
            flags, self._flags = self._flags, []
        return flags

    def _flag(self, slow: Straggler, action: str) -> None:
        with self._flags_lock:
            self._flags.append((slow, action))

    def _straggler(self, now: float) -> bool:
        """Look for a straggler; whether the watch ended the step for it (then it is done)."""
        assert self.can_swap is not None
        slow = find_straggler(
            self.pace.points, now, self.ratio, self.pace.window, self.flagged, self.every
        )
        if slow is None:
            return False
        self.flagged.append(slow.node)
        if not self.can_swap(slow.node):
            self._flag(slow, KEEP_OUT)
            return False
        self._flag(slow, SWAP)
        self.step.log(
            f"straggler: {slow.evidence()}; swapping it for a spare at the next checkpoint "
            f"(sending SIG{self.step.warning})"
        )
        self.straggler = slow
        # Stalls are not looked for meanwhile: the wait ends within the stall timeout.
        wait = self.timeout if self.timeout > 0 else SWAP_WAIT_S
        if end_at_checkpoint(self.step, self._stop, self.checkpoints, wait):
            return True
        self.straggler = None
        if self._stop.is_set():
            return True
        self.step.log(f"straggler: no checkpoint came; {slow.node} stays in this run")
        self._flag(slow, KEEP_OUT)
        return False

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
