"""Choosing how hpcjobs talks to Slurm: the command-line tools, or pyslurm when it fits.

The CLI backend (``sbatch``, ``squeue``, ``sacct``, ``scontrol``, ``scancel``) is the default and
always works. pyslurm is optional: it binds to one Slurm release, and PyPI carries few of them.
With ``HPCJOBS_SLURM_BACKEND=pyslurm`` (or ``auto``) hpcjobs uses it for live-job queries only
when it imports *and* its version matches the running Slurm (``24.11.x`` for Slurm 24.11);
otherwise, and whenever a pyslurm call fails, it falls back to the CLI. Submission, accounting
and cancelling always use the CLI tools.
"""

from __future__ import annotations

import getpass
import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from hpcjobs.errors import BadInputError
from hpcjobs.logger import logger
from hpcjobs.runner import LocalRunner, Runner
from hpcjobs.slurm import parse
from hpcjobs.slurm.client import SlurmClient, check_job_ids
from hpcjobs.slurm.statusquery import row_matches

log = logger(__name__)

BACKENDS = ("cli", "pyslurm", "auto")
ENV_VAR = "HPCJOBS_SLURM_BACKEND"

Importer = Callable[[str], ModuleType]


@dataclass(frozen=True)
class BackendChoice:
    """Which backend was chosen, and why (shown with ``-v``)."""

    name: str
    reason: str
    module: ModuleType | None = None


def select_backend(
    wanted: str,
    slurm_version: Callable[[], str],
    *,
    importer: Importer = importlib.import_module,
) -> BackendChoice:
    """Pick the backend for ``wanted`` (``cli``, ``pyslurm`` or ``auto``).

    pyslurm is chosen only if it imports and its ``major.minor`` equals the Slurm version's
    (pyslurm numbers Slurm 22.05 as ``22.5``). ``slurm_version`` is only called when needed.

    Raises:
        BadInputError: ``wanted`` is not a known backend.
    """
    wanted = (wanted or "cli").strip().lower()
    if wanted not in BACKENDS:
        raise BadInputError(
            f"unknown Slurm backend {wanted!r}", hint=f"use one of: {', '.join(BACKENDS)}"
        )
    if wanted == "cli":
        return BackendChoice("cli", "the default")
    try:
        module = importer("pyslurm")
    except Exception as exc:  # ImportError, or a broken binary build
        return BackendChoice("cli", f"pyslurm does not import: {exc}")
    found = str(getattr(module, "__version__", "") or "")
    running = slurm_version()
    try:
        matches = parse.version_tuple(found) == parse.version_tuple(running)
    except ValueError:
        matches = False
    if not matches:
        return BackendChoice(
            "cli", f"pyslurm {found or '(no version)'} does not match Slurm {running}"
        )
    return BackendChoice("pyslurm", f"pyslurm {found} matches Slurm {running}", module)


class PyslurmQueue:
    """Live-job queries through pyslurm's ``Jobs.load()`` (pyslurm 23.2 and later)."""

    name = "pyslurm"

    def __init__(self, module: ModuleType, *, user: str | None = None) -> None:
        self.module = module
        self.user = user or getpass.getuser()

    def queue(self, job_ids: Sequence[str] | None, *, mine: bool) -> list[parse.QueueRow]:
        """Rows like ``squeue``'s, from one controller RPC."""
        jobs = self.module.Jobs.load()
        rows = [_row(job) for job in jobs.values()]
        if job_ids:
            wanted = check_job_ids(job_ids)
            rows = [r for r in rows if any(row_matches(j, r.job_id, r.raw_id) for j in wanted)]
        if mine or not job_ids:
            rows = [r for r in rows if r.user == self.user]
        return rows


def _row(job: Any) -> parse.QueueRow:
    array_id = job.array_id
    task = job.array_task_id
    waiting = job.array_tasks_waiting
    if array_id and task is not None:
        shown, tasks = f"{array_id}_{task}", str(task)
    elif array_id and waiting:
        shown, tasks = f"{array_id}_[{waiting}]", str(waiting)
    else:
        shown, tasks = str(job.id), None
    return parse.QueueRow(
        job_id=shown,
        raw_id=str(job.id),
        array_job_id=str(array_id or job.id),
        array_tasks=tasks,
        state=parse.base_state(str(job.state))[0],
        reason=_clean(job.state_reason),
        nodelist=_clean(job.allocated_nodes),
        elapsed_s=int(job.run_time) if job.run_time is not None else None,
        nodes=job.num_nodes,
        restarts=int(job.requeue_count or 0),
        partition=_clean(job.partition),
        user=_clean(job.user_name),
        name=str(job.name or ""),
    )


def _clean(value: object) -> str:
    text = "" if value is None else str(value)
    return "" if text in ("None", "(null)") else text


def make_client(
    runner: Runner,
    *,
    backend: str | None = None,
    importer: Importer = importlib.import_module,
) -> SlurmClient:
    """A :class:`SlurmClient` on ``runner`` with the backend from ``backend`` or the env."""
    client = SlurmClient(runner)
    choice = select_backend(
        backend or os.environ.get(ENV_VAR, "cli"), client.version, importer=importer
    )
    log.info("Slurm backend: %s (%s)", choice.name, choice.reason)
    if choice.module is not None:
        client.queue_source = PyslurmQueue(choice.module)
    return client


def client_from_environment() -> SlurmClient:
    """The client the CLI commands use: local Slurm commands, backend from the environment."""
    return make_client(LocalRunner())
