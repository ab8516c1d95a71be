"""A job's chain of runs, read from the event log its batch script keeps (``chain.tsv``).

Every hpcjobs batch script appends one tab-separated line per event to
``<run dir>/chain.tsv`` (``chain-<task>.tsv`` for array tasks)::

    time  job_id  slurm_restart_count  event  cause  detail

``event`` is ``start`` (a run began; detail ``checkpoint=<step>``), ``requeue`` (the run ended
for ``cause`` and comes back; detail says how, plus ``checkpoint=`` and ``progress=``), or ``end``
(the chain is over: cause ``finish`` or ``fail``, detail says why). A continuation is a new job
id in the same chain; a Slurm requeue keeps the job id and raises the restart count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hpcjobs.errors import HpcJobsError
from hpcjobs.runner import Runner

_KV = re.compile(r"(\w+)=(-?\d+)")
_CONTINUED = re.compile(r"continued as job (\d+(?:_\d+)?)")
_SLURM_RESTART = re.compile(r"requeued by Slurm \(restart (\d+)\)")


@dataclass(frozen=True)
class Event:
    time: float
    job_id: str
    restart: int
    event: str
    cause: str
    detail: str

    @property
    def stopped_run(self) -> int:
        """For a ``requeue`` event: the index of the job's run that stopped.

        A requeue Slurm did itself says which restart it led to; the job's run before that one
        stopped. Any other requeue was logged by the stopping run.
        """
        match = _SLURM_RESTART.search(self.detail)
        return int(match.group(1)) - 1 if match else self.restart

    def number(self, key: str) -> int | None:
        """An integer ``key=<n>`` from the detail, if present."""
        for name, value in _KV.findall(self.detail):
            if name == key:
                return int(value)
        return None


@dataclass
class Interruption:
    """One time the job stopped and came back (or did not)."""

    cause: str
    job_id: str
    ended_at: float
    how: str
    checkpoint_at_stop: int | None = None
    progress_at_stop: int | None = None
    resumed_job_id: str | None = None
    resumed_at: float | None = None
    resumed_from: int | None = None

    @property
    def resume_latency(self) -> float | None:
        """Seconds from the end of the interrupted run to the start of the next one."""
        if self.resumed_at is None:
            return None
        return max(0.0, self.resumed_at - self.ended_at)

    @property
    def steps_lost(self) -> int | None:
        """Steps redone: progress reached before the stop minus the step resumed after."""
        if self.progress_at_stop is None or self.resumed_from is None:
            return None
        return max(0, self.progress_at_stop - self.resumed_from)


@dataclass
class Chain:
    events: list[Event] = field(default_factory=list)

    @property
    def root(self) -> str | None:
        return self.events[0].job_id if self.events else None

    @property
    def job_ids(self) -> list[str]:
        """Every job id of the chain, in order (continuations included, pending or not)."""
        ids: list[str] = []
        for event in self.events:
            candidates = [event.job_id]
            match = _CONTINUED.search(event.detail)
            if match:
                candidates.append(match.group(1))
            for job_id in candidates:
                if job_id not in ids:
                    ids.append(job_id)
        return ids

    @property
    def final(self) -> Event | None:
        ends = [e for e in self.events if e.event == "end"]
        return ends[-1] if ends else None

    def interruptions(self) -> list[Interruption]:
        result: list[Interruption] = []
        pending: Interruption | None = None
        for event in self.events:
            if event.event == "requeue":
                pending = Interruption(
                    cause=event.cause,
                    job_id=event.job_id,
                    ended_at=event.time,
                    how=event.detail,
                    checkpoint_at_stop=event.number("checkpoint"),
                    progress_at_stop=event.number("progress"),
                )
                result.append(pending)
            elif event.event == "start" and pending is not None:
                pending.resumed_job_id = event.job_id
                pending.resumed_at = event.time
                pending.resumed_from = event.number("checkpoint")
                pending = None
        return result


def parse_chain(text: str) -> Chain:
    """Parse a chain log; malformed lines (e.g. a line cut by a crash) are skipped."""
    events = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 6:
            continue
        try:
            events.append(
                Event(float(parts[0]), parts[1], int(parts[2]), parts[3], parts[4], parts[5])
            )
        except ValueError:
            continue
    return Chain(events)


def read_chain(path: Path) -> Chain:
    try:
        return parse_chain(path.read_text())
    except OSError:
        return Chain()


# ---- finding a job's chain ---------------------------------------------------------------------


@dataclass
class ChainRef:
    """A submitted job's chain: its first job id, where its files are, and its events."""

    root: str
    output_dir: str
    chain: Chain

    @property
    def current(self) -> str:
        """The chain's newest job id (the one running, pending, or last to run)."""
        ids = self.chain.job_ids
        return ids[-1] if ids else self.root


def chain_path(output_dir: str, root: str) -> str:
    return f"{output_dir.rstrip('/')}/chain-{root}.tsv"


def load_chain(
    job_id: str,
    runner: Runner,
    *,
    output_dir: str | None = None,
    index_dir: Path | None = None,
    host: str | None = None,
) -> ChainRef | None:
    """The chain that ``job_id`` started, read through ``runner`` (so also over SSH).

    The output dir comes from the local job index that ``hpcjobs submit`` keeps; None when
    the job was not submitted by hpcjobs from here, or its chain has no events yet.
    """
    from hpcjobs.records import index_entry

    if output_dir is None:
        entry = index_entry(job_id, index_dir=index_dir, host=host)
        output_dir = entry.get("output_dir") if entry else None
        if not output_dir:
            return None
    try:
        result = runner.run(["cat", chain_path(output_dir, job_id)], check=False, timeout=60)
    except HpcJobsError:
        return None
    if not result.ok:
        return None
    chain = parse_chain(result.stdout)
    if not chain.events:
        return None
    return ChainRef(root=job_id, output_dir=output_dir, chain=chain)
