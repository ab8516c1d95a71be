"""Faults that repeat (docs/faults.md): a restart storm ends the chain, the same failure on
another node clears the nodes, and every node a chain blames goes into the user's list of
suspects (:mod:`hpcjobs.contract.suspects`), whose repeat offenders later jobs leave out."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract import suspects
from hpcjobs.contract.causes import FAULTS
from hpcjobs.contract.eventlog import RunEnd

from . import decide
from .context import RunContext

if TYPE_CHECKING:
    from .supervise import Supervisor


class Repeats:
    """What the chain's earlier run ends, and the user's other chains, say of this one."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    # ---- restart storms ----------------------------------------------------------------------

    def this_end(self, cause: str, suspect: str, evidence: str) -> RunEnd:
        """The run that just ended, as :func:`.decide.storm` reads it."""
        where = self.ctx.position()
        return RunEnd(cause, where["checkpoint"], where["progress"], suspect, evidence)

    def storm_stop(self, end: RunEnd, rc: int) -> int | None:
        """End the chain when ``end`` completes a restart storm: runs that keep ending the same
        way and get no further (:func:`.decide.storm`); the job's exit code, or None when the
        chain goes on. Nodes the storm's runs blamed are cleared: the same failure on different
        nodes is the program's."""
        runs = self.ctx.policy.storm_runs
        if end.cause not in decide.STORM_CAUSES:
            return None
        ends = [*self.ctx.chain.run_ends(), end]
        if not decide.storm(ends, runs):
            return None
        repeated = decide.storm_detail(ends, runs)
        reason = decide.storm_reason(repeated)
        blamed = [str(n) for n in repeated["nodes"]] if isinstance(repeated["nodes"], list) else []
        if end.cause in decide.PROGRAM_CAUSES and blamed:
            self.clear(end.cause, blamed, "a restart storm: the program's failure, not theirs")
        used, allowed = self.ctx.chain.count("requeue", end.cause), self.ctx.budget(end.cause)
        self.ctx.log(
            f"{reason}; stopping the chain with {max(allowed - used, 0)} of {allowed} "
            f"{end.cause} requeue(s) unused (faults.storm_runs={runs}). Repeated: "
            f"{repeated['evidence'] or 'no evidence'}"
        )
        self.ctx.event("end", "fail", reason, repeated=repeated)
        self.run.continuation.end_chain()
        return decide.exit_code(end.cause, rc, False)

    def program_not_node(self, end: RunEnd) -> bool:
        """Whether this run's failure is the one the run before had on another node, at the
        same step: then neither node is blamed (the earlier one is cleared), and it is logged."""
        ends = self.ctx.chain.run_ends()
        before = ends[-1] if ends else None
        if before is None or not decide.points_at_program(before, end):
            return False
        self.ctx.log(
            f"{end.cause} on {end.node} as on {before.node} in the run before, no further: the "
            "program's failure, not a node's; no node blamed"
        )
        self.clear(end.cause, [before.node], f"the same failure on {end.node} after it")
        return True

    def blame_suspect(self, end: RunEnd) -> bool:
        """Exclude this run's suspect (and add the blame to the user's suspects) unless the
        failure points at the program (:meth:`program_not_node`) or the site's health check
        clears the node; whether it was blamed."""
        if self.program_not_node(end):
            return False
        return self.run.nodes.fault_exclude(end.cause, end.node, end.evidence)

    # ---- the user's suspects -----------------------------------------------------------------

    def path(self) -> str:
        """The user's suspects file (the site's, or the user's own)."""
        return self.ctx.policy.suspects_file or suspects.default_path(self.ctx.env)

    def blame(self, cause: str, nodes: Sequence[str], evidence: str = "") -> None:
        """Add a blame of each of ``nodes`` for a fault to the user's suspects."""
        if cause not in FAULTS:
            return
        root = self.ctx.root or self.ctx.self_id
        now = time.time()
        entries = [
            suspects.Entry(now, suspects.BLAME, n, cause, self.ctx.self_id, root, evidence[:300])
            for n in nodes
            if n
        ]
        self.write(entries)

    def clear(self, cause: str, nodes: Sequence[str], why: str) -> None:
        """Withdraw the chain's blames of ``nodes``: out of its exclusions, and out of the
        user's suspects."""
        root = self.ctx.root or self.ctx.self_id
        now = time.time()
        job = self.ctx.self_id
        self.write([suspects.Entry(now, suspects.CLEAR, n, cause, job, root, why) for n in nodes])
        self.run.nodes.lift(cause, nodes, why)

    def write(self, entries: list[suspects.Entry]) -> None:
        try:
            suspects.append(self.path(), entries)
        except OSError as exc:
            self.ctx.log(f"could not write the suspects file {self.path()}: {exc}")

    def kept_out(self) -> list[str]:
        """The user's repeat offenders: nodes later jobs of the chain leave out."""
        found = suspects.kept_out(
            suspects.read(self.path()),
            time.time(),
            self.ctx.policy.keep_out_hours * 3600,
            self.ctx.policy.keep_out_faults,
        )
        return [k.node for k in found]
