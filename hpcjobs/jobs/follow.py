"""Follow jobs to their end (``--wait``, ``status --watch``) and follow their logs (``logs -f``).

Polling is gentle on the controller: every refresh is one batched query for all the jobs (see
:func:`hpcjobs.slurm.statusquery.query_status`); the first checks come after 1 and 2 s so that quick
failures show up at once, then the interval never drops below :attr:`PollSchedule.minimum`
and grows while nothing changes, up to :attr:`PollSchedule.maximum`.

Following a chain (``submit --wait``) also watches the chain's event log, which costs Slurm
nothing (:class:`EventLogWatch`: a stat each second here, a ``wc -c`` every 2 s over SSH). The
batch script logs ``requeue`` or ``end`` just before its job ends, so when such an event appears
Slurm is asked at once and then every :attr:`PollSchedule.fast` seconds, for at most
:attr:`PollSchedule.fast_polls` refreshes: the end is seen within a second or two instead of
after up to a minute of backoff.

State changes and requeues are reported through a callback as they are seen. The exit status
is 0 when every job COMPLETED and 1 otherwise. Ctrl-C (``KeyboardInterrupt``) propagates to
the caller and never cancels a job.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from hpcjobs.contract.slurmstates import MAY_REQUEUE, SUCCESS, is_terminal
from hpcjobs.errors import EXIT_JOB_FAILED, EXIT_OK, HpcJobsError
from hpcjobs.jobs.chain import (
    chain_output_dir,
    chain_path,
    ended_by_accounting,
    load_chain,
    parse_chain,
)
from hpcjobs.runner import LocalRunner, Runner
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.statusquery import JobStatus, query_status

if TYPE_CHECKING:
    from hpcjobs.slurm.client import SlurmClient

#: The state of a followed job that neither the queue nor accounting knows any more.
GONE = "UNKNOWN"

#: A line a job script prints when a run starts; ``logs --restart N`` splits the log on it.
#: Scripts print it as ``echo "hpcjobs: run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"``.
RUN_MARKER = re.compile(r"^hpcjobs: run (\d+) of job \S+", re.MULTILINE)


def exit_code_for(states: list[str]) -> int:
    """The exit status for jobs that ended in ``states``: 0 if all COMPLETED, else 1."""
    return EXIT_OK if states and all(s == SUCCESS for s in states) else EXIT_JOB_FAILED


@dataclass(frozen=True)
class PollSchedule:
    """How long to wait between refreshes.

    Attributes:
        first: the first waits, short so that early failures show at once.
        minimum: the floor after the first checks, also used right after a change.
        maximum: the ceiling while nothing changes.
        factor: growth per quiet refresh.
        fast: the wait between refreshes once a job is known to be near its end (its chain's
            event log gained a ``requeue`` or ``end`` event).
        fast_polls: how many such fast refreshes at most, after the immediate one; then the
            waits start again from ``minimum``.
    """

    first: tuple[float, ...] = (1.0, 2.0)
    minimum: float = 5.0
    maximum: float = 60.0
    factor: float = 1.5
    fast: float = 1.0
    fast_polls: int = 20

    def delays(self) -> Iterator[float]:
        """Waits for a quiet job: the first checks, then growing from the minimum."""
        yield from self.first
        delay = self.minimum
        while True:
            yield delay
            delay = min(self.maximum, delay * self.factor)


@dataclass(frozen=True)
class JobEvent:
    """A change seen on one job (or array task)."""

    job_id: str
    state: str
    previous: str | None
    reason: str
    restarts: int
    requeued: bool
    nodelist: str
    at: datetime

    def describe(self) -> str:
        """One human line, such as ``12: PENDING -> RUNNING on n1``."""
        text = f"{self.job_id}: {self.previous or 'new'} -> {self.state}"
        if self.nodelist and self.state == "RUNNING":
            text += f" on {self.nodelist}"
        if self.reason and self.state != "RUNNING":
            text += f" ({self.reason})"
        if self.requeued:
            text += f" [requeued, restart {self.restarts}]"
        return text


@dataclass
class FollowResult:
    """How followed jobs ended."""

    exit_code: int
    states: dict[str, str] = field(default_factory=dict)


class Follower:
    """Tracks jobs between refreshes and turns snapshots into :class:`JobEvent`."""

    def __init__(self) -> None:
        self.last: dict[str, JobStatus] = {}
        self.settled: dict[str, str] = {}
        self.current: list[str] = []

    def update(self, jobs: Sequence[JobStatus]) -> list[JobEvent]:
        """Events for what changed since the previous snapshot."""
        events = []
        now = datetime.now(timezone.utc)
        # Rows come and go: a block of pending array tasks turns into one row per task.
        self.current = [job.job_id for job in jobs]
        for job in jobs:
            before = self.last.get(job.job_id)
            requeued = before is not None and (
                job.restarts > before.restarts
                or (before.state in ("RUNNING", "COMPLETING") and job.state == "PENDING")
            )
            if before is None or (before.state, before.restarts) != (job.state, job.restarts):
                events.append(
                    JobEvent(
                        job_id=job.job_id,
                        state=job.state,
                        previous=before.state if before else None,
                        reason=job.reason,
                        restarts=job.restarts,
                        requeued=requeued,
                        nodelist=job.nodelist,
                        at=now,
                    )
                )
            # PREEMPTED and NODE_FAIL may precede a requeue: final only when seen twice.
            if job.state == GONE or (
                is_terminal(job.state)
                and (
                    job.state not in MAY_REQUEUE
                    or (before is not None and before.state == job.state)
                )
            ):
                self.settled[job.job_id] = job.state
            else:
                self.settled.pop(job.job_id, None)
            self.last[job.job_id] = job
        return events

    def done(self) -> bool:
        """True once every job of the latest snapshot has reached a final state."""
        return bool(self.current) and all(j in self.settled for j in self.current)

    def final_states(self) -> dict[str, str]:
        return {j: self.settled.get(j, self.last[j].state) for j in self.current}


def follow_jobs(
    client: SlurmClient,
    job_ids: Sequence[str],
    *,
    on_event: Callable[[JobEvent], None],
    schedule: PollSchedule | None = None,
    sleep: Callable[[float], None] | None = None,
    timeout_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    wake: Callable[[], bool] | None = None,
    wake_every: float = 1.0,
) -> FollowResult:
    """Poll ``job_ids`` until all of them end; report each change through ``on_event``.

    Args:
        client: the Slurm client (one squeue per refresh, plus one sacct for forgotten jobs).
        job_ids: the jobs to follow (array ids cover all their tasks).
        on_event: called for every state change and requeue, in order.
        schedule: the polling intervals.
        sleep: the sleep function (tests pass a fake one).
        timeout_s: stop following after this long; the result then has exit code 1.
        clock: monotonic clock for ``timeout_s``.
        wake: a cheap check that asks no Slurm command (see :class:`EventLogWatch`), called
            every ``wake_every`` seconds between refreshes. When it returns True the jobs are
            near their end: refresh at once, then every ``schedule.fast`` seconds for at most
            ``schedule.fast_polls`` refreshes.
        wake_every: seconds between two calls of ``wake``.

    Returns:
        Exit code 0 if every job COMPLETED, else 1; and each job's final state.

    Raises:
        UnknownJobError: on the first refresh, Slurm knows none of some ids.
    """
    sleep = sleep or time.sleep
    follower = Follower()
    plan = schedule or PollSchedule()
    delays = plan.delays()
    started = clock()
    first = True
    polls = 0
    fast_left = 0
    while True:
        report = query_status(client, job_ids)
        if first and report.unknown:
            raise UnknownJobError(report.unknown)
        first = False
        jobs = list(report.jobs) + [_gone(job_id) for job_id in report.unknown]
        events = follower.update(jobs)
        for event in events:
            on_event(event)
        if follower.done():
            states = follower.final_states()
            return FollowResult(exit_code_for(list(states.values())), states)
        if timeout_s is not None and clock() - started >= timeout_s:
            return FollowResult(1, follower.final_states())
        if events and polls > len(plan.first):
            delays = _restart_at_minimum(plan)  # something moved: look again soon
        polls += 1
        if fast_left > 0:
            fast_left -= 1
            wait = plan.fast
            if not fast_left:
                delays = _restart_at_minimum(plan)
        else:
            wait = next(delays)
        if _nap(wait, sleep, wake, wake_every):
            fast_left = plan.fast_polls  # near the end: refresh now, then fast for a while


def _nap(
    wait: float,
    sleep: Callable[[float], None],
    wake: Callable[[], bool] | None,
    every: float,
) -> bool:
    """Sleep ``wait`` seconds, asking ``wake`` every ``every`` seconds; True when it woke us."""
    if wake is None:
        sleep(wait)
        return False
    left = wait
    while left > 0:
        step = min(every, left)
        sleep(step)
        left -= step
        if wake():
            return True
    return False


def _restart_at_minimum(schedule: PollSchedule) -> Iterator[float]:
    return replace(schedule, first=()).delays()


def _gone(job_id: str) -> JobStatus:
    """A job that left the queue and that accounting does not know: its end is unknown."""
    return JobStatus(
        job_id=job_id,
        name="",
        state=GONE,
        reason="left the queue, and accounting has no record",
        nodelist="",
        nodes=None,
        elapsed_s=None,
        restarts=0,
        partition="",
        user="",
        source="none",
    )


class EventLogWatch:
    """Notices, without asking Slurm, when a chain's event log gains a ``requeue`` or ``end``.

    The batch script logs those just before its job ends. A local log is checked with one
    ``os.stat`` per call; through any other runner (SSH) the size comes from ``wc -c``, so
    :attr:`every` is longer there. Only what was appended since the last call is read. Failures
    to look (no log yet, a dropped connection) count as no news: following goes on by polling.

    Args:
        runner: how to reach the file (the runner the job was submitted through).
        path: the event log, ``<output dir>/chain-<root>.jsonl``.
        local: read the file directly (default: when ``runner`` is a :class:`LocalRunner`).
    """

    LOCAL_EVERY = 1.0
    REMOTE_EVERY = 2.0
    WAKING = frozenset({"requeue", "end"})

    def __init__(self, runner: Runner, path: str, *, local: bool | None = None) -> None:
        self.runner = runner
        self.path = path
        self.local = isinstance(runner, LocalRunner) if local is None else local
        self.every = self.LOCAL_EVERY if self.local else self.REMOTE_EVERY
        self.offset = self._size() or 0  # what is there already is old news

    def check(self) -> bool:
        """True when a ``requeue`` or ``end`` event was appended since the last call."""
        size = self._size()
        if size is None or size == self.offset:
            return False
        if size < self.offset:
            self.offset = 0  # replaced: a new chain set an old log aside
        text = self._read_from(self.offset)
        if text is None:
            return False
        complete = text[: text.rfind("\n") + 1]  # a line being written waits for next time
        self.offset += len(complete.encode("utf-8"))
        return any(e.event in self.WAKING for e in parse_chain(complete).events)

    def _size(self) -> int | None:
        if self.local:
            try:
                return os.stat(self.path).st_size
            except OSError:
                return None
        try:
            result = self.runner.run(["wc", "-c", self.path], check=False, timeout=30)
        except HpcJobsError:
            return None
        fields = result.stdout.split()
        return int(fields[0]) if result.ok and fields and fields[0].isdigit() else None

    def _read_from(self, offset: int) -> str | None:
        if self.local:
            try:
                with open(self.path, "rb") as handle:
                    handle.seek(offset)
                    return handle.read().decode("utf-8", errors="replace")
            except OSError:
                return None
        try:
            result = self.runner.run(
                ["tail", "-c", f"+{offset + 1}", self.path], check=False, timeout=30
            )
        except HpcJobsError:
            return None
        return result.stdout if result.ok else None


def follow_chain(
    client: SlurmClient,
    runner: Runner,
    root: str,
    *,
    on_event: Callable[[JobEvent], None],
    on_note: Callable[[str], None],
    output_dir: str | None = None,
    schedule: PollSchedule | None = None,
    sleep: Callable[[float], None] | None = None,
    watch: EventLogWatch | None = None,
) -> FollowResult:
    """Follow a job and every continuation of it until the chain ends.

    A preempted or timed-out hpcjobs job continues as a new job id (see docs/requeue.md);
    this follows each in turn. The exit code is the chain's: 0 when its event log says it
    finished, 1 when it failed; the last job's own result when there is no event log.

    The chain's event log is watched between refreshes (:class:`EventLogWatch`), so the end of
    a job is seen within seconds of its script logging it. ``watch`` replaces the default one
    (on ``<output_dir>/chain-<root>.jsonl``; ``output_dir`` defaults to the job index's).
    """
    if watch is None:
        folder = output_dir or chain_output_dir(root)
        if folder:
            watch = EventLogWatch(runner, chain_path(folder, root))
    current = root
    followed: set[str] = set()
    while True:
        followed.add(current)
        result = follow_jobs(
            client,
            [current],
            on_event=on_event,
            schedule=schedule,
            sleep=sleep,
            wake=watch.check if watch else None,
            wake_every=watch.every if watch else 1.0,
        )
        ref = load_chain(root, runner, output_dir=output_dir)
        if ref is None:
            return result
        final = ref.chain.final
        if final is not None:
            on_note(f"chain of job {root}: {final.cause} ({final.detail})")
            return FollowResult(0 if final.cause == "finish" else 1, result.states)
        after = [j for j in ref.chain.job_ids if j not in followed]
        standby = ref.chain.standby_for(current)
        if not after and standby is not None and standby not in followed:
            # The run died without a word (a node failure): its standby takes over.
            after = [standby]
        if not after:
            ended = ended_by_accounting(ref.chain, current, result.states.get(current, ""))
            if ended is not None:
                on_note(f"chain of job {root}: {ended.cause} ({ended.detail})")
            return result
        current = after[0]
        on_note(f"job {root} continues as job {current}")


# ---- logs -----------------------------------------------------------------------------------


def read_run(text: str, restart: int) -> str | None:
    """The part of a log written by run ``restart`` (0 = first run), split on :data:`RUN_MARKER`.

    Returns None when the log has no marker for that run.
    """
    marks = [(int(m.group(1)), m.start()) for m in RUN_MARKER.finditer(text)]
    for i, (run, start) in enumerate(marks):
        if run == restart:
            end = marks[i + 1][1] if i + 1 < len(marks) else len(text)
            return text[start:end]
    return None


def tail_file(
    path: Path,
    *,
    alive: Callable[[], bool],
    on_data: Callable[[str], None],
    schedule: PollSchedule | None = None,
    sleep: Callable[[float], None] | None = None,
    start: int = 0,
) -> None:
    """Print ``path`` from byte ``start`` as it grows, until ``alive()`` says the job ended.

    The file may not exist yet (pending job) and may be truncated when a requeued run reopens
    it; both are handled. ``alive`` is asked only on the polling schedule, so following costs
    one Slurm query per interval, however fast the log grows. Reading the file is local and
    checked every second.
    """
    sleep = sleep or time.sleep
    position = start
    delays = (schedule or PollSchedule()).delays()
    next_query = 0.0
    waited = 0.0
    running = True
    while True:
        position = _drain(path, position, on_data)
        if not running:
            return
        if waited >= next_query:
            running = alive()
            waited = 0.0
            next_query = next(delays)
            if not running:
                continue  # one last read of whatever the job wrote at the end
        sleep(1.0)
        waited += 1.0


def _drain(path: Path, position: int, on_data: Callable[[str], None]) -> int:
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return position
    if size < position:
        position = 0  # truncated: a requeued run started over
    if size == position:
        return position
    with open(path, "rb") as handle:
        handle.seek(position)
        data = handle.read(size - position)
    on_data(data.decode("utf-8", errors="replace"))
    return position + len(data)
