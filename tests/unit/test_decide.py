"""The supervisor's decisions as pure functions (:mod:`hpcjobs.runtime.supervisor.decide`): what
Slurm and the run say, and the budget, in; the cause, the verdict and the job's exit code out."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hpcjobs.contract.causes import CANCELLED, FINISHED
from hpcjobs.runtime.supervisor.decide import (
    EndFacts,
    Stall,
    budget_verdict,
    end_cause,
    excluded_after,
    exclusion_limit,
    exit_code,
    exit_rule,
    find_stall,
    requeue_cause,
    standby_cause,
)

LEAD = 60  #: the warning's lead time in every row


def facts(
    rc: int = 0,
    signal: str = "",
    *,
    requeued: str | None = None,
    node_failed: bool = False,
    preempted: bool = False,
    cancelled: bool = False,
    left: int | None = None,
    time_left: int | None = None,
    requested: bool = False,
    stopped: bool | None = None,
) -> EndFacts:
    left = left if time_left is None else time_left
    return EndFacts(
        rc, signal, requeued, node_failed, preempted, cancelled, left, LEAD, requested, stopped
    )


@dataclass(frozen=True)
class Row:
    name: str
    facts: EndFacts
    cause: str
    #: Whether the chain goes on; None where no budget is asked (finished, cancelled, Slurm's
    #: own requeue).
    goes_on: bool | None
    code: int
    reason: str = ""
    #: Requeues used for this cause, allowed for it, used in total, allowed in total.
    budget: tuple[int, int, int, int | None] = (0, 2, 0, None)


ROWS = [
    Row("completed", facts(0), FINISHED, None, 0),
    Row(
        "application failure",
        facts(3),
        "application",
        False,
        3,
        "application failed with exit code 3 (not requeued)",
        (0, 0, 0, None),
    ),
    Row("application failure opted in", facts(3), "application", True, 0, "", (0, 1, 0, None)),
    Row(
        "application budget used",
        facts(3),
        "application",
        False,
        3,
        "requeue budget for application exhausted: 1/1",
        (1, 1, 1, None),
    ),
    Row("preempted", facts(0, "warning", preempted=True), "preemption", True, 0),
    Row(
        "preempted, program exited 143",
        facts(143, "warning", preempted=True),
        "preemption",
        True,
        0,
    ),
    Row("preempted without the warning", facts(143, "term", preempted=True), "preemption", True, 0),
    Row(
        "preempted, budget used",
        facts(0, "warning", preempted=True),
        "preemption",
        False,
        1,
        "requeue budget for preemption exhausted: 2/2",
        (2, 2, 2, None),
    ),
    Row("time limit near", facts(0, "warning", left=90), "timeout", True, 0),
    Row("time limit at the margin", facts(0, "warning", left=LEAD + 120), "timeout", True, 0),
    Row("warning by hand", facts(0, "warning", left=LEAD + 121), "preemption", True, 0),
    Row("warning without a time limit", facts(0, "warning", left=None), "preemption", True, 0),
    Row(
        "time limit, budget used",
        facts(0, "warning", left=30),
        "timeout",
        False,
        1,
        "requeue budget for timeout exhausted: 1/1",
        (1, 1, 3, None),
    ),
    Row("scancel's SIGTERM", facts(143, "term"), CANCELLED, None, 143),
    Row("cancelled, program exited 0", facts(0, "term"), CANCELLED, None, 143),
    Row("cancelled as Slurm says", facts(0, cancelled=True), CANCELLED, None, 143),
    Row("cancel wins over a warning", facts(0, "warning", cancelled=True), CANCELLED, None, 143),
    Row("node failure", facts(137, node_failed=True), "node_failure", True, 0),
    Row(
        "node failure wins over a preemption",
        facts(0, "warning", node_failed=True, preempted=True),
        "node_failure",
        True,
        0,
    ),
    Row(
        "preemption wins over a cancel",
        facts(0, "term", preempted=True, cancelled=True),
        "preemption",
        True,
        0,
    ),
    Row(
        "node failure, budget used",
        facts(137, node_failed=True),
        "node_failure",
        False,
        137,
        "requeue budget for node_failure exhausted: 5/5",
        (5, 5, 5, None),
    ),
    Row(
        "total budget used",
        facts(0, "warning", preempted=True),
        "preemption",
        False,
        1,
        "requeue budget exhausted: 2/2 requeues in total",
        (1, 5, 2, 2),
    ),
    Row(
        "total before the cause's budget",
        facts(0, "warning", preempted=True),
        "preemption",
        False,
        1,
        "requeue budget exhausted: 3/3 requeues in total",
        (3, 3, 3, 3),
    ),
    Row("total left", facts(0, "warning", preempted=True), "preemption", True, 0, "", (1, 5, 2, 3)),
    Row(
        "Slurm requeued it: preempted",
        facts(0, requeued="PREEMPTED"),
        "requeued_preemption",
        None,
        0,
    ),
    Row(
        "Slurm requeued it: node failure",
        facts(0, requeued="NODE_FAIL"),
        "requeued_node_failure",
        None,
        0,
    ),
    Row(
        "Slurm requeued it after a warning",
        facts(0, "warning", requeued=""),
        "requeued_preemption",
        None,
        0,
    ),
    Row("Slurm requeued it, no record", facts(0, requeued=""), "requeued_node_failure", None, 0),
    Row(
        "Slurm's requeue wins",
        facts(9, "term", requeued="NODE_FAIL", node_failed=True, cancelled=True),
        "requeued_node_failure",
        None,
        9,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_end_cause_and_budget_verdict(row: Row) -> None:
    cause = end_cause(row.facts)
    assert cause == row.cause
    rc = row.facts.rc
    if row.goes_on is None:
        # No budget: the chain finishes, fails (cancelled), or Slurm brings the job back
        # itself, and the job exits with the program's code.
        if cause.startswith("requeued_"):
            assert rc == row.code
        else:
            assert exit_code(cause, rc, False) == row.code
        return
    used, allowed, total, max_total = row.budget
    verdict = budget_verdict(cause, used, allowed, total, max_total, rc)
    assert (verdict.goes_on, verdict.reason) == (row.goes_on, row.reason)
    assert exit_code(cause, rc, verdict.goes_on) == row.code


# ---- the stall watch's judgement ---------------------------------------------------------------


def test_find_stall_judges_the_rank_furthest_behind() -> None:
    assert find_stall({}, {}, 100.0, 10) is None
    steps, seen = {0: 7, 1: 5, 2: 9}, {0: 95.0, 1: 80.0, 2: 99.0}
    assert find_stall(steps, seen, 100.0, 20) is None  # 20 s idle is not more than 20
    assert find_stall(steps, seen, 100.5, 20) == Stall(rank=1, step=5, idle=20, tied=0)


def test_find_stall_takes_the_oldest_report_among_equals_and_counts_ties() -> None:
    steps = {0: 5, 1: 5, 2: 5, 3: 6}
    seen = {0: 11.0, 1: 10.0, 2: 12.5, 3: 10.0}
    # Rank 1 reported step 5 first; rank 0 within 2 s of it is tied, rank 2 (2.5 s) is not.
    assert find_stall(steps, seen, 100.0, 30) == Stall(rank=1, step=5, idle=90, tied=1)


def test_find_stall_never_judges_a_rank_still_advancing() -> None:
    assert find_stall({0: 3}, {0: 95.0}, 100.0, 10) is None


# ---- Slurm's words ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "signal", "cause"),
    [
        ("PREEMPTED", "", "preemption"),
        ("NODE_FAIL", "", "node_failure"),
        ("NODE_FAIL", "warning", "node_failure"),
        ("", "", "node_failure"),  # no record: an admin's requeue or a lost node
        ("REQUEUED", "", "node_failure"),
        ("", "warning", "preemption"),  # a warning came first: the grace time ran out
        ("REQUEUED", "warning", "preemption"),
    ],
)
def test_requeue_cause(state: str, signal: str, cause: str) -> None:
    assert requeue_cause(state, signal) == cause


@pytest.mark.parametrize(
    ("state", "cause"),
    [
        ("NODE_FAIL", "node_failure"),
        ("BOOT_FAIL", "node_failure"),
        ("PREEMPTED", "preemption"),
        ("TIMEOUT", "timeout"),
        ("DEADLINE", "timeout"),
        ("CANCELLED", None),
        ("CANCELLED by 1000", None),
        ("FAILED", "infrastructure"),
        ("OUT_OF_MEMORY", "infrastructure"),
        ("", "infrastructure"),  # nobody could say: the run died without a word
    ],
)
def test_standby_cause(state: str, cause: str | None) -> None:
    assert standby_cause(state) == cause


# ---- exclusions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_excluded", "room", "limit"),
    [(8, None, 8), (8, 14, 8), (8, 1, 1), (2, 62, 2), (8, 0, 0), (8, -3, 0)],
)
def test_exclusion_limit(max_excluded: int, room: int | None, limit: int) -> None:
    assert exclusion_limit(max_excluded, room) == limit


def test_excluded_after_keeps_the_newest_and_releases_the_oldest() -> None:
    assert excluded_after([], ["n2"], 8) == (["n2"], [])
    # A node excluded again becomes the newest; empty names are no nodes.
    assert excluded_after(["n2", "n5", ""], ["n6", "", "n2"], 8) == (["n5", "n6", "n2"], [])
    assert excluded_after(["n2"], ["n1"], 1) == (["n1"], ["n2"])
    assert excluded_after([], ["n1", "n2", "n3"], 2) == (["n2", "n3"], ["n1"])
    assert excluded_after(["n1", "n2"], [], 0) == ([], ["n1", "n2"])


# ---- done means done (decide.exit_rule) -----------------------------------------------------


@pytest.mark.parametrize(
    ("facts_", "rule", "cause"),
    [
        # The warning came, nobody listens, the program ended on its own: finished.
        (facts(0, "warning", preempted=True, stopped=False), "ended_on_its_own", "none"),
        (facts(0, "warning", time_left=100, stopped=False), "ended_on_its_own", "none"),
        # It listens for the warning (or got SIGTERM) and exited 0: it stopped for it.
        (facts(0, "warning", preempted=True, stopped=True), "stopped_by_signal", "preemption"),
        # It asked for its own requeue: the chain goes on, with or without a warning.
        (facts(0, "warning", preempted=True, requested=True), "asked_to_go_on", "preemption"),
        (facts(0, "", requested=True, stopped=True), "asked_to_go_on", "preemption"),
        # Not an exit 0, or Slurm decided: the rule does not apply.
        (facts(143, "warning", preempted=True, stopped=False), "", "preemption"),
        (facts(0, "term", cancelled=True, stopped=False), "", "cancelled"),
        (facts(0, "", stopped=False), "ended_on_its_own", "none"),
    ],
)
def test_done_means_done(facts_: EndFacts, rule: str, cause: str) -> None:
    assert exit_rule(facts_) == rule
    assert end_cause(facts_) == cause
