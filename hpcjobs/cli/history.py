"""``hpcjobs history``: every run of a job and why each one ended."""

from __future__ import annotations

import json
from datetime import datetime

import click


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_id", metavar="JOBID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def history(job_id: str, as_json: bool) -> None:
    """Show every run of JOBID: start, end, state, nodes, exit code and cause.

    A requeued job keeps its id and runs again; accounting (sacct --duplicates) keeps a record
    per run. The cause says why a run ended: preempted, timeout, node failure, application
    failure, cancelled, requeued. GAP is the time from the end of a run to the start of the
    next. Needs accounting; exits 3 if it has no record of the job.
    """
    from hpcjobs.cli.status import table
    from hpcjobs.slurm import backend
    from hpcjobs.slurm.history import job_history
    from hpcjobs.slurm.parse import format_duration

    client = backend.client_from_environment()
    histories = job_history(client, job_id)
    if as_json:
        data = {"job_id": job_id, "jobs": [h.to_dict() for h in histories]}
        click.echo(json.dumps(data, indent=2))
        return
    for number, item in enumerate(histories):
        if number:
            click.echo()
        runs = "1 run" if len(item.runs) == 1 else f"{len(item.runs)} runs"
        restarts = "1 restart" if item.restarts == 1 else f"{item.restarts} restarts"
        click.echo(f"Job {item.job_id} ({item.name}): {runs}, {restarts}")
        rows = [
            [
                str(run.index),
                _when(run.start),
                _when(run.end),
                format_duration(run.elapsed_s),
                run.state,
                run.cause + (f" ({run.detail})" if run.detail else ""),
                str(run.nodes if run.nodes is not None else "-"),
                run.nodelist or "-",
                "-" if run.exit_code is None else f"{run.exit_code}:{run.exit_signal or 0}",
                "-" if run.gap_to_next_s is None else format_duration(int(run.gap_to_next_s)),
            ]
            for run in item.runs
        ]
        headers = [
            "RUN",
            "START",
            "END",
            "ELAPSED",
            "STATE",
            "CAUSE",
            "NODES",
            "NODELIST",
            "EXIT",
            "GAP",
        ]
        click.echo(table(headers, rows))


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"
