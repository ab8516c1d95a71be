"""``hpcjobs history``: every run of a job and why each one ended."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from hpcjobs.cli.common import chains_for, slurm_access
from hpcjobs.cli.options import host_option
from hpcjobs.errors import SlurmError
from hpcjobs.jobs.chain import ended_by_accounting
from hpcjobs.slurm.history import job_history
from hpcjobs.slurm.parse import format_duration
from hpcjobs.texttable import table

if TYPE_CHECKING:
    from hpcjobs.jobs.chain import ChainRef, Event
    from hpcjobs.slurm.client import SlurmClient
    from hpcjobs.slurm.history import JobHistory, Run


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_id", metavar="JOBID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@host_option
@click.pass_context
def history(ctx: click.Context, job_id: str, as_json: bool, host: str | None) -> None:
    """Show every run of JOBID: start, end, state, nodes, exit code and cause.

    A requeued job keeps its id and runs again; accounting (sacct --duplicates) keeps a record
    per run. The cause says why a run ended, in the words the event log, the budgets and the
    report use: preemption, timeout, node_failure, infrastructure, stall, straggler,
    application, cancelled; or requeued, completed. GAP is the time from the end of a run to
    the start of the next. Needs accounting; exits 3 if it has no record of the job.

    For a job hpcjobs submitted, JOBID is the first job of its chain: continuations after a
    preemption, timeout or fault are listed too, and INTERRUPTIONS shows for each stop its cause,
    the checkpoint step the next run resumed from, the steps redone (work lost; "?" when
    unknown: the program reported no progress, or the checkpoint's step is unknown), the resume
    latency (end of the stopped run to the start of the next), the node blamed (SUSPECT), the
    nodes left out of every later run, and the evidence (the matched error line, or the
    stalled rank and its last step). SLOW NODES lists the nodes found slower than their peers
    (stragglers: steps over the window, theirs and the peers' median) and what was done:
    swapped for a spare node, or left out of the next run. Result is the chain's end from
    its event log; a chain whose newest job was cancelled before its script could log (a
    pending continuation cancelled with scancel) ends "cancelled", from accounting.
    """
    runner, client = slurm_access(ctx, host)
    ref = chains_for(runner, [job_id], host).get(job_id)
    ids = ref.chain.job_ids if ref else [job_id]
    histories = _job_histories(client, ids)
    interruptions = _interruptions(ref) if ref else []
    stops = _stops_by_run(ref)
    final, source = _final(ref, histories)
    if as_json:
        data = {
            "job_id": job_id,
            "chain": ids,
            "jobs": [_with_stops(h, stops) for h in histories],
            "interruptions": interruptions,
            "stragglers": _stragglers(ref),
            "final": _final_data(final),
            "final_source": source if final is not None else None,
        }
        click.echo(json.dumps(data, indent=2))
        return
    for number, item in enumerate(histories):
        if number:
            click.echo()
        _print_runs(item, stops)
    if ref is not None:
        _print_chain(ref, interruptions, final)


def _job_histories(client: SlurmClient, ids: list[str]) -> list[JobHistory]:
    """Accounting's runs of each job in ``ids``; only the first, the job named, must be there."""
    histories: list[JobHistory] = []
    for number, one in enumerate(ids):
        try:
            histories += job_history(client, one)
        except SlurmError:
            if number == 0:
                raise  # the job the user named: say so
            # A continuation that has not reached accounting yet.
    return histories


def _print_runs(item: JobHistory, stops: dict[tuple[str, int], str]) -> None:
    """One job's heading and its table of runs."""
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
            _cause(run, item.job_id, stops),
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


def _interruptions(ref: ChainRef) -> list[dict[str, Any]]:
    """Each stop of the chain, as JSON-ready data."""
    return [stop.to_dict() for stop in ref.chain.interruptions()]


def _stragglers(ref: ChainRef | None) -> list[dict[str, Any]]:
    """The chain's ``straggler`` events (docs/faults.md, "Stragglers"), as JSON-ready data."""
    if ref is None:
        return []
    return [
        {
            "job_id": event.job_id,
            "time": event.time,
            "node": event.text("node"),
            "steps": event.number("steps"),
            "peers": event.data.get("peers"),
            "window_s": event.number("window"),
            "action": event.text("action"),
            "detail": event.detail,
        }
        for event in ref.chain.events
        if event.event == "straggler"
    ]


def _final(ref: ChainRef | None, histories: list[JobHistory]) -> tuple[Event | None, str]:
    """How the chain ended, and where that comes from: ``"event log"`` or ``"accounting"``.

    A job cancelled while pending never runs its script, so its chain's log may have no ``end``
    (a plain ``scancel`` of a pending continuation): then a CANCELLED newest job ends it.
    """
    if ref is None:
        return None, ""
    if ref.chain.final is not None:
        return ref.chain.final, "event log"
    newest = [h for h in histories if h.job_id == ref.current and h.runs]
    if not newest:
        return None, ""
    return ended_by_accounting(ref.chain, ref.current, newest[-1].runs[-1].state), "accounting"


def _final_data(final: Event | None) -> dict[str, Any] | None:
    """The chain's end for ``--json``: result and detail, and what repeated in a restart
    storm (docs/faults.md)."""
    if final is None:
        return None
    data: dict[str, Any] = {"result": final.cause, "detail": final.detail}
    if isinstance(final.data.get("repeated"), dict):
        data["repeated"] = final.data["repeated"]
    return data


def _print_chain(ref: ChainRef, interruptions: list[dict[str, Any]], final: Event | None) -> None:
    click.echo()
    ids = ref.chain.job_ids
    click.echo(f"Chain {ref.root}: {len(ids)} job(s) ({', '.join(ids)})")
    if interruptions:
        rows = [
            [
                str(n + 1),
                item["cause"],
                f"{item['job_id']} -> {item['resumed_job_id'] or '(pending)'}",
                _step(item, "resumed_from_step"),
                _step(item, "steps_lost"),
                "-" if item["resume_latency_s"] is None else f"{item['resume_latency_s']:.1f} s",
                item["suspect"] or "-",
                ",".join(item["excluded_nodes"]) or "-",
            ]
            for n, item in enumerate(interruptions)
        ]
        headers = ["#", "CAUSE", "JOB", "RESUMED FROM STEP", "STEPS LOST", "RESUME LATENCY"]
        headers += ["SUSPECT", "EXCLUDED FROM THEN ON"]
        click.echo("Interruptions:")
        click.echo(table(headers, rows))
        for n, item in enumerate(interruptions):
            if item["evidence"]:
                click.echo(f"  #{n + 1} evidence: {item['evidence']}")
        if any(UNKNOWN in row[3:5] for row in rows):
            click.echo(
                f"  {UNKNOWN}: unknown (the program reported no progress, or the step of the "
                "checkpoint resumed from is unknown)"
            )
    slow = _stragglers(ref)
    if slow:
        click.echo("Slow nodes (stragglers):")
        for item in slow:
            click.echo(f"  job {item['job_id']}: {item['detail']}")
    if final is None:
        click.echo("Result: still running")
    else:
        click.echo(f"Result: {final.cause} ({final.detail})")
        repeated = final.data.get("repeated")
        if isinstance(repeated, dict) and repeated.get("evidence"):
            click.echo(f"  Repeated each time: {repeated['evidence']}")


#: What the table shows for a step the event log leaves unknown (``--json``: null).
UNKNOWN = "?"


def _step(item: dict[str, Any], key: str) -> str:
    """A step of an interruption: ``-`` before the chain resumed (and for a start from scratch,
    as the step resumed from), :data:`UNKNOWN` when the chain resumed but the step is unknown."""
    value = item[key]
    if item["resumed_at"] is None:
        return "-"
    if value is None:
        return UNKNOWN
    return "-" if value < 0 else str(value)


def _stops_by_run(ref: ChainRef | None) -> dict[tuple[str, int], str]:
    """(job id, run index) -> why hpcjobs stopped that run, from the chain's event log
    (:meth:`hpcjobs.contract.eventlog.Chain.stops`)."""
    if ref is None:
        return {}
    return {
        key: f"{e.cause}: {e.detail}" if e.event == "end" else f"{e.cause} ({e.detail})"
        for key, e in ref.chain.stops().items()
    }


def _cause(run: Run, job_id: str, stops: dict[tuple[str, int], str]) -> str:
    text = stops.get((job_id, run.index))
    if text:
        return text
    return run.cause + (f" ({run.detail})" if run.detail else "")


def _with_stops(item: JobHistory, stops: dict[tuple[str, int], str]) -> dict[str, Any]:
    data = item.to_dict()
    for run in data["runs"]:
        run["hpcjobs_cause"] = stops.get((item.job_id, run["index"]))
    return data
