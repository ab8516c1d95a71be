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


#: The ``SchedulerParameters`` option that lets Slurm add nodes to a running job (job
#: expansion: a job submitted ``--dependency=expand:<job>`` gives its nodes to ``<job>``).
JOB_EXPANSION = "permit_job_expansion"


def options(value: str) -> set[str]:
    """The options of a comma-separated Slurm setting (``SchedulerParameters=a,b=1``), lower
    case, each with its value (``b=1``)."""
    return {item.strip().lower() for item in value.split(",") if item.strip()}
