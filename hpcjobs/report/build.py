"""A chain's report: its runs from accounting, its events, its progress, put together.

:func:`chain_report` is pure (plain inputs, a :class:`ChainReport` out); :func:`collect`
gathers the inputs for any number of chains with one ``sacct`` for all of them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.records import find_record, read_record
from hpcjobs.report.goodput import (
    BADPUT_PARTS,
    LABELS,
    PARTS,
    RunParts,
    RunWindow,
    assign_reports,
    percentile,
    shrunk_share,
    spare_share,
    split_run,
    step_times,
)
from hpcjobs.report.gpu import read_gpu_samples
from hpcjobs.report.money import Rate, chain_cost
from hpcjobs.report.progressfiles import read_progress
from hpcjobs.runtime.progress import Report
from hpcjobs.slurm.usage import RunUsage

if TYPE_CHECKING:
    from hpcjobs.contract.eventlog import Event
    from hpcjobs.jobs.chain import Chain, ChainRef
    from hpcjobs.report.gpu import GpuSummary
    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient

#: Where a run's GPU count came from.
GPUS_ACCOUNTING = "accounting"
GPUS_REQUEST = "request"
GPUS_NONE = "none"

NO_PROGRESS = (
    "the program reported no progress ($HPCJOBS_PROGRESS_DIR): allocated time and accounting "
    "figures only, no goodput"
)
GPUS_FROM_REQUEST = (
    "this cluster does not track GPUs in accounting (no gres/gpu in AllocTRES): GPUs are "
    "taken from the job's request"
)
NO_GPUS = "the runs had no GPUs: allocated time is counted in allocation-hours (node time)"
NO_TELEMETRY = "no GPU telemetry for this chain: utilisation and GPU memory are not known"
NO_CPU_ACCOUNTING = (
    "CPU time and memory are not gathered by this cluster's accounting (JobAcctGatherType)"
)


@dataclass
class RunReport:
    """One run: its allocation and how it divides."""

    job_id: str
    index: int
    state: str
    start: float
    end: float
    elapsed_s: float
    gpus: int
    gpus_source: str
    cpus: int
    nodes: int
    nodelist: str
    running: bool
    parts: RunParts | None
    cpu_efficiency: float | None
    peak_memory: tuple[int, str] | None
    cause: str = ""
    signal_at: float | None = None
    #: GPU- and CPU-seconds of a run Slurm resized (its sizes from accounting); None:
    #: ``elapsed_s`` x ``gpus`` (``cpus``).
    gpu_s: float | None = None
    cpu_s: float | None = None
    #: The partition the run ran in (accounting's ``Partition``).
    partition: str = ""

    @property
    def weight(self) -> float:
        """GPUs per second of this run (1 for runs without GPUs: allocation time); for a
        resized run, the mean over its sizes."""
        if self.gpu_s is not None and self.elapsed_s > 0:
            return self.gpu_s / self.elapsed_s
        return self.gpus if self.gpus > 0 else 1

    @property
    def allocated_gpu_s(self) -> float:
        """GPU-seconds of the run's allocation, over every size it had."""
        return self.gpu_s if self.gpu_s is not None else self.elapsed_s * self.gpus

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "index": self.index,
            "state": self.state,
            "start": self.start,
            "end": self.end,
            "elapsed_s": self.elapsed_s,
            "gpus": self.gpus,
            "gpu_seconds": self.allocated_gpu_s,
            "gpus_source": self.gpus_source,
            "cpus": self.cpus,
            "nodes": self.nodes,
            "nodelist": self.nodelist,
            "partition": self.partition,
            "running": self.running,
            "cause": self.cause,
            "signal_at": self.signal_at,
            "parts_s": None if self.parts is None else dict(self.parts.seconds),
            "first_progress": None if self.parts is None else self.parts.first_progress,
            "last_progress": None if self.parts is None else self.parts.last_progress,
            "first_step": None if self.parts is None else self.parts.first_step,
            "last_step": None if self.parts is None else self.parts.last_step,
            "steps": None if self.parts is None else self.parts.steps,
            "redone_steps": None if self.parts is None else self.parts.redone_steps,
            "cpu_efficiency": self.cpu_efficiency,
            "peak_memory_bytes": None if self.peak_memory is None else self.peak_memory[0],
            "peak_memory_node": None if self.peak_memory is None else self.peak_memory[1],
        }


@dataclass
class ChainReport:
    """Everything ``hpcjobs report`` says about one chain."""

    root: str
    name: str
    job_ids: list[str]
    runs: list[RunReport]
    result: str | None
    queue_wait_s: float | None
    gaps_s: list[float]
    interruptions: list[dict[str, Any]]
    progress: dict[int, list[Report]]
    #: The steps lost at the stops whose loss the event log knows, summed; None without stops,
    #: or when no stop's loss is known and some are unknown (``stops_with_unknown_loss``).
    steps_lost_event_log: int | None
    gpu: GpuSummary | None = None
    notes: list[str] = field(default_factory=list)
    #: Partition -> its price (:mod:`hpcjobs.report.money`); empty: no money is shown.
    rates: dict[str, Rate] = field(default_factory=dict)
    #: Stops after which the chain resumed but the steps lost are unknown (the program reported
    #: no progress, or the step of the checkpoint resumed from is unknown): not in
    #: ``steps_lost_event_log``.
    stops_with_unknown_loss: int = 0

    # ---- totals ---------------------------------------------------------------------------

    @property
    def has_progress(self) -> bool:
        return any(run.parts is not None for run in self.runs)

    @property
    def allocated_s(self) -> float:
        """Allocated GPU-seconds (allocation-seconds for runs without GPUs)."""
        return sum(run.elapsed_s * run.weight for run in self.runs)

    @property
    def allocated_gpu_hours(self) -> float:
        return sum(run.allocated_gpu_s for run in self.runs) / 3600.0

    @property
    def allocated_cpu_hours(self) -> float:
        return (
            sum(run.elapsed_s * run.cpus if run.cpu_s is None else run.cpu_s for run in self.runs)
            / 3600.0
        )

    @property
    def unit(self) -> str:
        return "GPU" if any(run.gpus > 0 for run in self.runs) else "allocation"

    def part_s(self, part: str) -> float | None:
        """A part over all runs, weighted by GPUs (None without progress)."""
        if not self.has_progress:
            return None
        return sum(run.parts.seconds[part] * run.weight for run in self.runs if run.parts)

    def share(self, part: str) -> float | None:
        value = self.part_s(part)
        total = self.allocated_s
        return None if value is None or total <= 0 else value / total

    @property
    def goodput(self) -> float | None:
        """The share of allocated time in which training advanced."""
        return self.share("goodput")

    @property
    def biggest_badput(self) -> tuple[str, float] | None:
        shares = [(part, self.share(part) or 0.0) for part in BADPUT_PARTS]
        if not self.has_progress:
            return None
        return max(shares, key=lambda item: item[1])

    @property
    def redone_steps(self) -> int | None:
        if not self.has_progress:
            return None
        return sum(run.parts.redone_steps for run in self.runs if run.parts)

    def pricing(self) -> tuple[dict[str, Any] | None, str | None]:
        """``(cost, note)``: the allocation's cost and each part's at the partitions' prices,
        or None and why not (no note when no prices were asked for)."""
        return chain_cost(self.runs, self.rates, self.has_progress) if self.rates else (None, None)

    def cost(self) -> dict[str, Any] | None:
        """The cost of :meth:`pricing`."""
        return self.pricing()[0]

    def cost_note(self) -> str | None:
        """Why there is no cost although prices were given (:meth:`pricing`)."""
        return self.pricing()[1]

    @property
    def not_running_s(self) -> float:
        return (self.queue_wait_s or 0.0) + sum(self.gaps_s)

    # ---- step times -----------------------------------------------------------------------

    def step_stats(self) -> dict[str, Any]:
        """Median and p90 step time over every rank, and the slowest rank (highest median)."""
        every: list[float] = []
        per_rank: dict[int, float] = {}
        hosts: dict[int, str] = {}
        for rank, reports in self.progress.items():
            times: list[float] = []
            for run_reports in self._by_run(reports):
                times += step_times(run_reports)
            every += times
            if times:
                per_rank[rank] = statistics.median(times)
            named = [r.host for r in reports if r.host]
            if named:
                hosts[rank] = named[-1]
        slowest = max(per_rank, key=lambda r: per_rank[r]) if per_rank else None
        return {
            "median_s": statistics.median(every) if every else None,
            "p90_s": percentile(every, 0.9),
            "ranks": len(self.progress),
            "per_rank_median_s": {str(k): v for k, v in per_rank.items()},
            "slowest_rank": slowest,
            "slowest_rank_median_s": None if slowest is None else per_rank[slowest],
            "slowest_node": None if slowest is None else hosts.get(slowest),
        }

    def _by_run(self, reports: list[Report]) -> list[list[Report]]:
        return assign_reports(reports, [(r.start, r.end) for r in self.runs])

    def summary_line(self) -> str:
        """The one line ``submit --wait`` ends with."""
        hours = f"{self.allocated_gpu_hours:.3f} GPU-hours allocated"
        if self.unit != "GPU":
            hours = f"{self.allocated_s / 3600:.3f} allocation-hours (no GPUs)"
        if self.goodput is None:
            return f"Report: {hours}; goodput unknown (the program reported no progress)"
        text = f"Report: goodput {self.goodput * 100:.1f} % of {hours}"
        biggest = self.biggest_badput
        if biggest is not None and biggest[1] > 0:
            text += f"; biggest badput: {LABELS[biggest[0]]} {biggest[1] * 100:.1f} %"
        return text

    def to_dict(self) -> dict[str, Any]:
        shares = {part: self.share(part) for part in PARTS}
        cost, cost_note = self.pricing()
        return {
            "root": self.root,
            "name": self.name,
            "job_ids": self.job_ids,
            "result": self.result,
            "runs": [run.to_dict() for run in self.runs],
            "unit": self.unit,
            "allocated_s": self.allocated_s,
            "allocated_gpu_hours": self.allocated_gpu_hours,
            "allocated_cpu_hours": self.allocated_cpu_hours,
            "has_progress": self.has_progress,
            "goodput": self.goodput,
            "parts_s": {part: self.part_s(part) for part in PARTS},
            "shares": shares,
            "biggest_badput": None if self.biggest_badput is None else self.biggest_badput[0],
            "redone_steps": self.redone_steps,
            "steps_lost_event_log": self.steps_lost_event_log,
            "stops_with_unknown_loss": self.stops_with_unknown_loss,
            "queue_wait_s": self.queue_wait_s,
            "gaps_s": self.gaps_s,
            "not_running_s": self.not_running_s,
            "step_time": self.step_stats(),
            "interruptions": self.interruptions,
            "gpu": None if self.gpu is None else self.gpu.to_dict(),
            "cost": cost,
            "notes": self.notes + ([cost_note] if cost_note else []),
        }


def chain_report(
    root: str,
    usage: Sequence[RunUsage],
    chain: Chain | None,
    progress: Mapping[int, list[Report]],
    *,
    requested_gpus: int | None = None,
    gpu: GpuSummary | None = None,
    now: float | None = None,
    rates: Mapping[str, Rate] | None = None,
) -> ChainReport:
    """The report of one chain from its accounting rows, event log and progress reports.

    Args:
        root: the chain's first job id.
        usage: accounting of every job of the chain (other jobs' rows are ignored).
        chain: the chain's events, or None for a job without an event log.
        progress: rank -> that rank's reports.
        requested_gpus: the GPUs the job asked for (its submission record), used where
            accounting tracks no GPUs.
        gpu: GPU telemetry, where the job sampled it.
        now: the time for a run still running (default: now).
        rates: partition -> its price, for the cost (none: no money is shown).
    """
    now = time.time() if now is None else now
    ids = chain.job_ids if chain is not None and chain.events else [root]
    rows = [u for u in usage if u.job_id in ids and u.start is not None]
    rows.sort(key=lambda u: (u.start.timestamp() if u.start else 0.0, ids.index(u.job_id)))
    notes: list[str] = []
    runs = _runs(rows, requested_gpus, now, notes)
    if chain is not None:
        _mark_from_events(runs, chain)
    has_progress = _split_runs(runs, chain, progress)
    if not has_progress:
        notes.append(NO_PROGRESS)
    if gpu is None and any(run.gpus > 0 for run in runs):
        notes.append(NO_TELEMETRY)
    if runs and all(run.cpu_efficiency is None for run in runs):
        notes.append(NO_CPU_ACCOUNTING)
    gaps = [max(0.0, b.start - a.end) for a, b in pairwise(runs)]
    stops = chain.interruptions() if chain is not None else []
    lost = [s.steps_lost for s in stops if s.steps_lost is not None]
    unknown = sum(1 for s in stops if s.loss_unknown)
    final = chain.final if chain is not None else None
    name = rows[-1].name if rows else ""
    return ChainReport(
        root=root,
        name=name,
        job_ids=ids,
        runs=runs,
        result=None if final is None else f"{final.cause}: {final.detail}",
        queue_wait_s=_queue_wait(usage, ids[0], runs),
        gaps_s=gaps,
        interruptions=[s.to_dict() for s in stops],
        progress=dict(progress),
        steps_lost_event_log=sum(lost) if stops and (lost or not unknown) else None,
        gpu=gpu,
        notes=notes,
        rates=dict(rates or {}),
        stops_with_unknown_loss=unknown,
    )


def _split_runs(
    runs: list[RunReport], chain: Chain | None, progress: Mapping[int, list[Report]]
) -> bool:
    """Set each run's parts from the lowest reporting rank; whether any rank reported."""
    # Every rank steps together in data parallel training: one rank's reports give goodput.
    reference = progress[min(progress)] if progress else []
    has_progress = bool(reference)
    per_run = assign_reports(reference, [(_begin(r, chain), r.end) for r in runs])
    reached: int | None = None
    for run, reports in zip(runs, per_run, strict=True):
        window = RunWindow(run.job_id, run.index, run.start, run.end, run.gpus, run.signal_at)
        starts = _starts(run, chain)
        run.parts = split_run(
            window,
            reports,
            reached,
            chain_has_progress=has_progress,
            restarts=[s.time for s in starts[1:]],
            spare=_spare(run, starts),
            shrunk=_shrunk(run, starts),
        )
        stepped = [r.step for r in reports if r.step is not None]
        if stepped:
            reached = max(stepped) if reached is None else max(reached, *stepped)
    return has_progress


def _queue_wait(usage: Sequence[RunUsage], first_id: str, runs: list[RunReport]) -> float | None:
    """How long the chain's first job waited in the queue before its first run started."""
    first = next((u for u in usage if u.job_id == first_id and u.submit), None)
    if first is not None and first.submit and runs:
        return max(0.0, runs[0].start - first.submit.timestamp())
    return None


def _runs(
    rows: Sequence[RunUsage], requested: int | None, now: float, notes: list[str]
) -> list[RunReport]:
    runs = []
    seen: dict[str, int] = {}
    from_request = False
    for row in rows:
        assert row.start is not None
        index = seen.get(row.job_id, 0)
        seen[row.job_id] = index + 1
        start = row.start.timestamp()
        running = row.end is None
        end = now if row.end is None else row.end.timestamp()
        gpus, source = row.gpus, GPUS_ACCOUNTING
        if gpus is None:
            gpus = row.requested_gpus if row.requested_gpus is not None else requested
            source = GPUS_REQUEST if gpus is not None else GPUS_NONE
            from_request = from_request or gpus is not None
        runs.append(
            RunReport(
                job_id=row.job_id,
                index=index,
                state=row.state,
                start=start,
                end=end,
                elapsed_s=float(row.elapsed_s) if not running else max(0.0, end - start),
                gpus=gpus or 0,
                gpus_source=source,
                cpus=row.alloc_cpus,
                nodes=row.nodes,
                nodelist=row.nodelist,
                running=running,
                parts=None,
                cpu_efficiency=row.cpu_efficiency,
                peak_memory=row.peak_memory,
                gpu_s=row.gpu_seconds if row.resized and source == GPUS_ACCOUNTING else None,
                cpu_s=row.cpu_seconds if row.resized else None,
                partition=row.partition,
            )
        )
        # Accounting's elapsed is the truth for allocated time; keep end consistent with it.
        if not running:
            runs[-1].end = start + runs[-1].elapsed_s
    if from_request:
        notes.append(GPUS_FROM_REQUEST)
    elif runs and all(run.gpus == 0 for run in runs):
        notes.append(NO_GPUS)
    return runs


def _mark_from_events(runs: list[RunReport], chain: Chain) -> None:
    """Each run's warning signal and why it ended (:meth:`Chain.stops`), from the event log."""
    signals: dict[tuple[str, int], float] = {}
    for event in chain.events:
        if event.event == "signal":
            signals.setdefault((event.job_id, event.restart), event.time)
    stops = chain.stops()
    for run in runs:
        key = (run.job_id, run.index)
        run.signal_at = signals.get(key, run.signal_at)
        stop = stops.get(key)
        if stop is not None:
            run.cause = f"{stop.cause}: {stop.detail}" if stop.event == "end" else stop.cause


def _starts(run: RunReport, chain: Chain | None) -> list[Event]:
    """The ``start`` events of a run: more than one where the program started again inside
    the run's allocation (spare nodes)."""
    if chain is None:
        return []
    mine = [e for e in chain.events if e.event == "start"]
    return [e for e in mine if (e.job_id, e.restart) == (run.job_id, run.index)]


def _sizes(run: RunReport, starts: Sequence[Event], key: str) -> list[tuple[float, int, int]]:
    """For each start of the program in a run: (when, its event's ``key`` count, the nodes it
    ran on, at most that many); [] when a start has no such count."""
    segments = []
    for i, event in enumerate(starts):
        count = event.number(key)
        if count is None:
            return []
        used = len([n for n in event.text("nodelist").split(",") if n])
        segments.append((run.start if i == 0 else event.time, count, min(used, count)))
    return segments


def _spare(run: RunReport, starts: Sequence[Event]) -> float:
    """The share of a run its spare nodes sat idle, from its starts' nodes (``held``: the
    nodes the job held, ``nodelist``: those the program ran on); 0 without spare nodes."""
    return spare_share(_sizes(run, starts, "held"), run.end)


def _shrunk(run: RunReport, starts: Sequence[Event]) -> float:
    """The share of a run it ran below full size, from its starts' nodes (``full``: the nodes
    of a full-size run of a job with an elastic size); 0 for a job of a fixed size."""
    return shrunk_share(_sizes(run, starts, "full"), run.end)


def _begin(run: RunReport, chain: Chain | None) -> float:
    """When a run's script began (its ``start`` event), else accounting's start."""
    if chain is not None:
        for event in chain.events:
            if event.event == "start" and (event.job_id, event.restart) == (run.job_id, run.index):
                return min(max(event.time, run.start), run.end)
    return run.start


# ---- gathering the inputs -------------------------------------------------------------------


def collect(
    client: SlurmClient,
    runner: Runner,
    refs: Mapping[str, ChainRef | None],
    *,
    requested_gpus: Callable[[str], int | None] | None = None,
    usage: Sequence[RunUsage] | None = None,
    read_gpu: bool = True,
    rates: Mapping[str, Rate] | None = None,
) -> list[ChainReport]:
    """Reports for chains (root -> its event log, or None for a job without one).

    One ``sacct`` for every job of every chain (skipped when ``usage`` is given); the progress
    reports and telemetry are read from each chain's output folder.
    """
    if usage is None:
        ids: list[str] = []
        for root, ref in refs.items():
            ids += ref.chain.job_ids if ref is not None else [root]
        usage = client.usage(list(dict.fromkeys(ids)))
    reports = []
    for root, ref in refs.items():
        progress = read_progress(runner, ref.output_dir, root) if ref is not None else {}
        gpu = read_gpu_samples(runner, ref.output_dir, root) if ref and read_gpu else None
        wanted = requested_gpus(root) if requested_gpus else None
        chain = ref.chain if ref is not None else None
        reports.append(
            chain_report(root, usage, chain, progress, requested_gpus=wanted, gpu=gpu, rates=rates)
        )
    return reports


def requested_from_record(root: str, host: str | None = None) -> int | None:
    """GPUs a job asked for (nodes x GPUs per node), from its local submission record."""
    path = find_record(root, host=host)
    if path is None:
        return None
    try:
        spec = read_record(path).get("spec") or {}
    except HpcJobsError:
        return None
    nodes, per_node = spec.get("nodes"), spec.get("gpus_per_node")
    if isinstance(nodes, int) and isinstance(per_node, int):
        return nodes * per_node
    return None
