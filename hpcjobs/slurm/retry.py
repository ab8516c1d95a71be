"""What a Slurm command retries, and how patiently (the mechanism: :mod:`hpcjobs.backoff`).

Only transient and ambiguous failures are retried (see :mod:`hpcjobs.slurm.classify`); a
permanent one (a refused job, a bad option) fails at the first attempt with Slurm's message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hpcjobs.backoff import Backoff
from hpcjobs.errors import CommandError
from hpcjobs.slurm.classify import classify_error

T = TypeVar("T")

#: Slurm's bounds. sbatch itself already retries a busy controller for up to ~2 minutes inside
#: one attempt; a dead controller ends in a clear error after 3 minutes.
SLURM_RETRY = Backoff(attempts=30, total_s=180.0, first_wait_s=1.0, max_wait_s=20.0)


def is_retryable(exc: BaseException) -> bool:
    """A transient or ambiguous failure of a Slurm command."""
    return isinstance(exc, CommandError) and classify_error(exc).retryable


def describe(exc: BaseException) -> str:
    """How a retried failure is logged: its kind, then the command's message."""
    if isinstance(exc, CommandError):
        return f"{classify_error(exc).value} failure: {exc.message}"
    return str(exc)


def call(policy: Backoff, fn: Callable[[], T], *, label: str = "slurm") -> T:
    """Run ``fn`` (one Slurm command) under ``policy``; the last error is re-raised when the
    retries run out."""
    return policy.call(fn, retry_if=is_retryable, label=label, describe=describe)
