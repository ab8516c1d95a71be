"""Following a chain wakes up on its event log: the end is seen at once, Slurm is spared."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcjobs.jobs.follow import EventLogWatch, PollSchedule, follow_chain, follow_jobs
from hpcjobs.runner import LocalRunner, Result
from tests.eventlines import line
from tests.fakes import FakeRunner, Sleeps, client_for, ok
from tests.unit.test_follow import _line


def _event(kind: str, cause: str = "-", detail: str = "", **data: object) -> str:
    return line("7", kind, cause, detail, at=100.0, **data)


@dataclass
class Clock:
    """Simulated time: the fake sleep advances it and runs what was planned for then."""

    now: float = 0.0
    plan: list[tuple[float, Path, str]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        for when, path, text in list(self.plan):
            if when <= self.now:
                with path.open("a") as handle:
                    handle.write(text)
                self.plan.remove((when, path, text))


def _job_ends_at(clock: Clock, end: float, job_id: str = "7") -> FakeRunner:
    """squeue says RUNNING until ``end`` + 0.5 s (the script logs its end just before)."""

    def squeue(argv: Sequence[str]) -> Result:
        state = "COMPLETED" if clock.now >= end + 0.5 else "RUNNING"
        return ok(_line(job_id, state))

    return FakeRunner().add("squeue", squeue)


def test_wake_polls_at_once_then_fast_for_a_while() -> None:
    runner = FakeRunner().add("squeue", ok(_line("7", "RUNNING")))
    sleeps = Sleeps()
    wakes = iter([False, False, True] + [False] * 100)
    ticks = iter(range(100))  # the clock ticks once per refresh
    result = follow_jobs(
        client_for(runner),
        ["7"],
        on_event=lambda e: None,
        schedule=PollSchedule(first=(), minimum=5.0, maximum=5.0, fast=1.0, fast_polls=3),
        sleep=sleeps,
        wake=lambda: next(wakes),
        wake_every=5.0,
        timeout_s=8,
        clock=lambda: float(next(ticks)),
    )
    assert result.exit_code == 1 and runner.count("squeue") == 8
    # Woken during the third wait: refresh at once, three fast refreshes, then gentle again.
    assert sleeps.waits == [5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 5.0]


def test_wake_is_asked_between_refreshes_in_short_naps() -> None:
    runner = FakeRunner().add("squeue", ok(_line("7", "RUNNING")), ok(_line("7", "COMPLETED")))
    sleeps = Sleeps()
    asked: list[int] = []

    def wake() -> bool:
        asked.append(1)
        return False

    follow_jobs(
        client_for(runner),
        ["7"],
        on_event=lambda e: None,
        schedule=PollSchedule(first=(2.5,)),
        sleep=sleeps,
        wake=wake,
    )
    assert sleeps.waits == [1.0, 1.0, 0.5] and len(asked) == 3


def test_without_wake_the_schedule_is_unchanged() -> None:
    runner = FakeRunner().add("squeue", ok(_line("7", "RUNNING")), ok(_line("7", "COMPLETED")))
    sleeps = Sleeps()
    result = follow_jobs(client_for(runner), ["7"], on_event=lambda e: None, sleep=sleeps)
    assert result.exit_code == 0 and sleeps.waits == [1.0]


def test_local_watch_wakes_on_requeue_and_end_only(tmp_path: Path) -> None:
    path = tmp_path / "chain-7.jsonl"
    path.write_text(_event("start", detail="checkpoint=-1", checkpoint=-1))
    watch = EventLogWatch(LocalRunner(), str(path))
    assert watch.local and watch.every == 1.0
    assert not watch.check()  # what was there at the start is old news
    with path.open("a") as handle:
        handle.write(_event("start", detail="checkpoint=3", checkpoint=3))
    assert not watch.check()
    with path.open("a") as handle:
        handle.write(_event("requeue", "preemption", "continued as job 9", next="9")[:20])
    assert not watch.check()  # half a line: wait for the rest
    with path.open("a") as handle:
        handle.write(_event("requeue", "preemption", "continued as job 9", next="9")[20:])
    assert watch.check()
    assert not watch.check()
    with path.open("a") as handle:
        handle.write(_event("end", "finish", "completed"))
    assert watch.check()


def test_local_watch_of_a_missing_or_replaced_log(tmp_path: Path) -> None:
    path = tmp_path / "chain-7.jsonl"
    watch = EventLogWatch(LocalRunner(), str(path))
    assert not watch.check()  # no log yet
    path.write_text(_event("start") + _event("start") + _event("start"))
    assert not watch.check()
    path.write_text(_event("end", "fail", "cancelled"))  # shorter: a new log
    assert watch.check()


def test_remote_watch_asks_for_the_size_then_reads_only_the_new_part() -> None:
    old = _event("start")
    new = _event("end", "finish", "completed")
    runner = FakeRunner()
    runner.add("wc", ok(f"{len(old)} /o/chain-7.jsonl\n"), ok(f"{len(old)} x\n"))
    runner.add("wc", ok(f"{len(old + new)} x\n"))
    runner.add("tail", ok(new))
    watch = EventLogWatch(runner, "/o/chain-7.jsonl")
    assert not watch.local and watch.every == 2.0
    assert not watch.check()
    assert watch.check()
    assert runner.calls[-1] == ["tail", "-c", f"+{len(old) + 1}", "/o/chain-7.jsonl"]
    assert runner.count("tail") == 1


def test_remote_watch_failures_are_no_news() -> None:
    runner = FakeRunner().add("wc", Result(("wc",), 1, "", "wc: no such file"))
    watch = EventLogWatch(runner, "/o/chain-7.jsonl")
    assert not watch.check() and not watch.check()


def test_follow_chain_sees_the_end_within_two_seconds(tmp_path: Path) -> None:
    clock = Clock()
    log = tmp_path / "chain-7.jsonl"
    log.write_text(_event("start"))
    end = 40.0  # the job logs its end 40 s in: the gentle backoff would look at 43.6 s
    clock.plan.append((end, log, _event("end", "finish", "completed")))
    runner = _job_ends_at(clock, end)
    notes: list[str] = []
    result = follow_chain(
        client_for(runner),
        LocalRunner(),
        "7",
        on_event=lambda e: None,
        on_note=notes.append,
        output_dir=str(tmp_path),
        sleep=clock.sleep,
    )
    assert result.exit_code == 0 and notes == ["chain of job 7: finish (completed)"]
    assert clock.now - end <= 2.0
    assert runner.count("squeue") <= 10  # as gentle as before until the end came near


def test_follow_chain_without_watch_keeps_the_backoff(tmp_path: Path) -> None:
    clock = Clock()
    end = 40.0
    runner = _job_ends_at(clock, end)
    result = follow_chain(
        client_for(runner),
        LocalRunner(),
        "7",
        on_event=lambda e: None,
        on_note=lambda n: None,
        output_dir=str(tmp_path / "nowhere"),
        sleep=clock.sleep,
    )
    assert result.exit_code == 0 and clock.now - end > 2.0


def test_follow_chain_says_when_its_pending_continuation_was_cancelled(tmp_path: Path) -> None:
    log = tmp_path / "chain-7.jsonl"
    log.write_text(_event("start") + _event("requeue", "timeout", "continued as job 9", next="9"))
    runner = FakeRunner().add(
        "squeue",
        ok(_line("7", "COMPLETED")),
        ok(_line("9", "PENDING")),
        ok(_line("9", "CANCELLED")),
    )
    notes: list[str] = []
    result = follow_chain(
        client_for(runner),
        LocalRunner(),
        "7",
        on_event=lambda e: None,
        on_note=notes.append,
        output_dir=str(tmp_path),
        sleep=Sleeps(),
    )
    assert result.exit_code == 1
    assert notes[-1].startswith("chain of job 7: fail (cancelled: job 9 is CANCELLED")
