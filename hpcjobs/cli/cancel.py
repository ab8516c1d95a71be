"""``hpcjobs cancel``: cancel jobs, or send them a signal."""

from __future__ import annotations

import re

import click

from hpcjobs.cli.common import chains_for, slurm_access
from hpcjobs.cli.options import host_option

_SIGNAL = re.compile(r"^(?:SIG)?[A-Z][A-Z0-9+-]*$|^\d{1,2}$")


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
    and any pending continuation are cancelled (or signalled) too.
    """
    from hpcjobs.errors import BadInputError
    from hpcjobs.slurm.classify import UnknownJobError
    from hpcjobs.slurm.client import check_job_ids
    from hpcjobs.slurm.jobs import query_status

    ids = check_job_ids(job_ids)
    if signal is not None:
        signal = signal.strip().upper()
        if not _SIGNAL.fullmatch(signal):
            raise BadInputError(
                f"not a signal: {signal!r}", hint="use a name like USR1 or a number"
            )
    runner, client = slurm_access(ctx, host)
    chains = chains_for(runner, ids, host)
    for root, ref in chains.items():
        later = [j for j in ref.chain.job_ids if j != root and j not in ids]
        if later and ref.chain.final is None:
            ids += later if signal is None else [ref.current]
    outcome = client.cancel(ids, signal=signal)
    verb = f"sent {signal} to" if signal else "cancelled"
    for job_id in outcome.signalled:
        click.echo(f"{verb} {job_id}")
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
