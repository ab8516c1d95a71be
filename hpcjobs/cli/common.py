"""What the job commands share: reaching Slurm (here or over SSH) and following chains."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.options import make_runner

if TYPE_CHECKING:
    from hpcjobs.jobs.chain import ChainRef
    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient


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
