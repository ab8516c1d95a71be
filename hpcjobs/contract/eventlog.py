"""The chain's event log: its one format, its one parser, and what a chain's events say.

One file per chain, ``<output dir>/chain-<root>.jsonl`` (:mod:`.names`), mode 0600. Each event
is one line, one JSON object, appended with a single ``write(2)``::

    {"v": 1, "time": 1796207768.202605, "job": "2014", "restart": 0, "event": "start",
     "cause": "-", "detail": "checkpoint=-1 nodes=n[1-2] batch=n1",
     "checkpoint": -1, "nodelist": "n[1-2]", "batch": "n1"}

``v`` is the format (:data:`FORMAT`); ``detail`` is for people, programs read the fields that
:data:`FIELDS` lists for each event (docs/requeue.md, "The event log"). The supervisor writes
it (:class:`EventLog`); ``history``, ``report``, ``status``, ``--wait`` and the executor read it
through :func:`parse` (by way of :mod:`hpcjobs.jobs.chain`), and so does the supervisor.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .causes import GROW

#: The format this module writes. A reader takes lines of any version: fields it does not know
#: are kept, fields it needs and does not find read as missing.
FORMAT = 1

#: The fields of each event, besides those every event has (v, time, job, restart, event,
#: cause, detail). Ids are strings, steps and counts integers, node lists lists of names.
FIELDS: Mapping[str, tuple[str, ...]] = {
    # A run began: the checkpoint step it resumes from (-1: none), its nodes (a Slurm
    # hostlist; with spare nodes, its nodes' names joined by commas) and its batch host.
    # ``held``: with spare nodes, how many nodes the job held then (the others sat idle).
    "start": ("checkpoint", "nodelist", "batch", "held"),
    # A run ended for ``cause`` and the chain goes on. ``how``: one of HOWS. ``next``: the job
    # the chain continues in (none for Slurm's own requeue). ``stopped_job``/``stopped_run``:
    # the run that ended (job id, and that job's restart count when it ran). ``slurm_state``:
    # how Slurm recorded that run's end, when a standby logs it. ``checkpoint``/``progress``:
    # the newest complete checkpoint and the step reached (-1: none). ``took``: a run again
    # inside the job after a fault, the seconds of each part of the decision (see
    # RECOVERY_PARTS). ``joined``: a run again inside the job after it grew in place (cause
    # grow), the nodes that joined the job ([]: Slurm refused them).
    "requeue": (
        "how",
        "next",
        "stopped_job",
        "stopped_run",
        "slurm_state",
        "checkpoint",
        "progress",
        "took",
        "joined",
    ),
    # The chain is over; ``cause`` is finish or fail, ``detail`` says why. ``rule``: why a
    # run that exited 0 was finished (or not); ``repeated``: a restart storm stopped it, what
    # repeated (cause, runs, checkpoint, progress, nodes, evidence).
    "end": ("rule", "repeated"),
    # The first warning signal or SIGTERM of a run (cause warning or term).
    "signal": ("signal",),
    # A run of ``standby_for`` submitted its standby: job ``standby`` waits for it to end.
    "standby": ("standby", "standby_for"),
    # What ended a run (cause as for requeue): the suspect node (null: none), the job whose
    # run it ended, and the evidence (a matched log line, a stalled rank, Slurm's state).
    # ``seen_by``: the node whose agent saw the job's batch host leave a job with spare nodes
    # (Slurm keeps such a job running without it), and ended the job for its standby.
    # ``exited``: when the run's launcher exited, or the supervisor stopped waiting for it
    # after Slurm's SIGTERM (epoch seconds; null: unknown): after a crash or a lost node, the
    # end of Slurm's part of the detection (after a stall, of the timeout, warning and grace).
    "fault": ("node", "stopped_job", "evidence", "seen_by", "exited"),
    # The nodes every later run leaves out (the whole list), those let go to stay within
    # ``limit``.
    "exclude": ("nodes", "released", "limit"),
    # A node slower than its peers (cause straggler): its steps and the median of its peers'
    # over ``window`` seconds, and what was done: ``swap`` (for a spare, at the next
    # checkpoint) or ``keep_out`` (no spare: left out of the next run, this one goes on).
    "straggler": ("node", "steps", "peers", "window", "action"),
    # The site's health check on one node (cause pass or fail): a suspect's, or a node's that
    # failed the pre-flight check (exit null: it gave no answer). Its exit code, its last line.
    "health": ("node", "exit", "output"),
    # The site's health check on every node of a job with spare nodes, before its first run
    # (cause pass, fail or skip: every node failed, none is blamed): how many nodes it checked,
    # those that failed (they leave the job, a spare takes their place), how long it took.
    "preflight": ("checked", "failed", "seconds"),
    # A run got excluded ``nodes`` and handed over to ``next`` at once (cause "-"); or a run
    # below its full size handed over to its grower, which holds more nodes (cause grow, with
    # the run's ``checkpoint`` and ``progress`` as for requeue).
    "handoff": ("next", "nodes", "checkpoint", "progress"),
    # A run below its full size (an elastic size) submitted its grower: job ``grower`` waits
    # in the queue for ``size`` nodes (sbatch --nodes), and takes over once Slurm runs it; or,
    # with ``joins`` true, a helper allocation waits for ``size`` more nodes, which join the
    # running job once Slurm grants them (job expansion).
    "grower": ("grower", "grower_for", "size", "joins"),
}

#: How a ``requeue`` went on: the run continued as a new job (or its standby); its standby took
#: over after it died without a word; Slurm requeued the job itself; hpcjobs asked Slurm to
#: requeue it because no continuation could be submitted; or the next run started inside the
#: same job, on its remaining nodes (spare nodes: no queue, the same job and restart count).
CONTINUED, TOOK_OVER, SLURM, SLURM_FALLBACK = "continued", "took_over", "slurm", "slurm_fallback"
IN_JOB = "in_job"
HOWS = (CONTINUED, TOOK_OVER, SLURM, SLURM_FALLBACK, IN_JOB)

#: The parts of a decision to run again inside the job (a ``requeue`` event's ``took``), in
#: order: the node agents' step ending, Slurm's view of the job and its nodes, the old steps
#: ending before nodes leave the job, and the job's shrink to the nodes it keeps.
RECOVERY_PARTS = ("agents_end", "nodes", "steps_end", "release")

_COMMON = ("v", "time", "job", "restart", "event", "cause", "detail")


@dataclass(frozen=True)
class Event:
    """One line of the event log. ``data`` holds the event's own fields (:data:`FIELDS`)."""

    time: float
    job_id: str
    restart: int
    event: str
    cause: str
    detail: str
    data: Mapping[str, object] = field(default_factory=dict, hash=False)

    def text(self, key: str) -> str:
        """A string field ("" when missing or null)."""
        value = self.data.get(key)
        return value if isinstance(value, str) else ""

    def number(self, key: str) -> int | None:
        """An integer field (None when missing or not an integer)."""
        value = self.data.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def names(self, key: str) -> list[str]:
        """A list-of-names field ([] when missing)."""
        value = self.data.get(key)
        return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []

    @property
    def stopped_job(self) -> str:
        """For a ``requeue``: the job whose run ended (a standby logs its predecessor's)."""
        return self.text("stopped_job") or self.job_id

    @property
    def stopped_run(self) -> int:
        """For a ``requeue``: the restart count of the run that ended."""
        run = self.number("stopped_run")
        return self.restart if run is None else run


class RunEnd(NamedTuple):
    """How one run ended, as a restart storm is judged (:meth:`Chain.run_ends`): its cause, the
    newest complete checkpoint and the step reached (-1: none; None: not known), the node
    blamed ("" none) and the evidence ("")."""

    cause: str
    checkpoint: int | None
    progress: int | None
    node: str = ""
    evidence: str = ""


def is_growth(event: Event) -> bool:
    """Whether ``event`` is a run's move to its grower (an elastic job growing back): the run
    stopped at a checkpoint, and the grower resumed from it."""
    return event.event == "handoff" and event.cause == GROW


def encode(event: Event) -> str:
    """``event`` as one line of the log (ASCII: no character of it can break the line).

    Raises ValueError when a field of its own reuses a common name."""
    clash = [key for key in event.data if key in _COMMON]
    if clash:
        raise ValueError(f"event field(s) {', '.join(clash)} clash with the common fields")
    record: dict[str, object] = {
        "v": FORMAT,
        "time": round(event.time, 6),
        "job": event.job_id,
        "restart": event.restart,
        "event": event.event,
        "cause": event.cause or "-",
        "detail": event.detail,
    }
    record.update(event.data)
    return json.dumps(record, ensure_ascii=True, separators=(", ", ": ")) + "\n"


def parse(text: str) -> list[Event]:
    """Every event in a log's text, oldest first. A malformed line (one cut short by a crash)
    is skipped."""
    events = []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        event = _from_json(line)
        if event is not None:
            events.append(event)
    return events


def _from_json(line: str) -> Event | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    stamp, job, restart = record.get("time"), record.get("job"), record.get("restart")
    kind, cause, detail = record.get("event"), record.get("cause"), record.get("detail", "")
    if not isinstance(record.get("v"), int) or not isinstance(stamp, (int, float)):
        return None
    if not (isinstance(job, str) and isinstance(kind, str) and isinstance(cause, str)):
        return None
    if not isinstance(restart, int) or not isinstance(detail, str):
        return None
    data = {k: v for k, v in record.items() if k not in _COMMON}
    return Event(float(stamp), job, restart, kind, cause, detail, data)


class Chain:
    """What a chain's events say: its jobs, its standbys, its exclusions, its end."""

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self.events: list[Event] = list(events)

    @property
    def root(self) -> str | None:
        return self.events[0].job_id if self.events else None

    @property
    def job_ids(self) -> list[str]:
        """Every job id of the chain, in order (continuations included, pending or not)."""
        ids: list[str] = []
        for event in self.events:
            for job_id in (event.job_id, self._next(event)):
                if job_id and job_id not in ids:
                    ids.append(job_id)
        return ids

    @staticmethod
    def _next(event: Event) -> str:
        """The job ``event`` says the chain continues in ("" for none)."""
        return event.text("next") if event.event in ("requeue", "handoff") else ""

    @property
    def final(self) -> Event | None:
        ends = [e for e in self.events if e.event == "end"]
        return ends[-1] if ends else None

    @property
    def starts(self) -> int:
        """How many runs of the chain began (its ``start`` events)."""
        return self.count("start")

    def count(self, event: str, cause: str = "") -> int:
        """How many ``event`` events (of ``cause``, if given) the chain has."""
        return sum(1 for e in self.events if e.event == event and (not cause or e.cause == cause))

    def standbys(self) -> list[tuple[str, str]]:
        """(standby job, the job whose run submitted it) for each ``standby`` event, in order."""
        pairs = []
        for event in self.events:
            owner = event.text("standby_for")
            if event.event == "standby" and event.text("standby") and owner:
                pairs.append((event.text("standby"), owner))
        return pairs

    @property
    def standby_ids(self) -> list[str]:
        """Every standby job the chain's runs submitted (most are cancelled or became runs)."""
        return list(dict.fromkeys(standby for standby, _ in self.standbys()))

    def standby_for(self, job_id: str) -> str | None:
        """The standby that ``job_id``'s newest run submitted, if any."""
        found = [standby for standby, owner in self.standbys() if owner == job_id]
        return found[-1] if found else None

    def growers(self) -> list[tuple[str, str]]:
        """(grower job, the job whose run submitted it) for each ``grower`` event, in order."""
        return [
            (event.text("grower"), event.text("grower_for"))
            for event in self.events
            if event.event == "grower" and event.text("grower") and event.text("grower_for")
        ]

    @property
    def grower_ids(self) -> list[str]:
        """Every grower the chain's runs submitted."""
        return list(dict.fromkeys(grower for grower, _ in self.growers()))

    def grower_for(self, job_id: str) -> str | None:
        """The grower that ``job_id``'s newest run submitted, if any."""
        found = [grower for grower, owner in self.growers() if owner == job_id]
        return found[-1] if found else None

    def batch_host_lost(self, job_id: str) -> str:
        """The batch host a node agent of ``job_id`` saw leave that job ("" if none did)."""
        for event in self.events:
            if event.event == "fault" and event.job_id == job_id and event.text("seen_by"):
                return event.text("node")
        return ""

    def continued_as(self, job_id: str) -> bool:
        """Whether a run logged that the chain continues as ``job_id``."""
        return any(self._next(e) == job_id for e in self.events)

    def predecessor(self, job_id: str) -> str | None:
        """The job whose run continued the chain as ``job_id`` (None: none did)."""
        for event in self.events:
            if self._next(event) == job_id and event.job_id != job_id:
                return event.job_id
        return None

    def names_job(self, job_id: str) -> bool:
        """Whether ``job_id`` (or a task of that array) is a continuation, a standby or a
        grower of this chain: a job that carries the chain's root but is not named here is not
        part of it."""
        named = [self._next(e) for e in self.events] + [s for s, _ in self.standbys()]
        named += [g for g, _ in self.growers()]
        return any(n == job_id or n.startswith(job_id + "_") for n in named if n)

    def ended_after_standby(self, standby: str) -> bool:
        """Whether the chain logged its end after ``standby`` was submitted."""
        on = False
        for event in self.events:
            if event.event == "standby" and event.text("standby") == standby:
                on = True
            elif on and event.event == "end":
                return True
        return False

    def excluded(self) -> list[str]:
        """The nodes the chain excludes now (each ``exclude`` event holds the whole list)."""
        found: list[str] = []
        for event in self.events:
            if event.event == "exclude":
                found = event.names("nodes")
        return found

    def stops(self) -> dict[tuple[str, int], Event]:
        """Why each run stopped, the one reading of it: (job id, run index) -> the event that
        says so. A ``requeue`` names the run it ended (a standby's names its predecessor's; one
        that runs again inside its job ended no run); a move to a grower is its run's stop; an
        ``end`` speaks for its own run where nothing else did. A later event wins."""
        stops: dict[tuple[str, int], Event] = {}
        for event in self.events:
            if is_growth(event):
                stops[(event.job_id, event.restart)] = event
            elif event.event == "requeue" and event.text("how") != IN_JOB:
                stops[(event.stopped_job, event.stopped_run)] = event
        for event in self.events:
            if event.event == "end":
                stops.setdefault((event.job_id, event.restart), event)
        return stops

    def run_ends(self) -> list[RunEnd]:
        """How each run that the chain went on after ended, oldest first (in-job runs and moves
        to a grower included): the ``requeue`` (or growth) event, with the fault logged for it."""
        ends: list[RunEnd] = []
        fault: Event | None = None
        for event in self.events:
            if event.event == "fault":
                fault = event
            elif event.event == "requeue" or is_growth(event):
                blamed = fault is not None and fault.cause == event.cause
                ends.append(
                    RunEnd(
                        event.cause,
                        event.number("checkpoint"),
                        event.number("progress"),
                        fault.text("node") if blamed and fault else "",
                        fault.text("evidence") if blamed and fault else "",
                    )
                )
                fault = None
        return ends

    def last_ending(self) -> Event | None:
        """The newest event that tells how a run ended (signal events may come after it)."""
        kept = [e for e in self.events if e.event != "signal"]
        return kept[-1] if kept else None


class EventLog:
    """The event log of one chain, written by one run (``job_id``, Slurm restart ``restart``)."""

    def __init__(self, path: str, job_id: str, restart: int) -> None:
        self.path = path
        self.job_id = job_id
        self.restart = restart

    def append(
        self, event: str, cause: str, detail: str, when: float | None = None, **data: object
    ) -> None:
        """Add one event (``when``: epoch seconds it happened, if not now) in one write."""
        line = encode(
            Event(
                time.time() if when is None else when,
                self.job_id,
                self.restart,
                event,
                cause,
                detail,
                data,
            )
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("ascii"))
        finally:
            os.close(fd)

    def read(self) -> Chain:
        """The chain as the log has it now (no events when there is no log)."""
        try:
            with open(self.path, "rb") as handle:
                return Chain(parse(handle.read().decode("utf-8", "replace")))
        except OSError:
            return Chain()


class ChainView:
    """One chain's events, read once and kept current: each look stats the log and parses only
    the whole lines appended since (by this run, its standby, its agents or ``hpcjobs
    cancel``); a log replaced or cut short is read again from its start."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._chain = Chain()
        self._offset = 0
        self._inode = 0

    def current(self) -> Chain:
        """The chain as the log has it now (no events when there is no log)."""
        try:
            status = os.stat(self.path)
        except OSError:
            self._reset(0)
            return self._chain
        if status.st_ino != self._inode or status.st_size < self._offset:
            self._reset(status.st_ino)
        if status.st_size > self._offset:
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(self._offset)
                    data = handle.read(status.st_size - self._offset)
            except OSError:
                return self._chain
            whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            self._offset += len(whole)
            self._chain.events.extend(parse(whole.decode("utf-8", "replace")))
        return self._chain

    def _reset(self, inode: int) -> None:
        self._chain, self._offset, self._inode = Chain(), 0, inode
