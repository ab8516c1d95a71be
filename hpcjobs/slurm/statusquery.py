"""What ``hpcjobs status`` shows: one batched query per refresh, live jobs first.

``squeue`` answers for jobs the controller still holds (running, pending, and finished ones
for ``MinJobAge``, 5 minutes by default). Ids it no longer knows go to one ``sacct -D`` call,
whose duplicate records also count the restarts of a requeued job. Without accounting those
ids stay unknown. So a refresh costs one Slurm call, two at most, for any number of jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hpcjobs.contract.slurmstates import is_terminal
from hpcjobs.slurm import parse
from hpcjobs.slurm.classify import AccountingDisabledError

if TYPE_CHECKING:
    from hpcjobs.slurm.client import SlurmClient


@dataclass(frozen=True)
class JobStatus:
    """One line of ``hpcjobs status``: a job, an array task, or a block of pending tasks."""

    job_id: str
    name: str
    state: str
    reason: str
    nodelist: str
    nodes: int | None
    elapsed_s: int | None
    restarts: int
    partition: str
    user: str
    source: str  # "queue" or "accounting"
    exit_code: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StatusReport:
    """The answer to one refresh."""

    jobs: list[JobStatus]
    unknown: list[str] = field(default_factory=list)
    accounting: bool = True  # False when sacct is unavailable on this cluster


def row_matches(wanted: str, job_id: str, raw_id: str) -> bool:
    """True if a Slurm record (``job_id`` as shown, ``raw_id`` internal) answers ``wanted``.

    ``12`` matches the job 12 and every task of array 12; ``12_3`` matches task 3, also while
    it still sits in a pending block such as ``12_[0-9%2]``.
    """
    if wanted in (job_id, raw_id):
        return True
    base, _, task = wanted.partition("_")
    row_base, _, row_tasks = job_id.partition("_")
    if row_base != base:
        return False
    if not task:
        return True
    return bool(row_tasks) and _task_in(int(task), row_tasks.strip("[]"))


def _task_in(task: int, spec: str) -> bool:
    body = spec.split("%", 1)[0]
    for part in body.split(","):
        first, _, rest = part.partition("-")
        last, _, step = rest.partition(":")
        if not first.isdigit():
            continue
        lo = int(first)
        hi = int(last) if last.isdigit() else lo
        stride = int(step) if step.isdigit() else 1
        if lo <= task <= hi and (task - lo) % stride == 0:
            return True
    return False


def from_queue(row: parse.QueueRow) -> JobStatus:
    return JobStatus(
        job_id=row.job_id,
        name=row.name,
        state=row.state,
        reason=row.reason,
        nodelist=row.nodelist,
        nodes=row.nodes,
        elapsed_s=row.elapsed_s,
        restarts=row.restarts,
        partition=row.partition,
        user=row.user,
        source="queue",
    )


def from_accounting(runs: Sequence[parse.AcctRow]) -> JobStatus:
    """The latest run of one job id; the runs before it are its restarts."""
    last = latest_run(runs)
    return JobStatus(
        job_id=last.job_id,
        name=last.name,
        state=last.state,
        # Accounting keeps the last reason the job waited for (a standby's "Dependency"),
        # which says nothing about a job that ended.
        reason="" if is_terminal(last.state) else last.reason,
        nodelist=last.nodelist,
        nodes=last.nodes,
        elapsed_s=last.elapsed_s,
        restarts=len(runs) - 1,
        partition=last.partition,
        user=last.user,
        source="accounting",
        exit_code=last.exit_code,
    )


def latest_run(runs: Sequence[parse.AcctRow]) -> parse.AcctRow:
    """The most recent of several records of one job id (by submit, then start time)."""
    return sorted(runs, key=run_order)[-1]


def run_order(row: parse.AcctRow) -> tuple[float, float]:
    """Sort key: a requeued run is submitted (requeued) after the previous run ended."""
    submit = row.submit.timestamp() if row.submit else 0.0
    start = row.start.timestamp() if row.start else float("inf")
    return submit, start


def group_runs(rows: Sequence[parse.AcctRow]) -> dict[str, list[parse.AcctRow]]:
    """Accounting records grouped by job id (as shown), in first-seen order, runs sorted; the
    records of a run Slurm resized are one run (:func:`parse.fold_resized`)."""
    groups: dict[str, list[parse.AcctRow]] = {}
    for row in rows:
        groups.setdefault(row.job_id, []).append(row)
    return {
        key: parse.fold_resized(
            sorted(runs, key=run_order), lambda r: r.job_id, lambda r: r.state, _fold_resized
        )
        for key, runs in groups.items()
    }


def _fold_resized(earlier: parse.AcctRow, later: parse.AcctRow) -> parse.AcctRow:
    """One run from the record of its earlier size and the next one."""
    elapsed = None
    if earlier.elapsed_s is not None or later.elapsed_s is not None:
        own = (later.elapsed_s or 0) - parse.resized_overlap(earlier.end, later.start)
        elapsed = (earlier.elapsed_s or 0) + max(0, own)
    return replace(
        later,
        submit=earlier.submit or later.submit,
        eligible=earlier.eligible or later.eligible,
        start=earlier.start or later.start,
        elapsed_s=elapsed,
    )


def query_status(
    client: SlurmClient, job_ids: Sequence[str] | None = None, *, mine: bool = False
) -> StatusReport:
    """Status of ``job_ids`` (or of the caller's jobs): one ``squeue``, one ``sacct`` at most.

    Without ids (or with ``mine``) only the queue is asked: it holds every live job.
    """
    wanted = list(dict.fromkeys(job_ids or []))
    rows = client.queue(wanted or None, mine=mine or not wanted)
    jobs = [from_queue(r) for r in rows]
    if not wanted:
        return StatusReport(jobs)
    missing = [w for w in wanted if not any(row_matches(w, r.job_id, r.raw_id) for r in rows)]
    if not missing:
        return StatusReport(jobs)
    try:
        records = client.accounting(missing, duplicates=True)
    except AccountingDisabledError:
        return StatusReport(jobs, unknown=missing, accounting=False)
    runs = group_runs(records)
    jobs += [from_accounting(group) for group in runs.values()]
    unknown = [w for w in missing if not any(row_matches(w, r.job_id, r.raw_id) for r in records)]
    return StatusReport(jobs, unknown=unknown)
