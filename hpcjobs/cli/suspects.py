"""``hpcjobs suspects``: the nodes your chains blamed for faults, and those kept out of your
jobs as repeat offenders (docs/faults.md, "Repeat offenders")."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

import click

from hpcjobs.cli.common import site_for
from hpcjobs.cli.options import host_option, make_runner
from hpcjobs.contract import suspects as registry
from hpcjobs.jobs import keptout
from hpcjobs.runner import LocalRunner
from hpcjobs.texttable import table


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also list nodes blamed fewer times than keep a node out.",
)
@host_option
@click.pass_context
def suspects(ctx: click.Context, as_json: bool, show_all: bool, host: str | None) -> None:
    """List the nodes kept out of your jobs, why, and until when.

    Whenever a chain blames a node for a fault (a node failure, an infrastructure error such
    as an NCCL or InfiniBand failure, a stalled rank) and excludes it, the blame goes into your
    suspects file (~/.local/state/hpcjobs/suspects.jsonl, or the site's faults.suspects_file).
    A node blamed faults.keep_out_faults times (2) within faults.keep_out_hours (24 h), in one
    chain or across your chains, is a repeat offender: 'hpcjobs submit' and every
    continuation leave it out until the newest of those blames is that old, but never so
    many that the job could not start. A failure that repeats on another node at the same step
    is the program's: its blames are withdrawn.

    You cannot drain a node; the list prints the line an admin runs to do so. With --json:
    {"file", "rule": {"faults", "hours"}, "kept_out": [{"node", "faults", "until", "blames",
    "drain"}], "suspects": [...]}.
    """
    site = site_for(ctx, host)
    runner = make_runner(host, site) if host else LocalRunner()
    path = keptout.suspects_path(site.faults, runner)
    entries = keptout.read_entries(runner, path)
    now = time.time()
    ttl = site.faults.keep_out_hours * 3600
    out = registry.kept_out(entries, now, ttl, site.faults.keep_out_faults)
    everyone = registry.kept_out(entries, now, ttl, 1) if show_all else []
    rule = {"faults": site.faults.keep_out_faults, "hours": site.faults.keep_out_hours}
    if as_json:
        data = {
            "file": path,
            "rule": rule,
            "kept_out": [_item(k, rule) for k in out],
            "suspects": [_item(k, rule) for k in everyone],
        }
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(
        f"Suspects file: {path}. A node blamed {rule['faults']} time(s) within "
        f"{rule['hours']} h is kept out of your jobs."
    )
    if not out:
        click.echo("No node is kept out of your jobs.")
    else:
        click.echo("Kept out:")
        click.echo(table(_HEADERS, [_row(k) for k in out]))
        click.echo("An admin can drain them (a user cannot):")
        for k in out:
            click.echo("  " + shlex.join(registry.drain_command(k.node, _reason(k, rule))))
    if show_all:
        rest = [k for k in everyone if k.node not in {o.node for o in out}]
        click.echo("Blamed, not kept out:" if rest else "No other node was blamed.")
        if rest:
            click.echo(table(_HEADERS, [_row(k) for k in rest]))


_HEADERS = ["NODE", "FAULTS", "UNTIL", "LAST CAUSE", "LAST JOB", "EVIDENCE"]


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))


def _row(k: registry.KeptOut) -> list[str]:
    last = k.blames[0]
    return [
        k.node,
        str(len(k.blames)),
        _when(k.until),
        last.cause or "-",
        last.job or "-",
        (last.evidence or "-")[:60],
    ]


def _reason(k: registry.KeptOut, rule: dict[str, int]) -> str:
    return f"hpcjobs: {len(k.blames)} faults in {rule['hours']}h, last {k.blames[0].cause}"


def _item(k: registry.KeptOut, rule: dict[str, int]) -> dict[str, Any]:
    return {
        "node": k.node,
        "faults": len(k.blames),
        "until": k.until,
        "blames": [
            {
                "time": b.time,
                "cause": b.cause,
                "job": b.job,
                "chain": b.chain,
                "evidence": b.evidence,
            }
            for b in k.blames
        ],
        "drain": shlex.join(registry.drain_command(k.node, _reason(k, rule))),
    }
