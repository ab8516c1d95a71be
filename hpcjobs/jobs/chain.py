"""A job's chain of runs, read from the event log its batch script keeps (``chain.tsv``).

Every hpcjobs batch script appends one tab-separated line per event to
``<run dir>/chain.tsv`` (``chain-<task>.tsv`` for array tasks)::

    time  job_id  slurm_restart_count  event  cause  detail

``event`` is one of

- ``start``: a run began (detail ``checkpoint=<step> nodes=<hostlist> batch=<node>``);
- ``requeue``: the run ended for ``cause`` and comes back; detail says how, plus
  ``checkpoint=`` and ``progress=``. A standby that took over from a run that died without a word
  logs it itself: ``standby job <S> took over from job <P> (<Slurm state>)``;
- ``end``: the chain is over (cause ``finish`` or ``fail``, detail says why);
- ``signal``: the first warning signal or SIGTERM of a run (cause ``warning`` or ``term``);
- ``standby``: the run submitted its standby (detail ``standby job <S> for job <P>``);
- ``fault``: what ended the run, for causes without a warning (detail
  ``node=<suspect or -> evidence=<the matched line, or the stalled rank>``);
- ``exclude``: the nodes every later run leaves out (detail ``nodes=<a,b>``, the whole list);
- ``health``: the site's health check on a suspect (cause ``pass`` or ``fail``);
- ``handoff``: a run got an excluded node and handed over at once (``continued as job <R>: ...``).

Only ``start``, ``requeue`` and ``end`` say how runs follow each other; nothing counts the
others. A continuation is a new job id in the same chain; a Slurm requeue keeps the job id and
raises the restart count.

A job cancelled while pending never runs its script: ``hpcjobs cancel`` logs its chain's end
for it (:func:`append_event`), and :func:`ended_by_accounting` reads the end of a chain whose
newest job Slurm shows CANCELLED without an ``end`` event (a plain ``scancel``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hpcjobs.errors import HpcJobsError
from hpcjobs.runner import Runner
from hpcjobs.textlines import split_lines

_KV = re.compile(r"(\w+)=(-?\d+)")
_CONTINUED = re.compile(r"continued as job (\d+(?:_\d+)?)")
_TOOK_OVER = re.compile(r"took over from job (\d+(?:_\d+)?)")
_STANDBY = re.compile(r"^standby job (\d+(?:_\d+)?) for job (\d+(?:_\d+)?)$")
_FAULT = re.compile(r"^node=(\S*)(?: (?!evidence=)\S+)*(?: evidence=(.*))?$")
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

    @property
    def stopped_job(self) -> str:
        """For a ``requeue`` event: the job whose run stopped (a standby logs its predecessor's)."""
        match = _TOOK_OVER.search(self.detail)
        return match.group(1) if match else self.job_id

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
    #: The node blamed for the stop (None: nobody), and what showed it.
    suspect: str | None = None
    evidence: str | None = None
    #: The nodes every run after this stop leaves out.
    excluded: list[str] = field(default_factory=list)

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

    @property
    def starts(self) -> int:
        """How many runs of the chain began (its ``start`` events)."""
        return sum(1 for e in self.events if e.event == "start")

    def _standbys(self) -> list[tuple[str, str]]:
        """(standby job, the job whose run submitted it) for each ``standby`` event, in order."""
        pairs = []
        for event in self.events:
            match = _STANDBY.match(event.detail) if event.event == "standby" else None
            if match:
                pairs.append((match.group(1), match.group(2)))
        return pairs

    @property
    def standby_ids(self) -> list[str]:
        """Every standby job the chain's runs submitted (most are cancelled or became runs)."""
        return list(dict.fromkeys(standby for standby, _ in self._standbys()))

    def standby_for(self, job_id: str) -> str | None:
        """The standby that ``job_id``'s newest run submitted, if any."""
        found = [standby for standby, owner in self._standbys() if owner == job_id]
        return found[-1] if found else None

    def interruptions(self) -> list[Interruption]:
        result: list[Interruption] = []
        pending: Interruption | None = None
        fault: Event | None = None
        excluded: list[str] = []
        for event in self.events:
            if event.event == "fault":
                fault = event
            elif event.event == "exclude":
                nodes = event.detail.split(" ")[0].removeprefix("nodes=")
                excluded = [] if nodes in ("", "-") else nodes.split(",")
            elif event.event == "requeue":
                pending = Interruption(
                    cause=event.cause,
                    job_id=event.stopped_job,
                    ended_at=event.time,
                    how=event.detail,
                    checkpoint_at_stop=event.number("checkpoint"),
                    progress_at_stop=event.number("progress"),
                    excluded=list(excluded),
                )
                if fault is not None and fault.cause == event.cause:
                    pending.suspect, pending.evidence = _fault_detail(fault.detail)
                fault = None
                result.append(pending)
            elif event.event == "start" and pending is not None:
                pending.resumed_job_id = event.job_id
                pending.resumed_at = event.time
                pending.resumed_from = event.number("checkpoint")
                pending = None
        return result


def _fault_detail(detail: str) -> tuple[str | None, str | None]:
    """(suspect node or None, evidence) from a ``fault`` event's detail."""
    match = _FAULT.match(detail)
    if not match:
        return None, detail or None
    node = match.group(1)
    return (None if node in ("", "-") else node), match.group(2)


def format_event(event: Event) -> str:
    """One event as a line of the event log (tabs and line breaks in the detail become spaces)."""
    detail = re.sub(r"[\t\r\n]", " ", event.detail)
    return (
        f"{event.time:.6f}\t{event.job_id}\t{event.restart}\t{event.event}\t"
        f"{event.cause}\t{detail}\n"
    )


def parse_chain(text: str) -> Chain:
    """Parse a chain log; malformed lines (e.g. a line cut by a crash) are skipped."""
    events = []
    for line in split_lines(text):
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
    """The chain in a local event log (read as bytes: no newline translation); empty if none."""
    try:
        return parse_chain(path.read_bytes().decode("utf-8", errors="replace"))
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


def chain_output_dir(
    job_id: str, *, index_dir: Path | None = None, host: str | None = None
) -> str | None:
    """Where the chain that ``job_id`` started keeps its files, from the local job index."""
    from hpcjobs.jobs.records import index_entry

    entry = index_entry(job_id, index_dir=index_dir, host=host)
    output_dir = entry.get("output_dir") if entry else None
    return str(output_dir) if output_dir else None


#: The detail of the ``end`` event that ``hpcjobs cancel`` logs for a job it cancelled before it
#: ran (a pending job never runs its script, so nothing else would end the chain).
CANCELLED_PENDING = "cancelled while job {job_id} was pending"


def append_event(runner: Runner, ref: ChainRef, event: Event) -> None:
    """Append ``event`` to the chain's event log, through ``runner`` (so also over SSH).

    ``tee -a`` appends its input in one write, as the batch script's ``>>`` does.

    Raises:
        HpcJobsError: the log cannot be written (the error of the runner or of ``tee``).
    """
    path = chain_path(ref.output_dir, ref.root)
    runner.run(["tee", "-a", path], stdin=format_event(event), timeout=60)
    ref.chain.events.append(event)


def ended_by_accounting(chain: Chain, job_id: str, state: str) -> Event | None:
    """The end of a chain whose log has no ``end`` event, when Slurm says its newest job is over.

    A job cancelled while pending never runs its script, and one killed before its script could
    log leaves no word either; such a job is ``CANCELLED`` in Slurm. Other states say nothing
    final (a preempted or failed node's job may still be requeued), so they give None.

    Args:
        chain: the chain's events.
        job_id: its newest job.
        state: that job's state, from the queue or accounting.
    """
    if chain.final is not None or state.split(" ")[0].upper() != "CANCELLED":
        return None
    restart = max((e.restart for e in chain.events if e.job_id == job_id), default=0)
    detail = f"cancelled: job {job_id} is CANCELLED in Slurm, and the event log has no end"
    return Event(0.0, job_id, restart, "end", "fail", detail)


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
    if output_dir is None:
        output_dir = chain_output_dir(job_id, index_dir=index_dir, host=host)
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
