"""Slurm's time syntax, parsed in one place: time limits (``MM``, ``MM:SS``, ``HH:MM:SS``,
``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``, ``UNLIMITED``/``INFINITE``) and the durations Slurm
reports (``squeue %L``, ``sacct Elapsed``), which are the same syntax with at least one colon;
and its local time stamps (``YYYY-MM-DDTHH:MM:SS``)."""

from __future__ import annotations

import re
from datetime import datetime

from .slurmtext import UNSET

UNLIMITED = ("UNLIMITED", "INFINITE")

_DAYS = re.compile(r"([0-9]{1,9})-([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?")
_PLAIN = re.compile(r"([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?")


def parse_slurm_time(text: str) -> int | None:
    """Parse a Slurm time limit into seconds.

    Args:
        text: A time in Slurm syntax, for example ``"01:00:00"``, ``"2-00:00:00"`` or ``"30"``
            (minutes).

    Returns:
        The number of seconds, or None for ``UNLIMITED``/``INFINITE``.

    Raises:
        ValueError: The text is not Slurm time syntax, or a field is out of range.
    """
    value = text.strip()
    if value.upper() in UNLIMITED:
        return None
    days_match = _DAYS.fullmatch(value)
    if days_match:
        days, hours, minutes, seconds = (int(g) if g else 0 for g in days_match.groups())
    else:
        plain = _PLAIN.fullmatch(value)
        if not plain:
            raise ValueError(
                f"{text!r} is not a Slurm time (use MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED)"
            )
        fields = [int(g) for g in plain.groups() if g is not None]
        days = 0
        if len(fields) == 1:
            hours, minutes, seconds = 0, fields[0], 0
        elif len(fields) == 2:
            hours, minutes, seconds = 0, fields[0], fields[1]
        else:
            hours, minutes, seconds = fields
        if len(fields) > 1 and minutes > 59:
            raise ValueError(f"minutes in {text!r} must be below 60")
    if days_match and (hours > 23 or minutes > 59):
        raise ValueError(f"hours or minutes in {text!r} are out of range")
    if seconds > 59:
        raise ValueError(f"seconds in {text!r} must be below 60")
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def format_slurm_time(seconds: int | None) -> str:
    """Write seconds as ``D-HH:MM:SS`` (or ``HH:MM:SS`` below a day); None is ``UNLIMITED``.

    Args:
        seconds: A duration in seconds, or None for no limit.

    Returns:
        The duration in Slurm time syntax.
    """
    if seconds is None:
        return "UNLIMITED"
    days, rest = divmod(max(0, int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def parse_duration(text: str) -> int | None:
    """Seconds from a duration Slurm reports (``"1:02:03"``, ``"2-00:00:10"``, ``"0:07"``,
    ``"00:01.500"``: fractions of seconds are dropped); None when unset (``UNLIMITED``,
    ``NOT_SET``, ``INVALID``, "") or not a duration."""
    value = text.strip().split(".", 1)[0]
    if ":" not in value:
        return None
    try:
        return parse_slurm_time(value)
    except ValueError:
        return None


def parse_timestamp(text: str) -> datetime | None:
    """A local-time ``datetime`` from Slurm's ``YYYY-MM-DDTHH:MM:SS``; None when unset."""
    text = text.strip()
    if text in UNSET:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def epoch(text: str) -> float | None:
    """Slurm's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds (None when unset)."""
    stamp = parse_timestamp(text)
    return None if stamp is None else stamp.timestamp()
