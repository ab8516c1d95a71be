"""Event log lines for tests, in the log's own format (hpcjobs.contract.eventlog)."""

from __future__ import annotations

from pathlib import Path

from hpcjobs.contract.eventlog import Event, encode, parse


def line(
    job: str,
    kind: str,
    cause: str = "-",
    detail: str = "",
    *,
    at: float = 1.0,
    restart: int = 0,
    **data: object,
) -> str:
    """One event as the supervisor writes it."""
    return encode(Event(at, job, restart, kind, cause, detail, data))


def events_in(path: Path) -> list[Event]:
    """The events of a log file."""
    return parse(path.read_text())


def kinds(path: Path) -> list[tuple[str, str]]:
    """(event, cause) of each event of a log file."""
    return [(e.event, e.cause) for e in events_in(path)]
