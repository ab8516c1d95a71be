"""``hpcjobs status``: state, reason, nodes, elapsed time and restarts of jobs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from hpcjobs.cli import report_error
from hpcjobs.cli.common import chains_for, slurm_access
from hpcjobs.cli.options import host_option
from hpcjobs.errors import EXIT_SLURM
from hpcjobs.jobs.follow import Follower, PollSchedule
from hpcjobs.runtime.supervisor.grow import WAITING as GROWER_STATES
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.client import check_job_ids
from hpcjobs.slurm.parse import format_duration
from hpcjobs.slurm.statusquery import StatusReport, query_status, row_matches
from hpcjobs.texttable import table

#: A grower's Slurm states while it waits in the queue: those in which it may still take over
#: (the supervisor's own list), but running (then it takes over).
GROWER_WAITS = tuple(state for state in GROWER_STATES if state != "RUNNING")

if TYPE_CHECKING:
    from hpcjobs.jobs.chain import ChainRef
    from hpcjobs.slurm.statusquery import JobStatus


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_ids", nargs=-1, metavar="[JOBID]...")
@click.option("--mine", is_flag=True, help="Your jobs in the queue (the default without ids).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--watch",
    is_flag=True,
    help="Redraw until all the jobs end (Ctrl-C to stop). Refreshes back off from 5 s to 60 s.",
)
@host_option
@click.pass_context
def status(
    ctx: click.Context,
    job_ids: tuple[str, ...],
    mine: bool,
    as_json: bool,
    watch: bool,
    host: str | None,
) -> None:
    """Show the state of jobs: state, reason, nodes, elapsed time and restarts.

    One Slurm query per refresh however many jobs you name: squeue for jobs the controller
    still holds, and one sacct for the others (it also counts the restarts of requeued jobs).
    Exits 3 if Slurm knows none of some ids.

    A job that hpcjobs continued after a preemption or timeout runs on under a new job id;
    give the first id and status shows the chain's current job (a note on stderr says which),
    with CHAIN (the first id) and RUNS (runs of the whole chain); --json adds chain_root,
    chain_jobs and runs to each job (null for a job that is not part of such a chain).

    An elastic job running below its full size keeps a grower, a job of the chain that waits in
    the queue for more nodes: status says so under the table, with the grower's state and
    reason (in the same query), and --json adds it as "grower" (null when there is none).
    """
    ids = check_job_ids(job_ids)
    runner, client = slurm_access(ctx, host)
    chains = chains_for(runner, ids, host)
    for root, ref in chains.items():
        if ref.current != root:
            click.echo(f"job {root} continues as job {ref.current}", err=True)
    ids = [chains[i].current if i in chains else i for i in ids]
    by_current = {ref.current: ref for ref in chains.values()}
    growers = {
        ref.current: found for ref in chains.values() if (found := ref.waiting_grower()) is not None
    }
    asked = [*ids, *(grower for grower, _, _ in growers.values() if grower not in ids)]

    def query() -> tuple[StatusReport, dict[str, dict[str, Any]]]:
        return _apart(query_status(client, asked or None, mine=mine), ids, growers)

    if not watch:
        report, waiting = query()
        _show(report, as_json, by_current, waiting)
        _exit_for_unknown(ctx, report)
        return
    follower = Follower()
    delays = PollSchedule().delays()
    redraw = sys.stdout.isatty() and not as_json
    try:
        while True:
            report, waiting = query()
            follower.update(report.jobs)
            if redraw:
                click.echo("\x1b[H\x1b[2J", nl=False)
            click.echo(f"Every refresh: one Slurm query.  {time.strftime('%H:%M:%S')}")
            _show(report, as_json, by_current, waiting)
            if report.unknown or (ids and follower.done()):
                _exit_for_unknown(ctx, report)
                return
            time.sleep(next(delays))
    except KeyboardInterrupt:
        ctx.exit(130)


def _apart(
    report: StatusReport, ids: list[str], growers: Mapping[str, tuple[str, str, bool]]
) -> tuple[StatusReport, dict[str, dict[str, Any]]]:
    """The report of the jobs asked for, without the growers asked along while they wait in
    the queue (one that runs is the chain's next job: it stays; one that left the queue is not
    an unknown id); and each running job's waiting grower (its ``grower`` field: id, size,
    state, reason, and whether its nodes join the job)."""
    extra = {grower for grower, _, _ in growers.values() if grower not in ids}
    jobs = [j for j in report.jobs if j.job_id not in extra or j.state not in GROWER_WAITS]
    unknown = [job_id for job_id in report.unknown if job_id not in extra]
    waiting: dict[str, dict[str, Any]] = {}
    for current, (grower, size, joins) in growers.items():
        runs = any(j.job_id == current and j.state == "RUNNING" for j in report.jobs)
        row = next((j for j in report.jobs if j.job_id == grower), None)
        if runs and row is not None and row.state in GROWER_WAITS:
            waiting[current] = {
                "job_id": grower,
                "size": size,
                "state": row.state,
                "reason": row.reason,
                "joins": joins,
            }
    return StatusReport(jobs, unknown, report.accounting), waiting


def grower_note(job: JobStatus, grower: Mapping[str, Any]) -> str:
    """Why a chain's job runs below its full size, in one line under the table."""
    size, held = str(grower["size"]), job.nodes
    needs = size.split("-")[0]
    why = f"{grower['state']}: {grower['reason']}" if grower["reason"] else grower["state"]
    besides = f" besides the {held} it holds" if held else ""
    if grower.get("joins"):
        return (
            f"job {job.job_id} runs below its full size; its grower job {grower['job_id']} "
            f"waits for {size or 'more'} more nodes ({why}), which join the job once Slurm "
            'grants them (job expansion; docs/requeue.md, "Growing back")'
        )
    return (
        f"job {job.job_id} runs below its full size; its grower job {grower['job_id']} waits "
        f"for {size or 'more'} nodes ({why}): Slurm adds no nodes to this running job (it holds "
        "GPUs, or the site does not permit job expansion), so "
        f"the chain grows once {needs or 'that many'} nodes are free{besides} "
        '(docs/requeue.md, "Growing back")'
    )


def _show(
    report: object,
    as_json: bool,
    chains: Mapping[str, ChainRef],
    waiting: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    assert isinstance(report, StatusReport)
    waiting = waiting or {}
    if as_json:
        data = {
            "jobs": [
                {**job.to_dict(), **chain_fields(job, chains), "grower": waiting.get(job.job_id)}
                for job in report.jobs
            ],
            "unknown": report.unknown,
            "accounting": report.accounting,
        }
        click.echo(json.dumps(data, indent=2))
        return
    if not report.jobs:
        if not report.unknown:  # else the error says it all
            click.echo("No jobs.")
        return
    rows = [
        [
            job.job_id,
            job.name,
            job.state,
            job.reason or "-",
            str(job.nodes if job.nodes is not None else "-"),
            job.nodelist or "-",
            format_duration(job.elapsed_s),
            str(job.restarts),
        ]
        for job in report.jobs
    ]
    headers = ["JOBID", "NAME", "STATE", "REASON", "NODES", "NODELIST", "ELAPSED", "RESTARTS"]
    fields = [chain_fields(job, chains) for job in report.jobs]
    if any(f["chain_root"] is not None for f in fields):
        headers += ["CHAIN", "RUNS"]
        for row, f in zip(rows, fields, strict=True):
            row += [str(f["chain_root"] or "-"), str(f["runs"] if f["runs"] is not None else "-")]
    click.echo(table(headers, rows))
    for job in report.jobs:
        if job.job_id in waiting:
            click.echo(grower_note(job, waiting[job.job_id]))


def chain_fields(job: JobStatus, chains: Mapping[str, ChainRef]) -> dict[str, Any]:
    """What ``status`` adds for a job that is the newest of a chain hpcjobs follows.

    ``chain_root`` is the chain's first job id, ``chain_jobs`` all of its ids, and ``runs`` how
    many runs the chain has had: its ``start`` events, or what Slurm counts if that is more (runs
    of the jobs before this one, this job's restarts, and its own run unless it is pending).
    All three are None for a job that is not part of such a chain.
    """
    ref = next((r for current, r in chains.items() if row_matches(current, job.job_id, "")), None)
    if ref is None:
        return {"chain_root": None, "chain_jobs": None, "runs": None}
    ids = ref.chain.job_ids or [ref.root]
    before = ids.index(ref.current) if ref.current in ids else len(ids) - 1
    counted = before + job.restarts + (0 if job.state == "PENDING" else 1)
    return {"chain_root": ref.root, "chain_jobs": ids, "runs": max(ref.chain.starts, counted)}


def _exit_for_unknown(ctx: click.Context, report: object) -> None:
    assert isinstance(report, StatusReport)
    if not report.unknown:
        return
    error = UnknownJobError(report.unknown)
    if not report.accounting:
        error.hint = (
            "this cluster keeps no accounting, so jobs that left the queue cannot be looked up"
        )
    report_error(error)
    ctx.exit(EXIT_SLURM)
