"""The ``hpcjobs`` command line. Only this package prints or exits.

Subcommands load lazily (their modules import only when run), so ``hpcjobs --help`` stays fast
and never imports submitit, paramiko or torch. For the same reason this module imports at the
top only what ``--help`` needs: the logging settings, a ``--site`` lookup and shell completion
import theirs where they run.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import click

from hpcjobs import __version__
from hpcjobs.config import SITE_ENV
from hpcjobs.errors import EXIT_BAD_INPUT, HpcJobsError

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

#: name -> (module:attribute, one-line help). The help is here so listing costs no import.
COMMANDS: dict[str, tuple[str, str]] = {
    "sandbox": ("hpcjobs.cli.sandbox:sandbox", "Run a real local Slurm cluster for trying jobs."),
    "site": ("hpcjobs.cli.site:site", "List, show, validate, discover site configs; schema."),
    "submit": ("hpcjobs.cli.submit:submit", "Render a job script for the site and submit it."),
    "render": (
        "hpcjobs.cli.submit:render",
        "Print a job script to sbatch by hand; write its supervisor.",
    ),
    "template": ("hpcjobs.cli.template:template", "Show job-script templates and blocks."),
    "job": ("hpcjobs.cli.job:job", "Job files: the JSON Schema of what they may hold."),
    "status": ("hpcjobs.cli.status:status", "Show the state of jobs (one Slurm query)."),
    "logs": ("hpcjobs.cli.logs:logs", "Print or follow a job's log, across requeues."),
    "cancel": ("hpcjobs.cli.cancel:cancel", "Cancel jobs or send them a signal."),
    "history": ("hpcjobs.cli.history:history", "Show every run of a job and why it ended."),
    "suspects": (
        "hpcjobs.cli.suspects:suspects",
        "List the nodes kept out of your jobs after repeated faults, and why.",
    ),
    "report": ("hpcjobs.cli.report:report", "Goodput and badput: where a chain's GPU-hours went."),
    "ssh": ("hpcjobs.cli.ssh:ssh", "Check and trust SSH connections to login nodes."),
    "plan": ("hpcjobs.cli.plan:plan", "Pick the parallel layout; estimate time and GPU-hours."),
}

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked (or asked for help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            target, _ = COMMANDS[cmd_name]
            module_name, attr = target.split(":")
            command = getattr(importlib.import_module(module_name), attr)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except HpcJobsError as exc:
            if _debug_enabled(ctx):
                raise
            report_error(exc)
            ctx.exit(exc.exit_code)


def report_error(exc: HpcJobsError) -> None:
    """Print an expected error as one message plus an optional hint, on stderr."""
    click.secho(f"Error: {exc.message}", err=True, fg="red")
    if exc.hint:
        click.echo(f"Hint: {exc.hint}", err=True)


def _debug_enabled(ctx: click.Context) -> bool:
    root = ctx.find_root()
    return bool(root.params.get("debug")) or bool(root.meta.get("hpcjobs.debug"))


def _configure_logging(verbose: int, quiet: int) -> None:
    from hpcjobs.logger import configure

    configure(verbose - quiet)


@click.group(
    cls=LazyGroup,
    context_settings=CONTEXT_SETTINGS,
    epilog="Exit codes: 0 ok, 1 job failed, 2 bad input, 3 Slurm error, 4 SSH error. "
    "Run 'hpcjobs COMMAND --help' for details on a command.",
)
@click.version_option(__version__, "-V", "--version", prog_name="hpcjobs")
@click.option(
    "--site",
    envvar=SITE_ENV,
    metavar="NAME|PATH",
    shell_complete=lambda ctx, param, incomplete: _complete_site(incomplete),
    help="Site config to use: a name (see 'hpcjobs site list') or a YAML file. "
    f"Default: chosen by hostname.  [env: {SITE_ENV}]",
)
@click.option(
    "--debug",
    is_flag=True,
    help="Show full tracebacks for errors. A global option: 'hpcjobs --debug submit ...'.",
)
@click.option("-v", "--verbose", count=True, help="More log output (repeatable).")
@click.option("-q", "--quiet", count=True, help="Less log output (repeatable).")
@click.pass_context
def cli(ctx: click.Context, site: str | None, debug: bool, verbose: int, quiet: int) -> None:
    """hpcjobs: launch multi-node training on Slurm, fast and safely.

    It renders tuned batch scripts from your site's config, submits and follows jobs, and
    requeues them from their last checkpoint after preemption, timeouts or node failures.
    """
    ctx.meta["hpcjobs.debug"] = debug
    _configure_logging(verbose, quiet)
    ctx.obj = {"site": None, "site_arg": site}
    if site:
        from hpcjobs.config.locate import locate_site

        try:
            ctx.obj["site"] = locate_site(site)
        except HpcJobsError as exc:
            if ctx.get_parameter_source("site") is click.core.ParameterSource.ENVIRONMENT:
                _blame_site_env(exc, site)
            if debug:
                raise
            report_error(exc)
            ctx.exit(exc.exit_code)


def _complete_site(incomplete: str) -> list[CompletionItem]:
    """Shell completion for ``--site``: the names of the site configs found, else file paths."""
    from click.shell_completion import CompletionItem

    from hpcjobs.config.locate import list_sites, looks_like_path

    if looks_like_path(incomplete):
        return [CompletionItem(incomplete, type="file")]
    names = sorted({entry.name for entry in list_sites() if entry.active})
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def _blame_site_env(exc: HpcJobsError, value: str) -> None:
    """Say that the bad site came from the environment, not from a flag or a file."""
    exc.message = f"{SITE_ENV}={value!r}: {exc.message}"
    exc.args = (exc.message,)
    fix = f"fix or unset {SITE_ENV} (it stands in for --site)"
    exc.hint = f"{fix}; {exc.hint}" if exc.hint else fix


def main(argv: list[str] | None = None) -> None:
    """The command line itself; the console script enters through :func:`hpcjobs.__main__.main`."""
    try:
        cli.main(args=argv, prog_name="hpcjobs", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive only
        click.echo("Interrupted.", err=True)
        sys.exit(130)


__all__ = ["EXIT_BAD_INPUT", "cli", "main"]
