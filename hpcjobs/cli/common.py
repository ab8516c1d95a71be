"""What the commands share: reaching Slurm (here or over SSH), following chains, and writing
the file a user named with ``-o``/``--html``.

``render`` and ``status`` import this module (fast paths: docs/index.md, "Start-up"), so each
helper imports what only it needs where it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.options import make_runner
from hpcjobs.errors import BadInputError, HpcJobsError

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.jobs.chain import ChainRef
    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient


def write_output(path: Path, text: str, *, hint: str) -> None:
    """Write a file the user named: a file is replaced atomically (0600); what is not a regular
    file (``/dev/stdout``, a FIFO) is written through, never replaced.

    Raises:
        BadInputError: it cannot be written; ``hint`` says what to do instead.
    """
    from hpcjobs.atomicfile import write_atomic

    try:
        if path.exists() and not path.is_file():
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        else:
            write_atomic(path, text)
    except OSError as exc:
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}", hint=hint) from exc


def slurm_access(ctx: click.Context, host: str | None) -> tuple[Runner, SlurmClient]:
    """The runner and Slurm client for a command: local, or on ``host`` over SSH.

    With ``--host``, ``--site`` (if given) supplies the login hosts and pinned host keys.
    """
    from hpcjobs.slurm import backend

    if host is None:
        client = backend.client_from_environment()
        return client.runner, client
    runner = make_runner(host, (ctx.obj or {}).get("site"))
    return runner, backend.make_client(runner)


def site_for(ctx: click.Context, host: str | None) -> SiteConfig:
    """The site: ``--site``, else (with ``--host``) the site whose login hosts include the
    host, else the one this machine selects.

    Raises:
        ConfigError: No site is found, or the one found is invalid.
    """
    from hpcjobs.config.loader import load_site

    chosen = (ctx.obj or {}).get("site")
    if chosen is None and host:
        from hpcjobs.config.locate import list_sites
        from hpcjobs.remote.hostspec import parse_host_spec

        name = parse_host_spec(host).host
        for entry in list_sites():
            try:
                candidate = load_site(entry.path)
            except HpcJobsError:
                continue
            if name in candidate.login_hosts:
                return candidate
    return load_site(chosen)


def chains_for(
    runner: Runner, job_ids: Sequence[str], host: str | None = None
) -> dict[str, ChainRef]:
    """The chains of the given ids that hpcjobs submitted from here (root id -> chain)."""
    from hpcjobs.jobs.chain import load_chain

    found = {}
    for job_id in job_ids:
        ref = load_chain(job_id, runner, host=host)
        if ref is not None:
            found[job_id] = ref
    return found
