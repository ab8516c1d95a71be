"""``hpcjobs site``: list, show, validate and discover site configs.

``site --help`` and ``site list`` load neither pydantic nor a YAML parser: the commands that
read, check or draft a config import what they need where they run.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import click

from hpcjobs.cli.options import host_option, make_runner
from hpcjobs.config.locate import list_sites, locate_site, looks_like_path
from hpcjobs.config.problems import Problem
from hpcjobs.errors import EXIT_BAD_INPUT, ConfigError


@click.group("site")
def site() -> None:
    """Inspect, validate and draft site configs (for admins)."""


@site.command("list", short_help="List the site configs found and where.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(as_json: bool) -> None:
    """List the site configs found, and where each was found.

    Folders are searched in this order: $HPCJOBS_SITE_PATH, ~/.config/hpcjobs/sites,
    /etc/hpcjobs/sites, then the built-in configs. A name found twice is used from the first
    folder; the later ones are marked as shadowed.
    """
    entries = list_sites()
    if as_json:
        rows = [
            {
                "name": e.name,
                "source": e.source,
                "path": str(e.path),
                "shadowed_by": str(e.shadowed_by) if e.shadowed_by else None,
            }
            for e in entries
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    if not entries:
        click.echo("No site configs found.", err=True)
        return
    width = max(len(e.name) for e in entries)
    source_width = max(len(e.source) for e in entries)
    for e in entries:
        note = "" if e.active else f"  (shadowed by {e.shadowed_by})"
        click.echo(f"{e.name:<{width}}  {e.source:<{source_width}}  {e.path}{note}")


@site.command("show", short_help="Show a resolved site config (--origin: per-value layer).")
@click.argument("name", required=False, metavar="[NAME|PATH]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of YAML.")
@click.option(
    "--origin",
    is_flag=True,
    help="Show which layer set each value (file:line, env:VAR, command line, default).",
)
@click.pass_context
def show_cmd(ctx: click.Context, name: str | None, as_json: bool, origin: bool) -> None:
    """Show the resolved config of a site, after all layers are applied.

    NAME defaults to the global --site, else to the site matching this host. Layers, lowest
    first: built-in defaults, the site file, ~/.config/hpcjobs/config.yaml, HPCJOBS_*
    variables.
    """
    from hpcjobs.config.loader import load_site_layers

    loaded = load_site_layers(_site_value(ctx, name))
    for warning in loaded.warnings:
        click.secho(warning.format(), err=True, fg="yellow")
    if origin:
        rows = loaded.items_with_origin()
        if as_json:
            data = {
                "site": str(loaded.path),
                "values": [{"key": k, "value": v, "origin": str(o)} for k, v, o in rows],
            }
            click.echo(json.dumps(data, indent=2))
            return
        for key, value, where in rows:
            click.echo(f"{where}\t{key}={_plain(value)}")
        return
    config = loaded.config.model_dump(mode="json")
    if as_json:
        click.echo(json.dumps(config, indent=2))
        return
    import yaml

    click.echo(f"# {loaded.path}")
    click.echo(yaml.safe_dump(config, sort_keys=False, default_flow_style=False).rstrip())


@site.command("validate", short_help="Report every problem in site config files.")
@click.argument("paths", nargs=-1, metavar="PATH|NAME...")
@click.option("--all", "check_all", is_flag=True, help="Validate every site config found.")
@click.option("--strict", is_flag=True, help="Treat warnings as errors.")
@click.option("-q", "--quiet", is_flag=True, help="Print problems only, no 'ok' lines.")
@click.pass_context
def validate_cmd(
    ctx: click.Context, paths: tuple[str, ...], check_all: bool, strict: bool, quiet: bool
) -> None:
    """Check site config files and report every problem, each with file, line and key.

    Exits 0 when all files are valid, 2 when any has an error (or, with --strict, a warning).
    Without PATH, checks the global --site (or, with --all, every site found).
    """
    from hpcjobs.config.validate import ValidationReport, validate_site_file

    targets: list[tuple[str, Path | None, str | None]] = []
    for value in paths:
        if looks_like_path(value) or Path(value).exists():
            targets.append((value, Path(value), None))
            continue
        try:
            targets.append((value, locate_site(value), None))
        except ConfigError as exc:
            targets.append((value, None, exc.message))
    if check_all:
        targets.extend((str(e.path), e.path, None) for e in list_sites() if e.active)
    if not targets:
        selected = (ctx.obj or {}).get("site")
        if selected is None:
            raise click.UsageError("give one or more PATHs, --all, or the global --site")
        targets.append((str(selected), Path(selected), None))

    failed = 0
    for label, path, error in targets:
        if path is None:
            report = ValidationReport(label, problems=[Problem(error or "not found", file=label)])
        else:
            report = validate_site_file(path, source=label)
        bad = bool(report.errors) or (strict and bool(report.warnings))
        for problem in report.problems:
            color = "red" if problem.is_error else "yellow"
            click.secho(problem.format(), fg=color)
        if bad:
            failed += 1
        elif not quiet:
            extra = f" ({len(report.warnings)} warnings)" if report.warnings else ""
            click.echo(f"{label}: ok{extra}")
    if failed:
        click.secho(f"{failed} of {len(targets)} site configs are invalid", err=True, fg="red")
        ctx.exit(EXIT_BAD_INPUT)


@site.command("schema", short_help="Print the JSON Schema of site config files.")
def schema_cmd() -> None:
    """Print the JSON Schema of a site config file: every section and field, its type, bounds
    and default (the same models 'site validate' checks with).

    \b
    For completion and checks in an editor with a YAML language server:
      hpcjobs site schema > ~/.config/hpcjobs/site.schema.json
    and, as the first line of a site file:
      # yaml-language-server: $schema=/home/me/.config/hpcjobs/site.schema.json

    'hpcjobs site validate' remains the whole check: the rules between fields (a default
    partition that exists, GPUs that match the topology) are not in the schema.
    """
    from hpcjobs.config.fields import file_schema
    from hpcjobs.config.models import SiteConfig

    click.echo(json.dumps(file_schema(SiteConfig, "hpcjobs site config"), indent=2))


@site.command("discover", short_help="Draft a site config from the live cluster.")
@click.option("--name", help="Site name for the draft (default: Slurm's ClusterName).")
@click.option(
    "--probe-node",
    metavar="NODE",
    help="Read the node layout (NUMA, GPUs, NICs) from NODE with srun, instead of leaving "
    "placeholders.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the draft to this file (mode 0600) instead of stdout.",
)
@host_option
@click.pass_context
def discover_cmd(
    ctx: click.Context,
    name: str | None,
    probe_node: str | None,
    output: Path | None,
    host: str | None,
) -> None:
    """Draft a site config from the live cluster (sinfo, scontrol) and print it as YAML.

    The draft covers partitions, node counts, CPUs, memory, GPUs and preemption settings, and
    it validates as is. Review it, then check it with 'hpcjobs site validate'.
    """
    from hpcjobs.cli.common import write_output
    from hpcjobs.config.discover import discover_site
    from hpcjobs.config.validate import validate_data
    from hpcjobs.config.yamlfile import parse_yaml_text
    from hpcjobs.slurm.client import SlurmClient

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runner = make_runner(host, (ctx.obj or {}).get("site") if host else None)
    draft = discover_site(SlurmClient(runner), name=name, probe=probe_node, now=now)
    doc = parse_yaml_text(draft.text, source="draft")
    _, findings = validate_data(doc.data) if isinstance(doc.data, dict) else (None, [])
    for note in draft.notes:
        click.secho(f"note: {note}", err=True, fg="yellow")
    for finding in findings:
        click.secho(f"draft: {'.'.join(map(str, finding.path))}: {finding.message}", err=True)
    if output is None:
        click.echo(draft.text, nl=False)
        return
    write_output(
        Path(output),
        draft.text,
        hint="pass -o a path in a folder you can write to, or leave -o out to print the draft",
    )
    click.echo(f"wrote {output}", err=True)


def _site_value(ctx: click.Context, name: str | None) -> str | Path | None:
    if name:
        return name
    selected: Path | None = (ctx.obj or {}).get("site")
    return selected


def _plain(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)
