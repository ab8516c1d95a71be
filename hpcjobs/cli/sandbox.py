"""``hpcjobs sandbox``: a real Slurm cluster on this host, for trying jobs and for tests."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.options import Count
from hpcjobs.sandbox.layout import DEFAULT_PORT_BASE, MAX_NODES, Settings

if TYPE_CHECKING:
    from hpcjobs.sandbox.cluster import Sandbox, Status

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="HPCJOBS_SANDBOX_DIR",
    help="Where the sandbox keeps its config, logs, database and state. "
    "Default: ~/.local/state/hpcjobs/sandbox.  [env: HPCJOBS_SANDBOX_DIR]",
)


release_option = click.option(
    "--release",
    type=click.Choice(["bookworm", "trixie", "sid"]),
    default=None,
    help="Debian release whose Slurm the sandbox runs: bookworm (Slurm 22.05), trixie "
    "(Slurm 24.11) or sid, Debian unstable (Slurm 26.05). Default: this machine's own, or the "
    "one the state dir was built for. "
    "Another release runs under chroot in a Debian root built once in "
    "<state dir>/root; its default state dir is ~/.local/state/hpcjobs/sandbox-<release>.",
)


def _progress(message: str) -> None:
    click.echo(f"  {message}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def sandbox() -> None:
    """Run a real local Slurm cluster for trying jobs.

    The sandbox is a whole Slurm on this host: munge, MariaDB with slurmdbd (so sacct works),
    one slurmctld and three slurmd nodes n1-n3, each with 4 fake GPUs (gres gpu:h100:4).
    Partition 'batch' (default) is preemptible; jobs in 'urgent' preempt it, and preempted
    jobs are requeued.

    \b
    Typical use:
      sudo hpcjobs sandbox up
      eval "$(hpcjobs sandbox env)"
      sinfo
      hpcjobs sandbox down

    It uses its own ports (16810 and up by default) and its own state directory, and never
    touches another Slurm on the machine.
    """


@sandbox.command()
@state_dir_option
@release_option
@click.option(
    "--port-base",
    type=int,
    default=None,
    help=f"First of the sandbox's ports (default {DEFAULT_PORT_BASE}): slurmctld, slurmdbd and "
    "MariaDB use base..base+2, slurmd nX uses base+10+X.",
)
@click.option(
    "--nodes",
    type=Count(1, MAX_NODES),
    default=None,
    help=f"Number of nodes (3; at most {MAX_NODES}: 128 take about a minute to start).",
)
@click.option(
    "--gpus-per-node",
    type=Count(1, 8),
    default=None,
    help="Fake GPUs per node (4), gres gpu:h100:N.",
)
@click.option(
    "--grace-time",
    type=Count(0, 3600),
    default=None,
    help="Seconds a preempted 'batch' job gets to checkpoint before it is killed (30).",
)
@click.option(
    "--job-expansion/--no-job-expansion",
    default=None,
    help="Let Slurm add nodes to a running job (SchedulerParameters=permit_job_expansion; "
    "off by default, as on most sites): an elastic job without GPUs then grows back in place "
    '(docs/requeue.md, "Growing back").',
)
@click.option(
    "--bind",
    "binds",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="For a sandbox of the other release: also show this host folder inside the root, "
    "at the same absolute path (a checkout, to run its tests there). Repeatable.",
)
def up(
    state_dir: Path | None,
    release: str | None,
    port_base: int | None,
    nodes: int | None,
    gpus_per_node: int | None,
    grace_time: int | None,
    job_expansion: bool | None,
    binds: tuple[Path, ...],
) -> None:
    """Start the sandbox (idempotent) and wait until all nodes are idle.

    Installs the Debian packages it needs when run as root and they are missing. For the
    other Debian release it first builds a Debian root with debootstrap (once, about a
    minute) and runs every daemon under chroot there.
    """
    box = _sandbox(state_dir, release)
    box.binds = [p.resolve() for p in binds]
    base = box.saved_settings() or Settings()
    changes = {
        key: value
        for key, value in {
            "port_base": port_base,
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "grace_time": grace_time,
            "job_expansion": job_expansion,
        }.items()
        if value is not None
    }
    settings = Settings(**{**vars(base), **changes})
    started = time.monotonic()
    click.echo(f"Starting the sandbox in {box.state_dir}", err=True)
    box.up(settings, progress=_progress)
    click.echo(
        f"Sandbox up in {time.monotonic() - started:.1f} s: nodes "
        f"{settings.nodes_text} with gpu:h100:{settings.gpus_per_node}.",
        err=True,
    )
    if box.root is not None:
        click.echo(
            f"Slurm runs inside the Debian root {box.root.path}; see how to use it with:  "
            f"hpcjobs sandbox env --state-dir {box.state_dir}",
            err=True,
        )
    else:
        click.echo(
            f'Use it with:  eval "$(hpcjobs sandbox env --state-dir {box.state_dir})"', err=True
        )


@sandbox.command()
@state_dir_option
@release_option
@click.option(
    "--purge",
    is_flag=True,
    help="Also delete the state directory (database, logs, and a Debian root: unmounted first).",
)
def down(state_dir: Path | None, release: str | None, purge: bool) -> None:
    """Stop every process the sandbox started, job steps included (idempotent).

    A sandbox of the other release also unmounts what it bound into its root.
    """
    box = _sandbox(state_dir, release)
    stopped = box.down(purge=purge, progress=_progress)
    if stopped:
        click.echo(f"Sandbox stopped ({len(stopped)} process(es)).", err=True)
    else:
        click.echo("Sandbox was not running.", err=True)


@sandbox.command()
@state_dir_option
@release_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status(state_dir: Path | None, release: str | None, as_json: bool) -> None:
    """Show daemons, nodes, partitions and whether accounting (sacct) works.

    Exits 0 when the sandbox is running, 3 when it is not.
    """
    box = _sandbox(state_dir, release)
    info = box.status()
    if as_json:
        click.echo(json.dumps(asdict(info), indent=2))
    else:
        _print_status(info)
    if not info.running:
        raise click.exceptions.Exit(3)


def _sandbox(state_dir: Path | None, release: str | None) -> Sandbox:
    """The sandbox; its module (and the Slurm client under it) is imported only here, so that
    'hpcjobs sandbox --help' stays light."""
    from hpcjobs.sandbox.cluster import Sandbox

    return Sandbox(state_dir, release)


def _print_status(info: Status) -> None:
    click.echo(f"State dir:  {info.state_dir}")
    if not info.running:
        click.echo("Status:     not running  (start it with 'hpcjobs sandbox up')")
        return
    click.echo(f"SLURM_CONF: {info.slurm_conf}")
    if info.slurm_version:
        where = f", in the Debian root {info.root}" if info.root else ""
        release = f" ({info.release}{where})" if info.release else ""
        click.echo(f"Slurm:      {info.slurm_version}{release}")
    daemons = ", ".join(f"{name} {'up' if pid else 'DOWN'}" for name, pid in info.daemons.items())
    click.echo(f"Daemons:    {daemons}")
    acct = "yes" if info.accounting else f"NO ({info.accounting_detail})"
    click.echo(f"Accounting: {acct}")
    if info.nodes:
        click.echo("Nodes:")
        for node in info.nodes:
            reason = f"  ({node.reason})" if node.reason else ""
            click.echo(f"  {node.name:<4} {node.state:<8} cpus={node.cpus:<3} {node.gres}{reason}")
    if info.partitions:
        click.echo("Partitions:")
        for part in info.partitions:
            default = " (default)" if part["default"] == "YES" else ""
            click.echo(
                f"  {part['name']:<8} nodes={part['nodes']} priority_tier={part['priority_tier']} "
                f"preempt_mode={part['preempt_mode']} grace_time={part['grace_time']}s{default}"
            )


@sandbox.command()
@state_dir_option
@release_option
@click.option("--json", "as_json", is_flag=True, help="Print the variables as JSON.")
def env(state_dir: Path | None, release: str | None, as_json: bool) -> None:
    """Print shell exports that point Slurm's commands and hpcjobs at the sandbox.

    SLURM_CONF points Slurm's commands at the sandbox's slurm.conf; HPCJOBS_SITE at the
    sandbox's own site config (<state dir>/etc/site.yaml: the built-in 'sandbox' site, sized by
    'up' to the sandbox's nodes and GPUs), so 'hpcjobs submit' needs no --site.

    \b
    eval "$(hpcjobs sandbox env)"
    sinfo
    hpcjobs submit --wait -- hostname

    For a sandbox of the other release the clients must run inside its Debian root (a
    Slurm 22.05 client cannot talk to a 24.11 controller, nor the reverse): the output then
    starts with comment lines that show the chroot command, and --json adds "root".
    """
    box = _sandbox(state_dir, release)
    variables = box.layout.shell_env()
    if as_json:
        data = {**variables, **({"root": str(box.root.path)} if box.root else {})}
        click.echo(json.dumps(data))
        return
    if box.root is not None:
        assert box.release is not None
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in variables.items())
        click.echo(
            f"# Slurm {box.release.slurm} ({box.release.codename}) runs inside the Debian root "
            f"{box.root.path}; the clients of this machine cannot talk to it."
        )
        click.echo("# Run commands inside the root, for example:")
        click.echo(f"#   sudo chroot {shlex.quote(str(box.root.path))} env {exports} sinfo")
        click.echo(f"#   sudo chroot {shlex.quote(str(box.root.path))} env {exports} bash -l")
        click.echo("# These exports are for shells inside the root:")
    for key, value in variables.items():
        click.echo(f"export {key}={shlex.quote(value)}")
