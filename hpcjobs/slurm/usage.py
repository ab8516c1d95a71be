"""What each run used, from accounting: one ``sacct`` for any number of jobs, or a window.

:meth:`SlurmClient.usage <hpcjobs.slurm.client.SlurmClient.usage>` asks; this module holds the
question (:func:`sacct_argv`) and the parser (:func:`parse_usage`). It is a different question
from :meth:`SlurmClient.accounting` (``sacct -X``: how each run ended): this one needs the steps.

``sacct -D -P -n`` without ``-X`` lists every run of every job (``-D``: a job Slurm requeued has
one record per run) and their steps (``12.batch``, ``12.0``). The allocation rows give the run's
start, end, elapsed seconds and ``AllocTRES`` (``cpu=8,gres/gpu=4,node=2``); the step rows give
``TotalCPU`` and ``MaxRSS`` (with ``MaxRSSNode``), as ``seff`` reads them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from hpcjobs.contract.slurmtime import parse_duration, parse_timestamp
from hpcjobs.slurm.parse import (
    base_state,
    fold_resized,
    resized_overlap,
)
from hpcjobs.textlines import split_lines

#: sacct fields for the report; ``JobName`` last: it is free text and may contain ``|``.
FIELDS = (
    "JobID",
    "JobIDRaw",
    "State",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "AllocTRES",
    "ReqTRES",
    "AllocCPUS",
    "TotalCPU",
    "MaxRSS",
    "MaxRSSNode",
    "NNodes",
    "NodeList",
    "User",
    "Account",
    "Partition",
    "JobName",
)

_STEP = re.compile(r"^(\d+(?:_\d+)?)\.(\S+)$")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Size(NamedTuple):
    """One earlier size of a run Slurm resized: how long it lasted, its GPUs (None: not
    tracked) and its CPUs."""

    seconds: int
    gpus: int | None
    cpus: int


@dataclass
class StepUsage:
    """One job step of a run: its CPU time and peak resident memory, where measured."""

    name: str
    start: datetime | None
    total_cpu_s: float | None
    max_rss_bytes: int | None
    max_rss_node: str


@dataclass
class RunUsage:
    """One run of a job, as accounting recorded it."""

    job_id: str
    state: str
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    alloc_tres: dict[str, str]
    req_tres: dict[str, str]
    alloc_cpus: int
    nodes: int
    nodelist: str
    user: str
    account: str
    name: str
    #: The partition the run ran in (what its allocation is priced at).
    partition: str = ""
    steps: list[StepUsage] = field(default_factory=list)
    #: Where Slurm resized the run (a node out of a job with spare nodes): each earlier size,
    #: oldest first; ``elapsed_s`` counts them too.
    resized: list[Size] = field(default_factory=list)

    @property
    def sizes(self) -> list[Size]:
        """Every size of the run, the current (last) one too."""
        last = self.elapsed_s - sum(size.seconds for size in self.resized)
        return [*self.resized, Size(last, self.gpus, self.alloc_cpus)]

    @property
    def gpus(self) -> int | None:
        """GPUs of the allocation, where accounting tracks them (``gres/gpu`` in AllocTRES)."""
        return _tres_count(self.alloc_tres, "gres/gpu")

    @property
    def gpu_seconds(self) -> int | None:
        """GPU-seconds of the allocation over every size it had (None: GPUs not tracked)."""
        if any(size.gpus is None for size in self.sizes):
            return None
        return sum(size.seconds * (size.gpus or 0) for size in self.sizes)

    @property
    def cpu_seconds(self) -> int:
        """CPU-seconds of the allocation over every size it had."""
        return sum(size.seconds * size.cpus for size in self.sizes)

    @property
    def requested_gpus(self) -> int | None:
        """GPUs the job asked for (``ReqTRES``), for sites that do not track allocated ones."""
        return _tres_count(self.req_tres, "gres/gpu")

    @property
    def started(self) -> bool:
        return self.start is not None

    @property
    def total_cpu_s(self) -> float | None:
        """CPU time used by the run's steps; None where accounting gathers none."""
        values = [s.total_cpu_s for s in self.steps if s.total_cpu_s is not None]
        return sum(values) if values and any(values) else None

    @property
    def cpu_efficiency(self) -> float | None:
        """``seff``'s CPU efficiency: CPU time used / (elapsed x allocated CPUs)."""
        used = self.total_cpu_s
        if used is None or self.cpu_seconds <= 0:
            return None
        return used / self.cpu_seconds

    @property
    def peak_memory(self) -> tuple[int, str] | None:
        """The largest ``MaxRSS`` of the run's steps (bytes) and its node; None if unmeasured."""
        best = max(
            (s for s in self.steps if s.max_rss_bytes),
            key=lambda s: s.max_rss_bytes or 0,
            default=None,
        )
        return (
            None
            if best is None or not best.max_rss_bytes
            else (best.max_rss_bytes, best.max_rss_node)
        )


def sacct_argv(
    job_ids: Sequence[str] | None = None,
    *,
    user: str | None = None,
    since: str | None = None,
    until: str | None = None,
    account: str | None = None,
) -> list[str]:
    """The one ``sacct`` command for these jobs (checked ids, :func:`check_job_ids
    <hpcjobs.slurm.client.check_job_ids>`), or for a user's/account's jobs in a window."""
    argv = ["sacct", "-D", "-P", "-n", "-o", ",".join(FIELDS)]
    if job_ids:
        argv += ["-j", ",".join(job_ids)]
    else:
        argv += ["-u", user] if user else ["--allusers"] if account else []
        argv += ["-S", since or "now-7days"]
        if until:
            argv += ["-E", until]
    if account:
        argv += ["-A", account]
    return argv


def parse_usage(text: str) -> list[RunUsage]:
    """Runs (with their steps) from ``sacct -D -P -n -o FIELDS`` output; odd lines skipped."""
    runs: list[RunUsage] = []
    for line in split_lines(text):
        parts = line.split("|", len(FIELDS) - 1)
        if len(parts) != len(FIELDS):
            continue
        f = dict(zip(FIELDS, parts, strict=True))
        step = _STEP.match(f["JobID"].strip())
        if step:
            _attach_step(runs, step.group(1), step.group(2), f)
            continue
        runs.append(
            RunUsage(
                job_id=f["JobID"].strip(),
                state=base_state(f["State"])[0],
                submit=parse_timestamp(f["Submit"]),
                start=parse_timestamp(f["Start"]),
                end=parse_timestamp(f["End"]),
                elapsed_s=_int(f["ElapsedRaw"]),
                alloc_tres=parse_tres(f["AllocTRES"]),
                req_tres=parse_tres(f["ReqTRES"]),
                alloc_cpus=_int(f["AllocCPUS"]),
                nodes=_int(f["NNodes"]),
                nodelist=f["NodeList"].strip(),
                user=f["User"].strip(),
                account=f["Account"].strip(),
                name=f["JobName"],
                partition=f["Partition"].strip(),
            )
        )
    return fold_resized(runs, lambda r: r.job_id, lambda r: r.state, _fold_resized)


def _fold_resized(earlier: RunUsage, later: RunUsage) -> RunUsage:
    """One run from the record of its earlier size (with its steps) and the next one."""
    later.resized = earlier.sizes
    own = later.elapsed_s - resized_overlap(earlier.end, later.start)
    later.elapsed_s = earlier.elapsed_s + max(0, own)
    later.start = earlier.start or later.start
    later.submit = earlier.submit or later.submit
    later.steps = earlier.steps + later.steps
    return later


def _attach_step(runs: list[RunUsage], job_id: str, name: str, f: dict[str, str]) -> None:
    """A step belongs to the latest run of its job that started at or before it."""
    start = parse_timestamp(f["Start"])
    owners = [r for r in runs if r.job_id == job_id]
    if not owners:
        return
    chosen = owners[-1]
    if start is not None:
        before = [r for r in owners if r.start is not None and r.start <= start]
        if before:
            chosen = max(before, key=lambda r: r.start or start)
    chosen.steps.append(
        StepUsage(
            name=name,
            start=start,
            total_cpu_s=parse_cpu_time(f["TotalCPU"]),
            max_rss_bytes=parse_bytes(f["MaxRSS"]),
            max_rss_node=f["MaxRSSNode"].strip(),
        )
    )


def parse_tres(text: str) -> dict[str, str]:
    """``cpu=8,gres/gpu=4,node=2`` as a dict."""
    out = {}
    for item in text.strip().split(","):
        key, sep, value = item.partition("=")
        if sep and key:
            out[key.strip()] = value.strip()
    return out


def parse_cpu_time(text: str) -> float | None:
    """Seconds from sacct's ``[D-][HH:]MM:SS[.mmm]`` CPU times; None when empty.

    The whole seconds come from Slurm's one duration parser (:func:`parse_duration`); only the
    fraction, which CPU times carry, is added here.
    """
    whole, _, fraction = text.strip().partition(".")
    seconds = parse_duration(whole)
    if seconds is None or (fraction and not fraction.isdigit()):
        return None
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def parse_bytes(text: str) -> int | None:
    """Bytes from sacct's memory figures (``123456K``, ``1.5G``, plain bytes); None if empty."""
    value = text.strip().upper()
    if not value:
        return None
    scale = _UNITS.get(value[-1], 1)
    number = value[:-1] if value[-1] in _UNITS else value
    try:
        return int(float(number) * scale)
    except ValueError:
        return None


def _tres_count(tres: dict[str, str], key: str) -> int | None:
    total = None
    for name, value in tres.items():
        if (name == key or name.startswith(key + ":")) and value.isdigit():
            if name == key:
                return int(value)
            total = (total or 0) + int(value)
    return total


def _int(text: str) -> int:
    text = text.strip()
    return int(text) if text.isdigit() else 0
