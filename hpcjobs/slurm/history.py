"""Every run of a job, from ``sacct --duplicates``, and why each run ended.

A requeued job keeps its id; accounting keeps one record per run. Each run ends for a cause of
the one vocabulary (:mod:`hpcjobs.contract.causes`: ``preemption``, ``timeout``,
``node_failure``, ``application``, ``cancelled``), or it was ``requeued`` (``scontrol
requeue``; ``requeued_by_hpcjobs`` when hpcjobs asked for it), or it ``completed``; the current
run is ``running`` or ``pending``. Between two runs lies the gap the job spent waiting to run
again.

:class:`Run` is a plain dataclass so that more per-run facts (resume latency, checkpoint used)
can be added as new fields with defaults without breaking ``--json`` consumers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hpcjobs.contract import causes
from hpcjobs.slurm import parse
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.client import check_job_ids
from hpcjobs.slurm.statusquery import group_runs

if TYPE_CHECKING:
    from hpcjobs.slurm.client import SlurmClient

#: What ended a run, besides the causes: requeued (by hand, or by hpcjobs), completed, or
#: not ended yet.
REQUEUED = "requeued"
REQUEUED_BY_HPCJOBS = "requeued_by_hpcjobs"
COMPLETED = "completed"
RUNNING = "running"
PENDING = "pending"

#: A detail for the states that say more than their cause (the causes: :data:`causes.SLURM_STATES`).
_DETAILS = {
    "TIMEOUT": "time limit reached",
    "DEADLINE": "deadline reached",
    "BOOT_FAIL": "node failed to boot",
    "OUT_OF_MEMORY": "out of memory",
}

_OUTCOMES: dict[str, tuple[str, str]] = {
    "COMPLETED": (COMPLETED, ""),
    "REQUEUED": (REQUEUED, ""),
    "REQUEUE_HOLD": (REQUEUED, "held after requeue"),
    "REQUEUE_FED": (REQUEUED, ""),
    "SPECIAL_EXIT": (REQUEUED, "held in special exit state"),
    "RUNNING": (RUNNING, ""),
    "COMPLETING": (RUNNING, "completing"),
    "SUSPENDED": (RUNNING, "suspended"),
    "PENDING": (PENDING, ""),
}


@dataclass(frozen=True)
class Run(parse.AcctRow):
    """One run of a job, from one start to the next requeue or to the end: its accounting
    record, where it stands among the job's runs, and how it ended."""

    index: int  # 0 for the first run; equals SLURM_RESTART_COUNT inside that run
    cause: str
    detail: str
    gap_to_next_s: float | None = None  # end of this run to the start of the next one

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: datetimes as ISO strings."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, datetime):
                out[key] = value.isoformat()
        return out


@dataclass(frozen=True)
class JobHistory:
    """All runs of one job id (an array task has its own)."""

    job_id: str
    name: str
    runs: list[Run] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        return max(0, len(self.runs) - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "restarts": self.restarts,
            "runs": [run.to_dict() for run in self.runs],
        }


def classify_run(row: parse.AcctRow, *, requeued_by_hpcjobs: bool = False) -> tuple[str, str]:
    """``(cause, detail)`` for how one accounting record ended."""
    cause = causes.of_slurm_state(row.state)
    if cause:
        detail = _DETAILS.get(row.state, "")
    else:
        cause, detail = _OUTCOMES.get(row.state, (row.state.lower(), ""))
    if cause == REQUEUED and requeued_by_hpcjobs:
        cause = REQUEUED_BY_HPCJOBS
    elif cause == causes.APPLICATION and row.exit_code is not None and not detail:
        detail = f"exit code {row.exit_code}"
        if row.exit_signal:
            detail += f", signal {row.exit_signal}"
    elif cause == causes.CANCELLED and row.cancelled_by is not None:
        detail = f"by uid {row.cancelled_by}"
    return cause, detail


def build_history(
    rows: Sequence[parse.AcctRow],
    *,
    hpcjobs_requeues: Mapping[str, Collection[int]] | None = None,
) -> list[JobHistory]:
    """Histories from ``sacct -D`` records, one per job id, runs in order.

    Args:
        rows: accounting records, any order, possibly of several jobs.
        hpcjobs_requeues: job id -> indexes of runs that hpcjobs itself requeued.
    """
    marks = hpcjobs_requeues or {}
    histories = []
    for job_id, group in group_runs(rows).items():
        runs: list[Run] = []
        for index, row in enumerate(group):
            cause, detail = classify_run(row, requeued_by_hpcjobs=index in marks.get(job_id, ()))
            runs.append(Run(**_fields_of(row), index=index, cause=cause, detail=detail))
        for i in range(len(runs) - 1):
            this, nxt = runs[i], runs[i + 1]
            if this.end and nxt.start:
                runs[i] = replace(this, gap_to_next_s=(nxt.start - this.end).total_seconds())
        histories.append(JobHistory(job_id=job_id, name=group[-1].name, runs=runs))
    return histories


def _fields_of(row: parse.AcctRow) -> dict[str, Any]:
    return {f.name: getattr(row, f.name) for f in fields(parse.AcctRow)}


def job_history(
    client: SlurmClient,
    job_id: str,
    *,
    hpcjobs_requeues: Mapping[str, Collection[int]] | None = None,
) -> list[JobHistory]:
    """Every run of ``job_id`` (every task's, for an array), from one ``sacct -D`` call.

    Raises:
        UnknownJobError: accounting has no record of the job.
        AccountingDisabledError: the cluster keeps no accounting.
    """
    (clean,) = check_job_ids([job_id])
    rows = client.accounting([clean], duplicates=True)
    histories = build_history(rows, hpcjobs_requeues=hpcjobs_requeues)
    if not histories:
        raise UnknownJobError([clean])
    return histories
