"""Goodput and badput of a chain of runs: where every allocated second went.

Pure functions over plain values (run windows from accounting, progress reports, the warning
signal's time from the event log); the definitions are in docs/report.md. In short, each run's
allocated wall time ``[start, end]`` is cut into disjoint parts that add up to it:

- ``startup``: from the start of the run to its first progress report;
- between two consecutive progress reports, the time it took to produce the later step:
  ``checkpoint`` for the checkpoint saves the program reported in that gap, ``stall`` for the
  excess of a gap over :data:`STALL_FACTOR` x the run's median step time (beyond one median
  step), ``redone`` when the later step had already been reached by an earlier run, otherwise
  ``goodput``;
- after the last progress report: ``checkpoint`` (saves reported then), ``warning`` (from the
  warning signal, or the last report if later, to the end of the run) and ``tail`` (the rest);
- a job with spare nodes can run the program again inside the same allocation: the gap around
  such a restart is ``tail`` up to the restart (the fault being found) and ``startup`` after it,
  and a step is ``redone`` whenever any earlier report (of this run or an earlier one) had
  reached it;
- ``spare``: the share of the allocation its spare nodes held while idle, taken evenly out of
  the other parts (:func:`spare_share`);
- ``shrunk``: for a job with an elastic size, the share of the run's capacity it lacked while it
  ran on fewer nodes than its full size, taken out of the other parts the same way
  (:func:`shrunk_share`).

A run without any progress report is all ``startup`` when the chain reported progress in some
run; a chain without any report gets no breakdown at all (``None``).
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from hpcjobs.runtime.progress import Report

#: A gap between two progress reports longer than this many median step times is a stall.
STALL_FACTOR = 5.0
#: ... and only when it exceeds the median by at least this many seconds.
STALL_MIN_S = 2.0

PARTS = (
    "goodput", "startup", "redone", "checkpoint", "stall", "warning", "tail", "spare", "shrunk",
)  # fmt: skip
BADPUT_PARTS = PARTS[1:]
#: How each badput part is called in tables and on the page.
LABELS = {
    "goodput": "goodput",
    "startup": "start-up until the first step",
    "redone": "steps redone after an interruption",
    "checkpoint": "checkpointing",
    "stall": "stalls",
    "warning": "warning signal to the end of the run",
    "tail": "after the last progress",
    "spare": "spare nodes held idle",
    "shrunk": "running below full size",
}


@dataclass(frozen=True)
class RunWindow:
    """One run's allocation: wall time ``[start, end]`` (epoch s) on ``gpus`` GPUs."""

    job_id: str
    index: int
    start: float
    end: float
    gpus: int
    signal_at: float | None = None

    @property
    def elapsed(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class RunParts:
    """The parts of one run, in wall seconds, plus the steps it computed and redid."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    first_progress: float | None = None
    last_progress: float | None = None
    steps: int = 0
    redone_steps: int = 0
    first_step: int | None = None
    last_step: int | None = None
    #: When the first and the last step that had already been reached were reported again
    #: (at a run's start after a requeue; after a restart inside the run, in its middle).
    redone_from: float | None = None
    redone_until: float | None = None

    def add(self, part: str, value: float) -> None:
        self.seconds[part] += max(0.0, value)


def median_step_time(reports: Sequence[Report]) -> float | None:
    """The median seconds per step between consecutive step reports (None under 2 reports)."""
    per_step = step_times(reports)
    return statistics.median(per_step) if per_step else None


def step_times(reports: Sequence[Report]) -> list[float]:
    """Seconds per step between consecutive step reports that advanced (saves excluded)."""
    steps = [r for r in reports if r.step is not None]
    saves = [r for r in reports if r.save_s is not None]
    out = []
    for before, after in pairwise(steps):
        assert before.step is not None and after.step is not None
        advanced = after.step - before.step
        if advanced > 0:
            saved = _saves_between(saves, before.time, after.time) if saves else 0.0
            out.append(max(0.0, after.time - before.time - saved) / advanced)
    return out


def spare_share(segments: Sequence[tuple[float, int, int]], end: float) -> float:
    """The share of a run's allocated time its spare nodes sat idle. ``segments``: for each
    time the program started in the run's allocation, in time order, (when, nodes the job
    held, nodes the program ran on); each lasts until the next, the last until ``end``. Nodes
    count alike (a partition's nodes carry the same GPUs)."""
    held = idle = 0.0
    for i, (begin, nodes, used) in enumerate(segments):
        until = segments[i + 1][0] if i + 1 < len(segments) else end
        span = max(0.0, until - begin)
        held += span * nodes
        idle += span * max(0, nodes - used)
    return idle / held if held > 0 else 0.0


def shrunk_share(segments: Sequence[tuple[float, int, int]], end: float) -> float:
    """The share of a run's time it lacked capacity, running on fewer nodes than its full
    size. ``segments``: for each time the program started in the run's allocation, in time
    order, (when, the nodes of a full-size run, nodes the program ran on); each lasts until the
    next, the last until ``end``. A run on 2 of 3 nodes for all its time: 1/3."""
    total = lacked = 0.0
    for i, (begin, full, used) in enumerate(segments):
        until = segments[i + 1][0] if i + 1 < len(segments) else end
        span = max(0.0, until - begin)
        total += span
        if full > 0:
            lacked += span * max(0, full - used) / full
    return lacked / total if total > 0 else 0.0


def split_run(
    run: RunWindow,
    reports: Sequence[Report],
    reached_before: int | None,
    *,
    chain_has_progress: bool,
    restarts: Sequence[float] = (),
    spare: float = 0.0,
    shrunk: float = 0.0,
) -> RunParts | None:
    """The parts of one run. ``reports`` are the reference rank's reports made during this
    run (time order; see :func:`assign_reports`); ``reached_before`` is the highest step an
    earlier run reported; ``restarts``: when the program started again inside this run's
    allocation; ``spare``: the share of the run its spare nodes sat idle
    (:func:`spare_share`); ``shrunk``: the share it ran below full size (:func:`shrunk_share`).
    None when the chain has no progress at all."""
    if not chain_has_progress:
        return None
    parts = _split_run(run, reports, reached_before, sorted(restarts))
    lost = {"spare": spare, "shrunk": shrunk}
    kept = 1.0 - min(1.0, spare + shrunk)
    if kept < 1.0:
        for part in PARTS:
            parts.seconds[part] *= kept
        for part, share in lost.items():
            parts.seconds[part] = share * run.elapsed
    return parts


def _split_run(
    run: RunWindow, reports: Sequence[Report], reached_before: int | None, restarts: list[float]
) -> RunParts:
    mine = list(reports)
    steps = [r for r in mine if r.step is not None]
    saves = [r for r in mine if r.save_s is not None]
    parts = RunParts()
    if not steps:
        parts.add("startup", run.elapsed)
        return parts
    first = min(max(steps[0].time, run.start), run.end)
    last = min(max(steps[-1].time, first), run.end)
    parts.first_progress, parts.last_progress = first, last
    parts.first_step, parts.last_step = steps[0].step, steps[-1].step
    parts.add("startup", first - run.start)
    median = median_step_time(mine) or 0.0
    redone = _redone_flags(steps, reached_before, parts)
    parts.steps = len({r.step for r in steps})
    # One pass over the step pairs, summing locally (a long run has hundreds of thousands of
    # reports); saves and restarts are found by bisection over their times.
    save_times = sorted(r.time for r in saves)
    checkpoint = stalled = goodput = redone_s = lost = begun = 0.0
    stall_above = STALL_FACTOR * median
    for i, (before, after) in enumerate(pairwise(steps)):
        t0, t1 = min(max(before.time, first), last), min(max(after.time, first), last)
        gap = t1 - t0
        saved = 0.0
        cut = bisect_right(restarts, t0)
        if cut < len(restarts) and restarts[cut] <= t1:
            # The program started again in between: the fault being found, then a start-up.
            again_at = restarts[cut]
            saved = min(again_at - t0, _saves_between(saves, t0, again_at)) if saves else 0.0
            checkpoint += max(0.0, saved)
            lost += max(0.0, again_at - t0 - saved)
            begun += t1 - again_at
            continue
        if save_times and bisect_right(save_times, t1) > bisect_right(save_times, t0):
            saved = min(gap, _saves_between(saves, t0, t1))
            checkpoint += max(0.0, saved)
        rest = gap - saved
        stall = 0.0
        if median > 0 and rest > stall_above and rest - median >= STALL_MIN_S:
            stall = rest - median
            stalled += max(0.0, stall)
        work = max(0.0, rest - stall)
        if redone[i + 1]:
            if parts.redone_from is None:
                parts.redone_from = t0
            parts.redone_until = t1
            redone_s += work
        else:
            goodput += work
    parts.add("checkpoint", checkpoint)
    parts.add("stall", stalled)
    parts.add("redone", redone_s)
    parts.add("goodput", goodput)
    parts.add("tail", lost)
    parts.add("startup", begun)
    _split_after_last(parts, run, saves, last)
    return parts


def _redone_flags(
    steps: Sequence[Report], reached_before: int | None, parts: RunParts
) -> list[bool]:
    """For each step report, whether its step was redone; counts them in ``parts``."""
    # A step is redone when a report before it (of an earlier run, or of this one before it
    # started again inside its allocation) had reached it; each time counts.
    top = reached_before
    previous: int | None = None
    redone: list[bool] = []
    for report in steps:
        assert report.step is not None
        if report.step == previous:  # the same step noted again: as it was
            redone.append(redone[-1])
            continue
        again = top is not None and report.step <= top
        redone.append(again)
        if again:
            parts.redone_steps += 1
        top = report.step if top is None else max(top, report.step)
        previous = report.step
    return redone


def _split_after_last(
    parts: RunParts, run: RunWindow, saves: Sequence[Report], last: float
) -> None:
    """Add the time after the last progress report: checkpoint saves, warning, then tail."""
    tail = run.end - last
    saved = min(tail, _saves_between(saves, last, run.end + 1.0))
    parts.add("checkpoint", saved)
    rest = tail - saved
    warned = 0.0
    if run.signal_at is not None and run.signal_at < run.end:
        warned = min(rest, run.end - max(run.signal_at, last))
    parts.add("warning", warned)
    parts.add("tail", rest - warned)


def assign_reports(
    reports: Sequence[Report], bounds: Sequence[tuple[float, float]]
) -> list[list[Report]]:
    """Reports split by run: run ``i`` gets those in ``[bounds[i][0], bounds[i+1][0])``, and
    the last run those up to its end (``bounds[i][1]``, plus the second accounting rounds off).

    ``bounds`` are the runs' (begin, end) in time order; a run's begin is best taken from its
    ``start`` event (sub-second), else accounting's start.
    """
    out: list[list[Report]] = [[] for _ in bounds]
    for report in reports:
        for i, (begin, end) in enumerate(bounds):
            upper = bounds[i + 1][0] if i + 1 < len(bounds) else end + 1.0
            if begin <= report.time < min(upper, end + 1.0):
                out[i].append(report)
                break
    return out


def _saves_between(reports: Sequence[Report], t0: float, t1: float) -> float:
    """Seconds of checkpoint saves that ended in ``(t0, t1]``, each clipped to the interval."""
    total = 0.0
    for report in reports:
        if report.save_s is not None and t0 < report.time <= t1:
            total += min(report.save_s, report.time - t0)
    return total


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The ``fraction`` quantile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * (len(ordered) - 1))))
    return ordered[rank]


__all__ = [
    "BADPUT_PARTS",
    "LABELS",
    "PARTS",
    "RunParts",
    "RunWindow",
    "assign_reports",
    "median_step_time",
    "percentile",
    "shrunk_share",
    "spare_share",
    "split_run",
    "step_times",
]
