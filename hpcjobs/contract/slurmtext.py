"""Slurm's text, read the one way: fields of ``scontrol show`` output. Durations, time limits
and time stamps are :mod:`.slurmtime`'s; job states, :mod:`.slurmstates`'."""

from __future__ import annotations

import re

#: What Slurm prints for a value it does not have.
UNSET = frozenset({"", "(null)", "N/A", "None", "Unknown", "None assigned"})


def field(info: str, key: str) -> str:
    """The value of ``KEY=`` in ``scontrol show`` output. The last one wins, so a job name
    holding `` KEY=...`` cannot fake it; a key that only ends another one (NodeList in
    ReqNodeList) does not count."""
    found = re.findall(rf"(?:^|\s){re.escape(key)}=(\S*)", info)
    return found[-1] if found else ""


def line_value(info: str, key: str) -> str:
    """The value of a ``KEY=`` that has a line of its own (StdOut=, StdErr=: paths may hold
    spaces)."""
    for line in info.splitlines():
        stripped = line.strip()
        if stripped.startswith(key + "=") and line[:1].isspace():
            return stripped[len(key) + 1 :]
    return ""
