"""How remote connections fail and retry: the error kinds, and what is retried (the mechanism:
:mod:`hpcjobs.backoff`).

Kept free of paramiko so that callers can name these without importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hpcjobs.backoff import Backoff
from hpcjobs.errors import TransportError

T = TypeVar("T")


class TransientTransportError(TransportError):
    """A network failure that may go away by itself; connecting again may succeed."""


class AuthenticationError(TransportError):
    """The server accepted none of the keys offered. Never retried."""


#: A connection's bounds: only :class:`TransientTransportError` is retried; authentication and
#: host key failures are final at the first attempt.
CONNECT_RETRY = Backoff(attempts=4, total_s=60.0, first_wait_s=1.0, max_wait_s=10.0)


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, TransientTransportError)


def _describe(exc: BaseException) -> str:
    return exc.message if isinstance(exc, TransportError) else str(exc)


def call(policy: Backoff, fn: Callable[[], T], *, label: str) -> T:
    """Run ``fn`` (one connection attempt) under ``policy``, retrying
    :class:`TransientTransportError`; the last error is re-raised."""
    return policy.call(fn, retry_if=_transient, label=label, describe=_describe)


__all__ = [
    "CONNECT_RETRY",
    "AuthenticationError",
    "TransientTransportError",
    "call",
]
