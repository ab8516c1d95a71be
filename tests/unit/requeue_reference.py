"""The requeue decision restated, as the reference the job's supervisor is tested against.

What runs is the job's supervisor (:mod:`hpcjobs.runtime.supervisor`, standard library only: it
runs where hpcjobs is not installed). This module states the same policy, cause classification
included, on its own, and tests/unit/test_requeue.py checks both against one table.

Contract with the application: it receives the warning signal, checkpoints and exits with any
exit code. hpcjobs decides from the *cause* (preemption, timeout, node failure) and the budget,
not from the exit code. An application that wants to declare "finished" writes the done marker
(:meth:`hpcjobs.runtime.checkpoint.CheckpointDir.mark_done`). A run that ends on its own (no warning
signal) with exit 0 is finished; with another exit code it is an application failure, requeued
only when the ``application`` budget allows it (0 by default).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Cause(str, enum.Enum):
    """Why a run of a job ended."""

    NONE = "none"  # it ended by itself
    PREEMPTION = "preemption"
    TIMEOUT = "timeout"
    NODE_FAILURE = "node_failure"
    APPLICATION = "application"  # it ended by itself with a non-zero exit code
    CANCELLED = "cancelled"  # SIGTERM that was neither preemption nor the time limit


class Action(str, enum.Enum):
    REQUEUE = "requeue"
    FINISH = "finish"  # success: the job is done
    FAIL = "fail"  # the job ends as failed


@dataclass(frozen=True)
class Budget:
    """How many times a job may be requeued for each cause, and in total."""

    preemption: int = 20
    timeout: int = 10
    node_failure: int = 5
    application: int = 0
    total: int | None = None

    def for_cause(self, cause: Cause) -> int:
        return {
            Cause.PREEMPTION: self.preemption,
            Cause.TIMEOUT: self.timeout,
            Cause.NODE_FAILURE: self.node_failure,
            Cause.APPLICATION: self.application,
        }.get(cause, 0)


@dataclass(frozen=True)
class Decision:
    action: Action
    cause: Cause
    reason: str
    exit_code: int


def classify(*, exit_code: int, signal: str | None, preempted: bool, timed_out: bool) -> Cause:
    """The cause of a run's end, from what the batch script can observe.

    Args:
        exit_code: The application's exit code.
        signal: ``"warning"`` if the warning signal arrived, ``"term"`` for SIGTERM, else None.
        preempted: Slurm recorded a preemption time for the job.
        timed_out: The job was within its signal lead time of the time limit.
    """
    if preempted:
        return Cause.PREEMPTION
    if timed_out:
        return Cause.TIMEOUT
    if signal == "warning":
        # The warning signal sent by hand (scancel --signal): checkpoint and come back.
        return Cause.PREEMPTION
    if signal == "term":
        return Cause.CANCELLED
    return Cause.NONE if exit_code == 0 else Cause.APPLICATION


def decide(
    cause: Cause,
    *,
    exit_code: int,
    done: bool,
    counts: Mapping[Cause, int],
    budget: Budget,
    slurm_requeued: bool = False,
) -> Decision:
    """What to do after a run ended.

    Args:
        cause: Why the run ended (see :func:`classify`).
        exit_code: The application's exit code (informational except for ``NONE``).
        done: Whether the done marker exists.
        counts: Requeues already spent, per cause.
        budget: The job's requeue budget.
        slurm_requeued: Slurm already requeued the job itself (a node failed, or the
            preemption grace time ran out): it comes back under the same id, so nothing is
            submitted and the run is not finished, whatever the exit code. Budgets are
            checked when that next run starts.
    """
    if slurm_requeued:
        return Decision(Action.REQUEUE, cause, "requeued by Slurm", exit_code)
    if done:
        return Decision(Action.FINISH, cause, "done marker present", 0)
    if cause is Cause.NONE:
        return Decision(Action.FINISH, cause, "completed", 0)
    if cause is Cause.CANCELLED:
        return Decision(Action.FAIL, cause, "cancelled", exit_code or 143)
    used = counts.get(cause, 0)
    allowed = budget.for_cause(cause)
    total_used = sum(counts.values())
    if budget.total is not None and total_used >= budget.total:
        return Decision(
            Action.FAIL,
            cause,
            f"requeue budget exhausted: {total_used}/{budget.total} requeues in total",
            exit_code or 1,
        )
    if used >= allowed:
        what = (
            "application failures are not requeued"
            if allowed == 0
            else (f"requeue budget for {cause.value} exhausted: {used}/{allowed}")
        )
        return Decision(Action.FAIL, cause, what, exit_code or 1)
    return Decision(
        Action.REQUEUE, cause, f"{cause.value}: requeue {used + 1} of {allowed}", exit_code
    )
