"""Slurm host lists: ``n[1-3],gpu[01-02,07]`` <-> ``["n1", "n2", "n3", "gpu01", ...]``."""

from __future__ import annotations

import re

from hpcjobs.errors import BadInputError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand(hostlist: str) -> list[str]:
    """Expand a Slurm host list expression, keeping order and zero padding.

    Raises:
        BadInputError: The expression is malformed.
    """
    hosts: list[str] = []
    for item in _split_top(hostlist.strip()):
        hosts.extend(_expand_item(item))
    return hosts


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise BadInputError(f"unbalanced ']' in host list {text!r}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise BadInputError(f"unbalanced '[' in host list {text!r}")
    items.append("".join(current))
    return [item for item in items if item]


def _expand_item(item: str) -> list[str]:
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.index("]", start)
    prefix, body, rest = item[:start], item[start + 1 : end], item[end + 1 :]
    suffixes = _expand_item(rest) if rest else [""]
    out: list[str] = []
    for part in body.split(","):
        match = _RANGE.match(part.strip())
        if not match:
            raise BadInputError(f"bad range {part!r} in host list {item!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        width = len(low) if low.startswith("0") else 0
        if int(high) < int(low):
            raise BadInputError(f"descending range {part!r} in host list {item!r}")
        for number in range(int(low), int(high) + 1):
            out.extend(f"{prefix}{number:0{width}d}{suffix}" for suffix in suffixes)
    return out
