"""The supervisor's decisions as pure functions: what Slurm and the run say -> what happens.

Nothing here reads a file or asks Slurm; :mod:`.supervise` gathers the facts and acts on the
answer. ``tests/unit/test_decide.py`` holds the table these functions must match, and
docs/requeue.md shows it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import NamedTuple

from hpcjobs.contract.causes import (
    APPLICATION,
    CANCELLED,
    FINISHED,
    INFRASTRUCTURE,
    NODE_FAILURE,
    PREEMPTION,
    STALL,
    STRAGGLER,
    TIMEOUT,
    of_slurm_state,
)
from hpcjobs.contract.eventlog import RunEnd

#: How much later than the warning lead time a warning may come and still mean "the time
#: limit is near" (Slurm sends it within a minute of the lead time; the rest is margin).
TIMEOUT_MARGIN_S = 120


def requeue_cause(state: str, signal: str = "") -> str:
    """The cause of a requeue Slurm did by itself, from accounting's state of the run it ended.

    PREEMPTED: the grace time ran out before the job ended. NODE_FAIL, an admin's requeue or no
    record: node failure (a warning signal before it still means a preemption)."""
    cause = of_slurm_state(state)
    if cause in (PREEMPTION, NODE_FAILURE):
        return cause
    return PREEMPTION if signal == "warning" else NODE_FAILURE


def standby_cause(state: str) -> str | None:
    """Why the run a standby stood by for ended, from its final state; None: it was cancelled
    (the standby must not run)."""
    cause = of_slurm_state(state)
    if cause in (NODE_FAILURE, PREEMPTION, TIMEOUT):
        return cause
    if cause == CANCELLED:
        return None
    # It failed or completed, yet said nothing: its batch host or its supervisor died.
    return INFRASTRUCTURE


class EndFacts(NamedTuple):
    """What is known when the launcher has exited (see :func:`end_cause`)."""

    rc: int  #: the launcher's exit code (128 + N when a signal N killed it)
    signal: str  #: "" | "term" (a plain SIGTERM) | "warning" (the warning signal)
    requeued_state: str | None  #: Slurm requeued the job itself: its run's accounting state
    node_failed: bool  #: JobState=NODE_FAIL or Reason=NodeDown, or srun named a failed node
    preempted: bool  #: PreemptTime is set
    cancelled: bool  #: Slurm (or accounting) says CANCELLED
    time_left: int | None  #: seconds left before the time limit (asked on a warning only)
    lead: int  #: the warning's lead time
    #: The program asked for its own requeue (``scontrol requeue`` of its job, from inside it).
    requested: bool = False
    #: A stop signal reached the program: the warning, delivered to a process that listens for
    #: it, or SIGTERM passed on (None: not known, as before hpcjobs delivered the warning).
    stopped: bool | None = None


#: :func:`exit_rule`'s answers: why a run that exited 0 is taken as finished or not.
ENDED_ON_ITS_OWN = "ended_on_its_own"
ASKED_TO_GO_ON = "asked_to_go_on"
STOPPED_BY_SIGNAL = "stopped_by_signal"


def exit_rule(facts: EndFacts) -> str:
    """Done means done (docs/requeue.md, "A program that ends on its own"): for a run whose
    program exited 0 (and that Slurm did not requeue itself, nor lost a node),

    - ``asked_to_go_on``: it asked for its own requeue: the chain goes on;
    - ``stopped_by_signal``: a stop signal reached it (the warning it listens for, or SIGTERM):
      it is taken to have stopped for it, and the chain goes on;
    - ``ended_on_its_own``: otherwise, whatever signal came meanwhile: it finished.

    "" where the rule does not apply (another exit code, a requeue by Slurm, a lost node, a
    cancel)."""
    if facts.rc != 0 or facts.requeued_state is not None or facts.node_failed or facts.cancelled:
        return ""
    if facts.requested:
        return ASKED_TO_GO_ON
    if facts.stopped is None or facts.stopped:
        return STOPPED_BY_SIGNAL if facts.signal else ""
    return ENDED_ON_ITS_OWN


def end_cause(facts: EndFacts) -> str:
    """How a run ended: ``requeued_<cause>`` (Slurm requeued it itself), a requeue cause,
    ``cancelled``, or ``none`` (finished). A crash (``application``) is classified further by
    the caller (infrastructure or application)."""
    if facts.requeued_state is not None:
        return "requeued_" + requeue_cause(facts.requeued_state, facts.signal)
    if facts.node_failed:
        return NODE_FAILURE
    if exit_rule(facts) == ENDED_ON_ITS_OWN:
        return FINISHED
    if facts.preempted:
        return PREEMPTION
    if facts.cancelled:
        return CANCELLED
    if facts.signal == "warning":
        if facts.time_left is not None and facts.time_left <= facts.lead + TIMEOUT_MARGIN_S:
            return TIMEOUT
        return PREEMPTION  # the warning signal sent by hand: checkpoint and come back
    if facts.signal == "term":
        return CANCELLED
    if facts.requested:
        return PREEMPTION  # the program's own requeue, without a warning: as one sent by hand
    return FINISHED if facts.rc == 0 else APPLICATION


class Verdict(NamedTuple):
    """What becomes of a chain after a run that ended for a requeue cause."""

    goes_on: bool
    #: The end event's detail when it does not go on.
    reason: str = ""
    #: It does not go on because the total budget is spent (not the cause's).
    total_spent: bool = False


def budget_verdict(
    cause: str, used: int, allowed: int, total: int, max_total: int | None, rc: int = 0
) -> Verdict:
    """Whether one more requeue for ``cause`` is allowed, ``used`` of its ``allowed`` and
    ``total`` of ``max_total`` (None: no limit) having been spent before it."""
    if max_total is not None and total >= max_total:
        return Verdict(
            False, f"requeue budget exhausted: {total}/{max_total} requeues in total", True
        )
    if used >= allowed:
        if allowed == 0 and cause == APPLICATION:
            return Verdict(False, f"application failed with exit code {rc} (not requeued)")
        return Verdict(False, f"requeue budget for {cause} exhausted: {used}/{allowed}")
    return Verdict(True)


def exit_code(cause: str, rc: int, goes_on: bool) -> int:
    """The job's own exit code: 0 when the chain goes on or finished, else the program's
    (1 if it exited 0, 143 for a cancel that left none)."""
    if cause == FINISHED or goes_on:
        return 0
    if cause == CANCELLED:
        return rc or 143
    return rc or 1


def exclusion_limit(max_excluded: int, room: int | None) -> int:
    """How many nodes a chain may exclude: ``max_excluded``, and never more than ``room`` (the
    partition's nodes minus the job's, when known), so that the job still fits."""
    return max(max_excluded if room is None else min(max_excluded, room), 0)


def excluded_after(current: list[str], new: list[str], limit: int) -> tuple[list[str], list[str]]:
    """The chain's exclusions after adding ``new`` nodes (newest last), at most ``limit``:
    (kept, released), the oldest released first."""
    nodes = [n for n in current if n]
    for node in new:
        if node:
            nodes = [n for n in nodes if n != node] + [node]
    cut = max(len(nodes) - limit, 0)
    return nodes[cut:], nodes[:cut]


#: The causes a job with spare nodes recovers from on its own nodes (the faults of a node, and
#: a straggler swapped for a spare); a preemption and the time limit end the allocation itself.
IN_JOB_CAUSES = frozenset({NODE_FAILURE, INFRASTRUCTURE, STALL, STRAGGLER})


def run_size(usable: int, nodes: int, minimum: int, multiple: int = 1) -> int:
    """How many of ``usable`` nodes a run inside the job takes: ``nodes``; with an elastic size
    (``minimum`` below ``nodes``) as many as are left, down to ``minimum``, in multiples of
    ``multiple``. 0: too few."""
    if usable >= nodes:
        return nodes
    size = usable - usable % max(multiple, 1)
    return size if 0 < minimum <= size else 0


def grower_size(run: int, full: int, spares: int, multiple: int = 1) -> tuple[int, int]:
    """The fewest and most nodes a grower asks Slurm for, for a run on ``run`` of ``full``
    nodes in a job with ``spares`` spare nodes: any larger run (the next multiple of
    ``multiple``), up to the full size with its spares."""
    return min(run + max(multiple, 1), full + spares), full + spares


def node_count(fewest: int, most: int) -> str:
    """A node count as sbatch and salloc take it (``--nodes=``): ``3``, or the range ``3-4``."""
    return f"{fewest}-{most}" if fewest < most else str(most)


def sized_launch(argv: Sequence[str], full: int, nodes: int) -> list[str] | None:
    """The launch command for a run on ``nodes`` nodes, its ``launch`` block written for
    ``full``: srun's ``--nodes=<full>`` among srun's own options (before its first word that is
    not one), and torchrun's ``--nnodes=<full>`` between the ``hpcjobs-node`` and
    ``hpcjobs-rank`` markers, say ``nodes``; the program's own arguments are never touched.
    None when the command has no such srun option: it cannot be sized."""
    sized = list(argv)
    if sized[:1] != ["srun"]:
        return None
    found = False
    for i in range(1, len(sized)):
        if not sized[i].startswith("-"):
            break
        if sized[i] == f"--nodes={full}":
            sized[i], found = f"--nodes={nodes}", True
    if not found:
        return None
    if "hpcjobs-node" in sized:
        first = sized.index("hpcjobs-node") + 1
        last = sized.index("hpcjobs-rank") if "hpcjobs-rank" in sized[first:] else first
        for i in range(first, last):
            if sized[i] == f"--nnodes={full}":
                sized[i] = f"--nnodes={nodes}"
    return sized


def step_nodes(allocation: Sequence[str], batch: str, bad: Collection[str], size: int) -> list[str]:
    """The ``size`` nodes a run inside the job takes: the batch host first (the rendezvous is
    there, and the job lives as long as it does), then the allocation's other nodes in order,
    none of ``bad``. [] when fewer are left, or the batch host is bad or not in the job."""
    if batch in bad or batch not in allocation or size < 1:
        return []
    rest = [node for node in allocation if node != batch and node not in bad]
    chosen = [batch, *list(dict.fromkeys(rest))][:size]
    return chosen if len(chosen) == size else []


#: The first word of the line each node's pre-flight check prints: ``MARK node exit last-line``.
PREFLIGHT_MARK = "hpcjobs-preflight"


class Failed(NamedTuple):
    """A node that failed the pre-flight check: its exit code (None: it printed no line, its
    check did not run or did not end), and the check's last line of output."""

    exit: int | None
    output: str


def preflight_failures(out: str, nodes: Sequence[str]) -> dict[str, Failed]:
    """The nodes of ``nodes`` whose pre-flight check failed, in their order, from the lines the
    checks printed (``out``): a non-zero exit, or no line at all."""
    exits: dict[str, Failed] = {}
    for text in out.splitlines():
        words = text.split(" ", 3)
        if len(words) < 3 or words[0] != PREFLIGHT_MARK or words[1] not in nodes:
            continue
        try:
            code = int(words[2])
        except ValueError:
            continue
        exits[words[1]] = Failed(code, words[3].strip() if len(words) > 3 else "")
    failed = {n: exits.get(n, Failed(None, "")) for n in dict.fromkeys(nodes)}
    return {n: f for n, f in failed.items() if f.exit != 0}


def preflight_blames(failed: Collection[str], nodes: Collection[str]) -> bool:
    """Whether the pre-flight check's failures blame the nodes: not when every node failed (a
    check that fails everywhere, or could not run at all, says more of itself or of the site
    than of any node; the run starts as it would without it)."""
    return bool(failed) and len(set(failed)) < len(set(nodes))


class Stall(NamedTuple):
    """A stalled rank as the stall watch found it."""

    rank: int
    step: int
    idle: int  #: seconds since its step last changed
    tied: int  #: other ranks at the same step, reported within 2 s of it


def judged_rank(steps: dict[int, int], seen: dict[int, float]) -> int:
    """The rank the stall watch judges: the lowest step, the oldest report among equals
    (``seen`` must not be empty)."""
    return min(seen, key=lambda r: (steps[r], seen[r]))


def find_stall(
    steps: dict[int, int], seen: dict[int, float], now: float, timeout: float
) -> Stall | None:
    """The stalled rank, if any: the rank with the lowest step (the oldest report among
    equals), when its step has not changed for more than ``timeout`` s. ``steps`` and ``seen``
    map each rank that reported during this run to its step and when that step was first seen."""
    if not seen:
        return None
    oldest = judged_rank(steps, seen)
    idle = now - seen[oldest]
    if idle <= timeout:
        return None
    tied = sum(
        1 for r in seen if r != oldest and steps[r] == steps[oldest] and seen[r] - seen[oldest] <= 2
    )
    return Stall(oldest, steps[oldest], int(idle), tied)


#: The causes a restart storm is made of: faults, whose next run meets the same program on
#: the same data (a preemption or the time limit says nothing of the program).
STORM_CAUSES = frozenset({NODE_FAILURE, INFRASTRUCTURE, STALL, APPLICATION})
#: The causes whose same failure on another node points at the program, not the node (a node
#: failure is Slurm's word that the node itself went away).
PROGRAM_CAUSES = frozenset({INFRASTRUCTURE, STALL, APPLICATION})


def advanced(before: RunEnd, after: RunEnd) -> bool | None:
    """Whether the run that ended as ``after`` got further than the one that ended as
    ``before``: a newer checkpoint, or a later step reached. None: not known (the program
    reports no progress, and no newer checkpoint shows it moved)."""
    old, new = before.checkpoint, after.checkpoint
    if old is not None and new is not None and new > old:
        return True
    old, new = before.progress, after.progress
    if old is None or new is None or old < 0 or new < 0:
        return None
    return new > old


def signature(evidence: str) -> str:
    """The evidence with what differs between nodes and runs (host names, addresses, ranks,
    process ids, times: every number) left out, to compare two failures."""
    return re.sub(r"\d+", "#", evidence).strip()


def same_failure(before: RunEnd, after: RunEnd) -> bool:
    """Whether ``after`` repeats ``before``: the same cause, no further, and (where that is not
    known from progress) the same evidence."""
    if before.cause != after.cause:
        return False
    moved = advanced(before, after)
    if moved is None:
        return bool(after.evidence) and signature(before.evidence) == signature(after.evidence)
    return not moved


def storm(ends: Sequence[RunEnd], runs: int) -> bool:
    """Whether the newest ``runs`` run ends (oldest first, the run just ended last) make a
    restart storm: each a fault of :data:`STORM_CAUSES`, each the same failure as the one
    before (:func:`same_failure`). ``runs`` below 2 turns the rule off."""
    if runs < 2 or len(ends) < runs:
        return False
    last = list(ends[-runs:])
    if last[0].cause not in STORM_CAUSES:
        return False
    return all(same_failure(last[i - 1], last[i]) for i in range(1, len(last)))


def points_at_program(before: RunEnd | None, after: RunEnd) -> bool:
    """Whether the run just ended (``after``) points at the program, not at its suspect: it
    failed as the run before did, with no progress between them, and that one's suspect was
    another node (the same failure on different nodes)."""
    if before is None or after.cause not in PROGRAM_CAUSES:
        return False
    if not before.node or not after.node or before.node == after.node:
        return False
    return same_failure(before, after)


def storm_detail(ends: Sequence[RunEnd], runs: int) -> dict[str, object]:
    """What repeated in a restart storm of the newest ``runs`` ends: the ``end`` event's
    ``repeated`` field."""
    last = list(ends[-runs:])
    nodes = list(dict.fromkeys(e.node for e in last if e.node))
    evidence = next((e.evidence for e in reversed(last) if e.evidence), "")
    return {
        "cause": last[-1].cause,
        "runs": runs,
        "checkpoint": last[-1].checkpoint,
        "progress": last[-1].progress,
        "nodes": nodes,
        "evidence": evidence,
    }


def storm_reason(repeated: dict[str, object]) -> str:
    """The ``end`` event's detail for a restart storm (:func:`storm_detail`)."""
    where = []
    progress, checkpoint = repeated.get("progress"), repeated.get("checkpoint")
    if isinstance(progress, int) and progress >= 0:
        where.append(f"at step {progress}")
    if isinstance(checkpoint, int):
        where.append("no checkpoint" if checkpoint < 0 else f"checkpoint {checkpoint}")
    nodes = repeated.get("nodes") or []
    on = f" on {','.join(str(n) for n in nodes)}" if isinstance(nodes, list) and nodes else ""
    place = f" ({', '.join(where)})" if where else ""
    return (
        f"restart storm: {repeated['runs']} runs in a row ended with {repeated['cause']}{on}"
        f"{place} and none got further"
    )
