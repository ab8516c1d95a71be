"""``hpcjobs cancel``: cancel jobs, or send them a signal."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.common import chains_for, slurm_access
from hpcjobs.cli.options import host_option
from hpcjobs.contract.slurmstates import is_terminal
from hpcjobs.errors import BadInputError, HpcJobsError
from hpcjobs.jobs.chain import CANCELLED_PENDING, Event, append_event, load_chain
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.client import check_job_ids
from hpcjobs.slurm.statusquery import query_status, row_matches

if TYPE_CHECKING:
    from hpcjobs.jobs.chain import ChainRef
    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient

_SIGNAL = re.compile(r"(?:SIG)?[A-Z][A-Z0-9+-]*|[0-9]{1,2}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_ids", nargs=-1, required=True, metavar="JOBID...")
@click.option(
    "-s",
    "--signal",
    "signal",
    metavar="SIG",
    help="Send this signal (USR1, SIGTERM, 10, ...) instead of cancelling.",
)
@host_option
@click.pass_context
def cancel(
    ctx: click.Context, job_ids: tuple[str, ...], signal: str | None, host: str | None
) -> None:
    """Cancel JOBID... (array ids cancel every task; use JOBID_N for one task).

    All jobs go to Slurm in one scancel call. Jobs that had already ended are reported, not
    treated as errors. Exits 3 if Slurm does not know a job. For a job hpcjobs continued
    after a preemption or timeout, the first id stands for the whole chain: its current job
    and any pending continuation are cancelled (or signalled) too. A pending job never runs
    its script, so for one cancelled while pending, cancel logs the chain's end
    (``end fail cancelled ...``) in its event log; a running job logs its own.
    """
    ids = check_job_ids(job_ids)
    if signal is not None:
        signal = signal.strip().upper()
        if not signal.isascii() or not _SIGNAL.fullmatch(signal):
            raise BadInputError(
                f"not a signal: {signal!r}", hint="use a name like USR1 or a number"
            )
    runner, client = slurm_access(ctx, host)
    chains = chains_for(runner, ids, host)
    for root, ref in chains.items():
        later = [j for j in ref.chain.job_ids if j != root and j not in ids]
        if later and ref.chain.final is None:
            ids += later if signal is None else [ref.current]
        if signal is None and ref.chain.final is None:
            # The current run's standby and grower must not start after a cancel.
            ids += [job for job in _waiting(ref) if job not in ids]
    # A chain's newest job that is pending never runs its script, so nothing would log the
    # chain's end: note which ones are pending now (one squeue for all), and log it below.
    open_chains = [ref for ref in chains.values() if ref.chain.final is None]
    pending = _pending(client, [ref.current for ref in open_chains]) if signal is None else {}
    outcome = client.cancel(ids, signal=signal)
    verb = f"sent {signal} to" if signal else "cancelled"
    for job_id in outcome.signalled:
        click.echo(f"{verb} {job_id}")
    for ref in open_chains:
        if ref.current in pending and ref.current in outcome.signalled:
            _log_cancelled(runner, ref, pending[ref.current])
    if signal is None:
        running = [
            ref
            for ref in open_chains
            if ref.current not in pending and ref.current in outcome.signalled
        ]
        for job_id in _late_standbys(runner, client, running, host, set(ids)):
            click.echo(f"cancelled {job_id} (a standby submitted while the cancel ran)")
    finished = list(outcome.finished)
    unknown: list[str] = []
    if outcome.unknown:
        # scancel says "invalid job id" for ended jobs too: tell the two apart.
        report = query_status(client, list(outcome.unknown))
        unknown = report.unknown
        finished += [j for j in outcome.unknown if j not in unknown]
    for job_id in finished:
        click.echo(f"{job_id} had already ended")
    if unknown:
        raise UnknownJobError(unknown)


#: How long ``cancel`` waits for a cancelled running job's script to end before it looks for a
#: standby that script submitted while the cancel ran (the standby also refuses to run after a
#: cancelled job; this keeps it from even being scheduled).
LATE_STANDBY_WAIT_S = 10.0


def _late_standbys(
    runner: Runner,
    client: SlurmClient,
    running: list[ChainRef],
    host: str | None,
    cancelled: set[str],
) -> list[str]:
    """Cancel the standbys (and continuations) that the cancelled running jobs' scripts
    submitted while the cancel ran: once each job's script has ended (or after
    LATE_STANDBY_WAIT_S), read its chain again."""
    if not running:
        return []
    currents = [ref.current for ref in running]
    deadline = time.monotonic() + LATE_STANDBY_WAIT_S
    while time.monotonic() < deadline:
        # squeue keeps listing an ended job for a while (MinJobAge): wait for the end only
        # (a COMPLETING job's script may still be in its signal trap).
        if all(is_terminal(row.state) for row in client.queue(currents)):
            break
        time.sleep(0.5)
    late: list[str] = []
    for ref in running:
        again = load_chain(ref.root, runner, host=host)
        if again is None:
            continue
        late += [
            job_id
            for job_id in [
                *again.chain.standby_ids,
                *again.chain.grower_ids,
                *again.chain.job_ids,
            ]
            if job_id not in cancelled and job_id not in late
        ]
    if not late:
        return []
    outcome = client.cancel(late)
    return list(outcome.signalled)


def _waiting(ref: ChainRef) -> list[str]:
    """The jobs waiting in the queue for the chain's current run: its standby, its grower."""
    found = (ref.chain.standby_for(ref.current), ref.chain.grower_for(ref.current))
    return [job for job in found if job]


def _pending(client: SlurmClient, job_ids: list[str]) -> dict[str, int]:
    """Which of ``job_ids`` are pending (one squeue), with their restart counts."""
    found: dict[str, int] = {}
    if not job_ids:
        return found
    for row in client.queue(job_ids):
        for job_id in job_ids:
            if row.state == "PENDING" and row_matches(job_id, row.job_id, row.raw_id):
                found[job_id] = row.restarts
    return found


def _log_cancelled(runner: Runner, ref: ChainRef, restarts: int) -> None:
    """Log the end of a chain whose newest job was cancelled while pending; warn on failure."""
    detail = CANCELLED_PENDING.format(job_id=ref.current)
    event = Event(time.time(), ref.current, restarts, "end", "fail", detail)
    try:
        append_event(runner, ref, event)
    except HpcJobsError as exc:
        click.secho(
            f"Warning: could not log the end of chain {ref.root} in its event log: {exc.message}",
            err=True,
            fg="yellow",
        )
