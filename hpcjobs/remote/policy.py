"""How remote connections fail and retry: the error kinds and the retry policy.

Kept free of paramiko so that callers can name these without importing it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import tenacity

from hpcjobs.errors import TransportError

log = logging.getLogger(__name__)

T = TypeVar("T")


class TransientTransportError(TransportError):
    """A network failure that may go away by itself; connecting again may succeed."""


class AuthenticationError(TransportError):
    """The server accepted none of the keys offered. Never retried."""


@dataclass(frozen=True)
class ConnectRetry:
    """How often, and how patiently, to retry a connection that failed for network reasons.

    Only :class:`TransientTransportError` is retried: authentication and host key failures
    are final at the first attempt.

    Attributes:
        attempts: The most connection attempts.
        first_wait_s: Scale of the first wait; waits grow exponentially with full jitter.
        max_wait_s: The longest single wait.
        total_s: Stop retrying once this much time has passed.
        sleep: The sleep function (tests pass a fake one).
    """

    attempts: int = 4
    first_wait_s: float = 1.0
    max_wait_s: float = 10.0
    total_s: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)

    def call(self, fn: Callable[[], T], *, label: str) -> T:
        """Run ``fn``, retrying :class:`TransientTransportError`; re-raise the last error."""
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(TransientTransportError),
            stop=tenacity.stop_after_attempt(max(1, self.attempts))
            | tenacity.stop_after_delay(self.total_s),
            wait=tenacity.wait_random_exponential(
                multiplier=self.first_wait_s, max=self.max_wait_s
            ),
            sleep=self.sleep,
            before_sleep=lambda state: _log_retry(label, self.attempts, state),
            reraise=True,
        )
        return retrying(fn)


#: Fail at the first error: for tests and for callers that retry themselves.
NO_RETRY = ConnectRetry(attempts=1)


def _log_retry(label: str, attempts: int, state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    wait = state.next_action.sleep if state.next_action else 0.0
    message = exc.message if isinstance(exc, TransportError) else str(exc)
    log.warning(
        "%s: %s (attempt %d of %d), retrying in %.1f s",
        label,
        message,
        state.attempt_number,
        attempts,
        wait,
    )
