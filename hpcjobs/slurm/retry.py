"""The retry policy shared by every Slurm command: tenacity with jittered exponential backoff.

Only transient and ambiguous failures are retried (see :mod:`hpcjobs.slurm.classify`), with
random exponential waits so many clients do not retry in lock-step, and a bound on the total
time so a dead controller ends in a clear error instead of a hang.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from hpcjobs.errors import CommandError
from hpcjobs.slurm.classify import classify_error

if TYPE_CHECKING:
    import tenacity

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How long and how often to retry a transient Slurm failure.

    Attributes:
        total_s: give up once this much time has passed since the first attempt. sbatch itself
            already retries a busy controller for up to ~2 minutes inside one attempt.
        first_wait_s: scale of the first wait; waits grow exponentially with full jitter.
        max_wait_s: the longest single wait.
        max_attempts: give up after this many attempts, whatever the time.
        sleep: the sleep function (tests pass a fake one).
    """

    total_s: float = 180.0
    first_wait_s: float = 1.0
    max_wait_s: float = 20.0
    max_attempts: int = 30
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def retrying(self, *, label: str = "slurm") -> tenacity.Retrying:
        """A tenacity ``Retrying`` that repeats retryable :class:`CommandError` failures."""
        import tenacity  # imported here: a command that never retries does not pay for it

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(_is_retryable),
            stop=tenacity.stop_after_delay(self.total_s)
            | tenacity.stop_after_attempt(self.max_attempts),
            wait=tenacity.wait_random_exponential(
                multiplier=self.first_wait_s, max=self.max_wait_s
            ),
            sleep=self.sleep,
            before_sleep=lambda state: _log_retry(label, state),
            reraise=True,
        )

    def call(self, fn: Callable[[], T], *, label: str = "slurm") -> T:
        """Run ``fn`` under this policy; the last error is re-raised when retries run out."""
        return self.retrying(label=label)(fn)


#: Fails at once: for tests and for callers that do their own retrying.
NO_RETRY = RetryPolicy(total_s=0.0, max_attempts=1)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, CommandError) and classify_error(exc).retryable


def _log_retry(label: str, state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    kind = classify_error(exc).value if isinstance(exc, CommandError) else "error"
    log.warning(
        "%s: %s failure (attempt %d), retrying in %.1f s: %s",
        label,
        kind,
        state.attempt_number,
        wait,
        getattr(exc, "message", exc),
    )
