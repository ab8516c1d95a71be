"""``hpcjobs report``: where each chain's allocated GPU-hours went (docs/report.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.common import chains_for, site_for, slurm_access, write_output
from hpcjobs.cli.options import host_option
from hpcjobs.errors import BadInputError, ConfigError
from hpcjobs.jobs.chain import load_chain
from hpcjobs.remote.hostspec import parse_host_spec
from hpcjobs.report.build import collect, requested_from_record
from hpcjobs.report.compare import compare_reports, compare_text, script_differences
from hpcjobs.report.html import report_page
from hpcjobs.report.money import site_rates
from hpcjobs.report.text import report_text
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.client import check_job_ids

if TYPE_CHECKING:
    from collections.abc import Mapping

    from hpcjobs.jobs.chain import ChainRef
    from hpcjobs.report.build import ChainReport
    from hpcjobs.report.money import Rate
    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_ids", nargs=-1, metavar="[JOBID]...")
@click.option("--user", "-u", help="Every job of this user in the window (--since).")
@click.option("--account", "-A", help="Every job charged to this account in the window.")
@click.option("--since", "-S", help="Start of the window, sacct syntax (default: now-7days).")
@click.option("--until", "-E", help="End of the window, sacct syntax (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page (timeline, breakdown) to this file.",
)
@click.option(
    "--compare",
    nargs=2,
    metavar="A B",
    help="Before/after: two chains side by side, with what differed in their scripts.",
)
@click.option(
    "--line",
    "one_line",
    is_flag=True,
    help="One line per chain: goodput, allocated GPU-hours, the biggest badput part.",
)
@host_option
@click.pass_context
def report(
    ctx: click.Context,
    job_ids: tuple[str, ...],
    user: str | None,
    account: str | None,
    since: str | None,
    until: str | None,
    as_json: bool,
    html_file: Path | None,
    compare: tuple[str, str] | None,
    one_line: bool,
    host: str | None,
) -> None:
    """Where the GPU-hours of each chain went: goodput and badput, across all its runs.

    For each JOBID (the first job of a chain hpcjobs submitted: its continuations count too),
    or for every job in a window (--user, --account, --since, --until): allocated GPU-hours and
    CPU-hours from accounting (AllocTRES x elapsed of every run), goodput (the share of that
    time in which training advanced) and badput by cause (start-up, steps redone, checkpointing,
    stalls, warning signal to the end, after the last progress), queue wait and gaps between
    runs, step times, CPU efficiency, peak memory, and GPU utilisation where telemetry exists.

    Goodput needs the program's progress reports (CheckpointDir.note_progress, or the files
    described in docs/report.md); without them the report gives accounting figures only.
    One sacct for all the jobs asked about (two at most in a window).

    Cost: where the site config gives partitions a price (partitions[].price, per GPU-hour or
    per node-hour, in one currency), each chain also gets what its allocation cost and, with
    progress reports, what its goodput and each badput part cost (text, --json "cost", the
    page, --compare). The prices are the site's (hpcjobs --site NAME report ..., else the
    site --host or this machine selects); there is no option to give them here. Without a
    site no cost is shown; a run on a partition without a price, or runs priced in two
    currencies, give a note instead of a cost (never guessed or converted).
    """
    if compare and (job_ids or user or account or since or until):
        raise BadInputError(
            "--compare takes exactly two chains and nothing else",
            hint="hpcjobs report --compare BEFORE AFTER",
        )
    if not compare and not job_ids and not (user or account or since or until):
        raise BadInputError(
            "name the jobs to report on",
            hint="hpcjobs report JOBID..., or a window: hpcjobs report --user NAME --since "
            "now-1days",
        )
    if job_ids and (user or account or since or until):
        raise BadInputError(
            "give job ids or a window (--user/--account/--since/--until), not both",
            hint="hpcjobs report JOBID..., or hpcjobs report --since now-1days",
        )
    runner, client = slurm_access(ctx, host)
    rates = _rates(ctx, host)
    if compare:
        _compare(runner, client, compare, host, as_json=as_json, html_file=html_file, rates=rates)
        return
    reports = gather(runner, client, list(job_ids), host, user, account, since, until, rates)
    if html_file is not None:
        _write_page(html_file, report_page(reports))
    if as_json:
        click.echo(json.dumps({"chains": [r.to_dict() for r in reports]}, indent=2))
        return
    if not reports:
        click.echo("No jobs in that window.")
    if one_line:
        for item in reports:
            click.echo(f"{item.root}: {item.summary_line()}")
        return
    for number, item in enumerate(reports):
        if number:
            click.echo()
        click.echo(report_text(item))
    if html_file is not None:
        click.echo(f"\nWrote {html_file}", err=True)


def gather(
    runner: Runner,
    client: SlurmClient,
    job_ids: list[str],
    host: str | None,
    user: str | None = None,
    account: str | None = None,
    since: str | None = None,
    until: str | None = None,
    rates: Mapping[str, Rate] | None = None,
) -> list[ChainReport]:
    """The reports of the named chains, or of every chain in the window, priced at ``rates``."""
    if job_ids:
        refs = _chains(runner, check_job_ids(job_ids), host)
        reports = collect(
            client,
            runner,
            refs,
            requested_gpus=lambda r: requested_from_record(r, host),
            rates=rates,
        )
        unknown = [r.root for r in reports if not r.runs and r.root in job_ids]
        if unknown and len(unknown) == len(reports):
            raise UnknownJobError(unknown, hint="accounting has no run of it yet (pending?)")
        return reports
    usage = client.usage(None, user=user, since=since, until=until, account=account)
    seen = list(dict.fromkeys(u.job_id for u in usage))
    refs = _chains(runner, seen, host)
    inside: set[str] = set()
    for ref in refs.values():
        if ref is not None:
            inside.update(ref.chain.job_ids[1:])
    refs = {root: ref for root, ref in refs.items() if root not in inside}
    wanted = {j for root, ref in refs.items() for j in (ref.chain.job_ids if ref else [root])}
    missing = sorted(wanted - set(seen))
    if missing:  # continuations that ran after the window: one more sacct for all of them
        usage = [*usage, *client.usage(missing)]
    return collect(
        client,
        runner,
        refs,
        usage=usage,
        requested_gpus=lambda r: requested_from_record(r, host),
        rates=rates,
    )


def _chains(runner: Runner, job_ids: list[str], host: str | None) -> dict[str, ChainRef | None]:
    found = chains_for(runner, job_ids, host)
    return {job_id: found.get(job_id) for job_id in job_ids}


def _compare(
    runner: Runner,
    client: SlurmClient,
    pair: tuple[str, str],
    host: str | None,
    *,
    as_json: bool,
    html_file: Path | None,
    rates: Mapping[str, Rate],
) -> None:
    before, after = gather(runner, client, list(pair), host, rates=rates)
    differences = script_differences(pair[0], pair[1], host)
    data = compare_reports(before, after, differences)
    if html_file is not None:
        _write_page(html_file, report_page([before, after], comparison=data))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(compare_text(data))


def _rates(ctx: click.Context, host: str | None) -> dict[str, Rate]:
    """The site's prices by partition: ``--site``'s (its errors are the user's to see), else the
    site ``--host`` or this machine selects, if any; none without a site."""
    named = (ctx.obj or {}).get("site") is not None
    try:
        site = site_for(ctx, host)
    except ConfigError:
        if named:
            raise
        return {}  # no site here: the report shows no money
    if host and not named and parse_host_spec(host).host not in site.login_hosts:
        return {}  # this machine's site, not the cluster behind --host: not its prices
    return site_rates(site)


def _write_page(path: Path, page: str) -> None:
    write_output(path, page, hint="choose another --html file")


def summary_line(runner: Runner, client: SlurmClient, root: str, output_dir: str) -> str:
    """The one line ``submit --wait`` ends with (goodput, GPU-hours, the biggest badput)."""
    ref = load_chain(root, runner, output_dir=output_dir)
    reports = collect(client, runner, {root: ref})
    return reports[0].summary_line()
