"""Where the seconds of a recovery go, at scale: each fault's phases from the chain's event log
and the ranks' progress histories, and hpcjobs' own CPU time in each (benchmarks only).

The phases of one fault, each from the end of the one before:

- ``detect``: the fault began (the node set DOWN; the hung or crashed rank's last step) to the
  supervisor's ``fault`` event. For a stall this holds the stall timeout.
- ``decide``: to the decision, the ``requeue`` event (``in_job``: on the job's other nodes).
- ``relaunch``: to the next run's ``start`` event: the old step's end, the nodes released, the
  node agents started, the launch.
- ``first_step``: to the first step any rank of the new run reported.
- ``all_ranks``: to the time the last rank of the new run to report reported its first step
  (a run that ends early, as the crash's run does, counts the ranks that reported before).

:class:`CpuSampler` reads, every quarter second, the CPU time of the supervisor and the node
agents (by their command line: the chain's zipapp) from ``/proc``: hpcjobs' own share of the
host, per phase, beside the wall time. Nothing of this is asserted: benchmarks/scale_bench.py
prints it (docs/scale.md, "Where a recovery's seconds go").
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hpcjobs.contract.eventlog import RECOVERY_PARTS
from hpcjobs.jobs.chain import Chain, Event
from hpcjobs.runtime.progress import Report

#: The phases, in order (see the module's text).
PHASES = ("detect", "decide", "relaunch", "first_step", "all_ranks")
#: What :func:`parts` splits ``detect`` and ``decide`` into, in order.
PARTS = ("teardown", "classify", *RECOVERY_PARTS)


def boundaries(
    chain: Chain, fault_index: int, began: float, histories: Mapping[int, Sequence[Report]]
) -> list[float]:
    """The ends of the phases of the chain's ``fault_index``-th fault, which began at
    ``began``: [began, fault, decision, start, first step, every rank]."""
    fault, decision = _fault_and_decision(chain, fault_index)
    after = [e for e in chain.events if e.time >= fault.time]
    start = _first([e for e in after if e.time >= decision.time], "start")
    later = [e.time for e in after if e.event == "start" and e.time > start.time]
    until = min(later, default=float("inf"))  # the next run's reports are not this one's
    firsts = []
    for reports in histories.values():
        times = [r.time for r in reports if r.step is not None and start.time <= r.time < until]
        if times:
            firsts.append(min(times))
    first = min(firsts) if firsts else float("nan")
    last = max(firsts) if firsts else float("nan")
    return [began, fault.time, decision.time, start.time, first, last]


def parts(chain: Chain, fault_index: int, began: float) -> dict[str, float]:
    """The ``detect`` and ``decide`` phases of the chain's ``fault_index``-th fault, split:
    ``teardown`` (the fault began to the run's launcher exiting: after a crash or a lost node,
    Slurm's part; after a stall, the stall watch's timeout, warning and grace), ``classify``
    (to the ``fault`` event: hpcjobs'), and each part of the decision to run again inside the
    job (the ``requeue`` event's ``took``: :data:`RECOVERY_PARTS`). Those it cannot tell are
    left out."""
    fault, decision = _fault_and_decision(chain, fault_index)
    found: dict[str, float] = {}
    exited = fault.data.get("exited")
    if isinstance(exited, (int, float)) and exited > 0:
        found["teardown"] = exited - began
        found["classify"] = fault.time - exited
    took = decision.data.get("took")
    if isinstance(took, dict):
        for part in RECOVERY_PARTS:
            value = took.get(part)
            if isinstance(value, (int, float)):
                found[part] = float(value)
    return found


def durations(ends: Sequence[float]) -> dict[str, float]:
    """Each phase's seconds, from :func:`boundaries`."""
    return {name: ends[i + 1] - ends[i] for i, name in enumerate(PHASES)}


def _fault_and_decision(chain: Chain, fault_index: int) -> tuple[Event, Event]:
    """The chain's ``fault_index``-th ``fault`` event, and the first ``requeue`` after it."""
    fault = [e for e in chain.events if e.event == "fault"][fault_index]
    return fault, _first([e for e in chain.events if e.time >= fault.time], "requeue")


def _first(events: Sequence[Event], kind: str) -> Event:
    for event in events:
        if event.event == kind:
            return event
    raise AssertionError(f"no {kind} event after the fault")


class CpuSampler(threading.Thread):
    """hpcjobs' CPU seconds on this host over time: the processes whose command line holds
    ``needle`` (the chain's zipapp: the supervisor and every node agent), sampled every
    ``every`` s; a process's last sample counts after it ends."""

    def __init__(self, needle: str, every: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.needle = needle.encode()
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._seen: dict[int, float] = {}
        self._pids: set[int] = set()
        self._halt = threading.Event()
        self._tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        rescan = 0.0
        while not self._halt.is_set():
            now = time.time()
            if now >= rescan:
                self._pids |= self._scan()
                rescan = now + 2.0
            for pid in list(self._pids):
                cpu = self._cpu(pid)
                if cpu is None:
                    self._pids.discard(pid)
                else:
                    self._seen[pid] = cpu
            self.samples.append((now, sum(self._seen.values())))
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def _scan(self) -> set[int]:
        found = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmd = (entry / "cmdline").read_bytes()
                if self.needle in cmd and not cmd.startswith(b"srun\0"):
                    found.add(int(entry.name))
        return found

    def _cpu(self, pid: int) -> float | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = text.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._tick

    def at(self, when: float) -> float:
        """CPU seconds used by ``when`` (the newest sample before it)."""
        index = bisect.bisect_right(self.samples, (when, float("inf"))) - 1
        return self.samples[index][1] if index >= 0 else 0.0

    def per_phase(self, ends: Sequence[float]) -> dict[str, float]:
        """hpcjobs' CPU seconds in each phase of :func:`boundaries`."""
        return {
            name: self.at(ends[i + 1]) - self.at(ends[i])
            for i, name in enumerate(PHASES)
            if ends[i + 1] == ends[i + 1]  # not NaN
        }
