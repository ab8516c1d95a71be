"""What the commands share: reaching Slurm (here or over SSH), following chains, and writing
the file a user named with ``-o``/``--html``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.options import make_runner

if TYPE_CHECKING:
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
    from hpcjobs.errors import BadInputError

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
