"""The one retry policy of hpcjobs: jittered exponential waits, bounded in attempts and in time.

Slurm's commands (:mod:`hpcjobs.slurm.client`, what they retry: :mod:`hpcjobs.slurm.retry`) and
SSH connections (:mod:`hpcjobs.remote.connect`) retry through :class:`Backoff`, with their own
bounds. Waits are random exponential (full jitter), so that many clients never retry in
lock-step; the total bound turns a dead controller or host into a clear error, not a hang.
tenacity is imported on the first call: a command that never retries does not pay for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from hpcjobs.logger import logger

log = logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """How often, and how patiently, to retry.

    Attributes:
        attempts: The most attempts, the first included (1: never retry).
        total_s: Stop retrying once this much time has passed since the first attempt.
        first_wait_s: Scale of the first wait; waits grow exponentially with full jitter.
        max_wait_s: The longest single wait.
        sleep: The sleep function (tests pass a fake one).
    """

    attempts: int = 4
    total_s: float = 60.0
    first_wait_s: float = 1.0
    max_wait_s: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def call(
        self,
        fn: Callable[[], T],
        *,
        retry_if: Callable[[BaseException], bool],
        label: str,
        describe: Callable[[BaseException], str] = str,
    ) -> T:
        """Run ``fn``; an error ``retry_if`` accepts runs it again, within the bounds. The last
        error is raised when they run out. Each retry is logged as a warning: ``label``, what
        ``describe`` says of the error, the attempt and the wait."""
        import tenacity

        def log_retry(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            log.warning(
                "%s: %s (attempt %d of %d), retrying in %.1f s",
                label,
                describe(exc) if exc is not None else "failed",
                state.attempt_number,
                self.attempts,
                wait,
            )

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(retry_if),
            stop=tenacity.stop_after_attempt(max(1, self.attempts))
            | tenacity.stop_after_delay(self.total_s),
            wait=tenacity.wait_random_exponential(
                multiplier=self.first_wait_s, max=self.max_wait_s
            ),
            sleep=self.sleep,
            before_sleep=log_retry,
            reraise=True,
        )
        return retrying(fn)


#: Fail at the first error: for tests and for callers that retry themselves.
NO_RETRY = Backoff(attempts=1, total_s=0.0)
