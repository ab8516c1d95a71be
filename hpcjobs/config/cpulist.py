"""Linux cpulist syntax (``0-3,8,10-15:2``), as in ``/sys/devices/system/node/node0/cpulist``."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Highest CPU number accepted; far above any real machine, low enough to stop typos like 1e9.
MAX_CPU = 65535

_ITEM = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?")


def parse_cpulist(text: str) -> list[int]:
    """Parse a Linux cpulist into a sorted list of unique CPU numbers.

    Accepts single CPUs (``8``), ranges (``0-3``) and strided ranges (``0-15:2``), joined by
    commas. Whitespace around items is ignored.

    Args:
        text: The cpulist, for example ``"0-55,112-167"``.

    Returns:
        The CPU numbers in ascending order, without duplicates.

    Raises:
        ValueError: The text is empty or not valid cpulist syntax, a range runs backwards, a
            stride is zero, or a CPU number is above :data:`MAX_CPU`.
    """
    if not isinstance(text, str):
        raise ValueError(f"a cpulist must be a string such as '0-3,8', not {type(text).__name__}")
    if not text.strip():
        raise ValueError("a cpulist must not be empty")
    cpus: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        match = _ITEM.fullmatch(item)
        if not match:
            raise ValueError(
                f"invalid cpulist item {item!r} in {text!r} (expected N, N-M or N-M:S)"
            )
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        stride = int(match.group(3)) if match.group(3) is not None else 1
        if last < first:
            raise ValueError(f"cpulist range {item!r} runs backwards")
        if stride < 1:
            raise ValueError(f"cpulist stride in {item!r} must be at least 1")
        if last > MAX_CPU:
            raise ValueError(f"CPU number {last} in {text!r} is above {MAX_CPU}")
        cpus.update(range(first, last + 1, stride))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """Write CPU numbers in compact cpulist syntax, for example ``[0, 1, 2, 3, 8]`` as ``0-3,8``.

    Args:
        cpus: CPU numbers in any order; duplicates are ignored.

    Returns:
        The compact cpulist, or an empty string for no CPUs.
    """
    ordered = sorted(set(cpus))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        start = end = ordered[index]
        while index + 1 < len(ordered) and ordered[index + 1] == end + 1:
            index += 1
            end = ordered[index]
        parts.append(str(start) if start == end else f"{start}-{end}")
        index += 1
    return ",".join(parts)
