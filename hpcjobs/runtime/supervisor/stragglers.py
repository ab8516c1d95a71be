"""Stragglers (docs/faults.md, "Stragglers"): what the supervisor does with a node the stall
watch finds slower than its peers (:mod:`.pace`). With a spare node idle in the job, the node
is swapped for it at the program's next checkpoint (the run ends there and runs again inside
the job without it, spending no requeue budget); without one, the run goes on and the node is
left out of the chain's next run. Either way the ``straggler`` event says by how much."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcjobs.contract.causes import STRAGGLER

from .context import RunContext
from .pace import KEEP_OUT, SWAP

if TYPE_CHECKING:
    from .stall import StallWatch
    from .supervise import Supervisor

#: What the log and the event say of each action.
DONE = {
    SWAP: "swapped for a spare node at the next checkpoint",
    KEEP_OUT: "no spare node in the job: left out of the next run",
}


class Stragglers:
    """The run's stragglers: whether one can be swapped, and each flag logged."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    def can_swap(self, node: str) -> bool:
        """Whether a spare node of the job is idle (from the watch's thread, which only reads
        the two lists: a node the chain excludes has left the job)."""
        if not self.ctx.policy.spare_nodes or node not in self.ctx.run_nodes:
            return False
        running = set(self.ctx.run_nodes)
        return any(n not in running for n in self.ctx.allocation)

    def swap(self, node: str, evidence: str) -> int | None:
        """The run ended at a checkpoint to swap ``node``: exclude it and run again inside the
        job on a spare (None), else continue the chain in another job (0). No requeue budget
        is spent: hpcjobs ended the run, not a fault."""
        self.run.nodes.exclude(STRAGGLER, [node], evidence)
        if self.run.nodes.stays_in_job(STRAGGLER, [node]):
            return None
        self.run.continuation.continue_chain(STRAGGLER)
        return 0

    def take(self, watch: StallWatch | None) -> None:
        """Log the stragglers the watch flagged since the last look (the main thread's part):
        the ``straggler`` event, and for one kept out, the exclusion from the next run."""
        if watch is None:
            return
        for slow, action in watch.take_flags():
            self.ctx.event(
                "straggler",
                STRAGGLER,
                f"{slow.evidence()}; {DONE[action]}",
                node=slow.node,
                steps=slow.steps,
                peers=round(float(slow.peers), 1),
                window=round(slow.window),
                action=action,
            )
            if action == KEEP_OUT:
                self.ctx.log(f"straggler: {slow.evidence()}; {DONE[action]}")
                self.run.nodes.exclude(STRAGGLER, [slow.node], slow.evidence())
