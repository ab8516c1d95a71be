"""A job's chain of runs, read from its event log, as ``history``, ``report``, ``status``,
``--wait`` and the executor see it.

The log's format, its parser and the queries on it are :mod:`hpcjobs.contract.eventlog`
(the supervisor that writes it reads it with the same code); the file names are
:mod:`hpcjobs.contract.names`. This module adds what only the submit side needs: the
chain's interruptions (how each run ended and how the next one resumed), finding a job's log
(locally or through a runner), and logging the end of a chain cancelled while pending.

A job cancelled while pending never runs its script: ``hpcjobs cancel`` logs its chain's end
for it (:func:`append_event`), and :func:`ended_by_accounting` reads the end of a chain whose
newest job Slurm shows CANCELLED without an ``end`` event (a plain ``scancel``).

``status`` loads this module; the job index (:mod:`hpcjobs.jobs.records`) is imported only
where a chain's folder is looked up in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcjobs.contract import eventlog, names
from hpcjobs.contract.causes import GROW
from hpcjobs.contract.eventlog import Event, encode, is_growth, parse
from hpcjobs.errors import HpcJobsError
from hpcjobs.runner import Runner

__all__ = [
    "NO_CHECKPOINT",
    "Chain",
    "ChainRef",
    "Event",
    "Interruption",
    "checkpoint_step",
    "format_event",
    "parse_chain",
    "progress_step",
]

# ---- known and unknown steps -------------------------------------------------------------------
#
# The one rule for what the event log's step fields say. ``progress`` (the step a run reached) is
# known when it is an integer >= 0; the supervisor logs -1 when the program reported no progress,
# and a missing or null field says nothing either: unknown. ``checkpoint`` (the newest complete
# checkpoint, or the one a run resumed from) is known when it is an integer >= 0, or -1: no
# checkpoint, the run started from scratch; a missing or null field (a framework checkpoint whose
# step could not be read) or any other value is unknown. The steps lost at a stop are known only
# when both of its steps are.

#: ``checkpoint`` -1: there was no checkpoint (a run that resumes from it starts from scratch).
NO_CHECKPOINT = -1


def progress_step(value: int | None) -> int | None:
    """The step a run reached, from the event log's ``progress``; None when it is unknown
    (missing, null, or negative: -1 is logged when the program reported no progress)."""
    return value if value is not None and value >= 0 else None


def checkpoint_step(value: int | None) -> int | None:
    """A checkpoint step from the event log's ``checkpoint``: the step, or :data:`NO_CHECKPOINT`
    (-1, none: from scratch); None when it is unknown (missing, null, or below -1)."""
    return value if value is not None and value >= NO_CHECKPOINT else None


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
    #: How the chain went on, for programs: the ``requeue`` event's ``how`` (continued,
    #: took_over, slurm, slurm_fallback, in_job), or ``grow`` for a run's move to its grower;
    #: None when the log does not say. ``how`` is the event's prose.
    how_code: str | None = None

    @property
    def resume_latency(self) -> float | None:
        """Seconds from the end of the interrupted run to the start of the next one."""
        if self.resumed_at is None:
            return None
        return max(0.0, self.resumed_at - self.ended_at)

    @property
    def steps_lost(self) -> int | None:
        """Steps redone: progress reached before the stop minus the step resumed after (all of
        them, ``progress + 1``, after a start from scratch); None while the chain has not resumed,
        or when either step is unknown (:func:`progress_step`, :func:`checkpoint_step`)."""
        progress = progress_step(self.progress_at_stop)
        resumed = checkpoint_step(self.resumed_from)
        if progress is None or resumed is None:
            return None
        return max(0, progress - resumed)

    @property
    def loss_unknown(self) -> bool:
        """Whether the chain resumed after this stop but its steps lost are unknown."""
        return self.resumed_at is not None and self.steps_lost is None

    def to_dict(self) -> dict[str, Any]:
        """The interruption as ``history --json`` and ``report --json`` print it."""
        latency = self.resume_latency
        return {
            "cause": self.cause,
            "how": self.how,
            "how_code": self.how_code,
            "job_id": self.job_id,
            "ended_at": self.ended_at,
            "resumed_job_id": self.resumed_job_id,
            "resumed_at": self.resumed_at,
            "resume_latency_s": None if latency is None else round(latency, 1),
            "checkpoint_at_stop": checkpoint_step(self.checkpoint_at_stop),
            "progress_at_stop": progress_step(self.progress_at_stop),
            "resumed_from_step": checkpoint_step(self.resumed_from),
            "steps_lost": self.steps_lost,
            "suspect": self.suspect,
            "evidence": self.evidence,
            "excluded_nodes": list(self.excluded),
        }


class Chain(eventlog.Chain):
    """A chain's events, and its interruptions (a growth among them)."""

    def interruptions(self) -> list[Interruption]:
        result: list[Interruption] = []
        pending: Interruption | None = None
        fault: Event | None = None
        excluded: list[str] = []
        for event in self.events:
            if event.event == "fault":
                fault = event
            elif event.event == "exclude":
                excluded = event.names("nodes")
            elif event.event == "requeue" or is_growth(event):
                pending = Interruption(
                    cause=event.cause,
                    job_id=event.stopped_job,
                    ended_at=event.time,
                    how=event.detail,
                    checkpoint_at_stop=checkpoint_step(event.number("checkpoint")),
                    progress_at_stop=progress_step(event.number("progress")),
                    excluded=list(excluded),
                    how_code=GROW if is_growth(event) else event.text("how") or None,
                )
                if fault is not None and fault.cause == event.cause:
                    pending.suspect = fault.text("node") or None
                    pending.evidence = fault.text("evidence") or None
                fault = None
                result.append(pending)
            elif event.event == "start" and pending is not None:
                pending.resumed_job_id = event.job_id
                pending.resumed_at = event.time
                pending.resumed_from = checkpoint_step(event.number("checkpoint"))
                pending = None
        return result


def format_event(event: Event) -> str:
    """One event as a line of the event log."""
    return encode(event)


def parse_chain(text: str) -> Chain:
    """Parse a chain log; malformed lines (e.g. a line cut by a crash) are skipped."""
    return Chain(parse(text))


def chain_file(folder: Path, root: str) -> Path:
    """The event log of chain ``root`` in the local ``folder``."""
    return folder / names.chain_log(root)


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
    #: The log it was read from.
    path: str = ""

    @property
    def current(self) -> str:
        """The chain's newest job id (the one running, pending, or last to run)."""
        ids = self.chain.job_ids
        return ids[-1] if ids else self.root

    def waiting_grower(self) -> tuple[str, str, bool] | None:
        """The grower the current job's newest run submitted and that has not taken over: its
        id, the nodes it asks for (``3``, ``3-4``; "" when the log does not say) and whether
        they join the running job (job expansion); None when there is none (docs/requeue.md,
        "Growing back")."""
        grower = self.chain.grower_for(self.current)
        if not grower or self.chain.continued_as(grower):
            return None
        events = self.chain.events
        at = max(
            i for i, e in enumerate(events) if e.event == "grower" and e.text("grower") == grower
        )
        if any(e.event == "start" and e.job_id == self.current for e in events[at:]):
            return None  # an earlier run's: the job runs again since (its nodes joined it)
        return grower, events[at].text("size"), events[at].data.get("joins") is True


def chain_path(output_dir: str, root: str) -> str:
    """Where chain ``root``'s event log is, in ``output_dir`` (on whichever host)."""
    return f"{output_dir.rstrip('/')}/{names.chain_log(root)}"


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

    ``tee -a`` appends its input in one write, as the supervisor does.

    Raises:
        HpcJobsError: the log cannot be written (the error of the runner or of ``tee``).
    """
    path = ref.path or chain_path(ref.output_dir, ref.root)
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
    path = chain_path(output_dir, job_id)
    try:
        result = runner.run(["cat", path], check=False, timeout=60)
    except HpcJobsError:
        return None
    if not result.ok:
        return None
    chain = parse_chain(result.stdout)
    if not chain.events:
        return None
    return ChainRef(root=job_id, output_dir=output_dir, chain=chain, path=path)
