"""Following jobs (--wait, --watch) and logs (-f): events, requeues, backoff, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.jobs.follow import (
    Follower,
    JobEvent,
    PollSchedule,
    follow_jobs,
    read_run,
    tail_file,
)
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.statusquery import JobStatus
from tests.fakes import FakeRunner, Sleeps, client_for, ok


def _line(job_id: str, state: str, reason: str = "None", restarts: int = 0, nodes: str = "") -> str:
    base, _, task = job_id.partition("_")
    tasks = task.strip("[]") or "N/A"
    return (
        f"{job_id}|{base if not task else base + '9'}|{base}|{tasks}|{state}|{reason}|{nodes}|"
        f"0:05|1|{restarts}|batch|alice|train|\n"
    )


def _squeue(*snapshots: str) -> FakeRunner:
    return FakeRunner().add("squeue", *(ok(s) for s in snapshots))


def _status(job_id: str, state: str, restarts: int = 0) -> JobStatus:
    return JobStatus(job_id, "n", state, "", "", 1, 0, restarts, "batch", "u", "queue")


def test_schedule_never_below_minimum_after_first_checks() -> None:
    delays = PollSchedule().delays()
    got = [next(delays) for _ in range(12)]
    assert got[:2] == [1.0, 2.0]
    assert all(d >= 5.0 for d in got[2:])
    assert got[-1] == 60.0 and got[2:5] == [5.0, 7.5, 11.25]


def test_follow_reports_changes_and_requeues() -> None:
    runner = _squeue(
        _line("7", "PENDING", "Priority"),
        _line("7", "RUNNING", nodes="n1"),
        _line("7", "RUNNING", nodes="n1"),
        _line("7", "PENDING", "BeginTime", restarts=1),
        _line("7", "RUNNING", restarts=1, nodes="n2"),
        _line("7", "COMPLETED", restarts=1, nodes="n2"),
    )
    sleeps = Sleeps()
    events: list[JobEvent] = []
    result = follow_jobs(client_for(runner), ["7"], on_event=events.append, sleep=sleeps)
    assert [e.state for e in events] == ["PENDING", "RUNNING", "PENDING", "RUNNING", "COMPLETED"]
    assert [e.requeued for e in events] == [False, False, True, False, False]
    assert events[2].restarts == 1 and "requeued, restart 1" in events[2].describe()
    assert "on n2" in events[3].describe()
    assert result.exit_code == 0 and result.states == {"7": "COMPLETED"}
    assert runner.count("squeue") == 6  # one query per refresh
    assert sleeps.waits[:2] == [1.0, 2.0] and all(w >= 5.0 for w in sleeps.waits[2:])


@pytest.mark.parametrize("state", ["FAILED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY"])
def test_failures_exit_1(state: str) -> None:
    runner = _squeue(_line("7", "RUNNING"), _line("7", state))
    result = follow_jobs(client_for(runner), ["7"], on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 1 and result.states["7"] == state


def test_preempted_is_not_final_until_seen_twice() -> None:
    runner = _squeue(
        _line("7", "RUNNING"),
        _line("7", "PREEMPTED"),
        _line("7", "PENDING", "BeginTime", restarts=1),
        _line("7", "COMPLETED", restarts=1),
    )
    result = follow_jobs(client_for(runner), ["7"], on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 0
    runner = _squeue(_line("7", "RUNNING"), _line("7", "PREEMPTED"), _line("7", "PREEMPTED"))
    result = follow_jobs(client_for(runner), ["7"], on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 1 and runner.count("squeue") == 3


def test_array_waits_for_every_task() -> None:
    runner = _squeue(
        _line("8_[0-2]", "PENDING", "Priority"),
        _line("8_0", "RUNNING") + _line("8_[1-2]", "PENDING"),
        _line("8_0", "COMPLETED") + _line("8_1", "COMPLETED") + _line("8_2", "RUNNING"),
        _line("8_0", "COMPLETED") + _line("8_1", "COMPLETED") + _line("8_2", "FAILED"),
    )
    result = follow_jobs(client_for(runner), ["8"], on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 1
    assert result.states == {"8_0": "COMPLETED", "8_1": "COMPLETED", "8_2": "FAILED"}


def test_finished_job_found_in_accounting() -> None:
    sacct = (
        "9|9|COMPLETED|0:0|0:0|None|2025-01-01T00:00:00|2025-01-01T00:00:00|"
        "2025-01-01T00:00:01|2025-01-01T00:00:02|00:00:01|1|n1|batch|alice|x\n"
    )
    runner = FakeRunner().add("squeue", ok("")).add("sacct", ok(sacct))
    result = follow_jobs(client_for(runner), ["9"], on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 0


def test_unknown_job_raises() -> None:
    runner = FakeRunner().add("squeue", ok("")).add("sacct", ok(""))
    with pytest.raises(UnknownJobError):
        follow_jobs(client_for(runner), ["404"], on_event=lambda e: None, sleep=Sleeps())


def test_timeout_stops_following() -> None:
    runner = _squeue(_line("7", "RUNNING"))
    ticks = iter(range(0, 1000, 10))
    result = follow_jobs(
        client_for(runner),
        ["7"],
        on_event=lambda e: None,
        sleep=Sleeps(),
        timeout_s=25,
        clock=lambda: float(next(ticks)),
    )
    assert result.exit_code == 1 and result.states == {"7": "RUNNING"}


def test_ctrl_c_propagates_and_cancels_nothing() -> None:
    runner = _squeue(_line("7", "RUNNING"))

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        follow_jobs(client_for(runner), ["7"], on_event=lambda e: None, sleep=interrupt)
    assert all(call[0] == "squeue" for call in runner.calls)


def test_follower_done_ignores_vanished_rows() -> None:
    follower = Follower()
    follower.update([_status("8_[0-1]", "PENDING")])
    follower.update([_status("8_0", "COMPLETED"), _status("8_1", "COMPLETED")])
    assert follower.done()


def test_read_run_splits_on_markers() -> None:
    log = "hpcjobs: run 0 of job 7 on n1\nstep 1\nhpcjobs: run 1 of job 7 on n2\nstep 2\n"
    assert read_run(log, 0) == "hpcjobs: run 0 of job 7 on n1\nstep 1\n"
    assert read_run(log, 1) == "hpcjobs: run 1 of job 7 on n2\nstep 2\n"
    assert read_run(log, 2) is None


def test_tail_follows_growth_truncation_and_end(tmp_path: Path) -> None:
    path = tmp_path / "job.out"
    chunks: list[str] = []
    states = iter([True, True, True, True, False])
    # What the job has written after each second; "again" means a requeued run started over.
    steps = iter(["first\n", "first\nsecond\n", "again\n", "again\nlast\n"])

    def sleep(_: float) -> None:
        text = next(steps, None)
        if text is not None:
            path.write_text(text)

    tail_file(
        path,
        alive=lambda: next(states),
        on_data=chunks.append,
        schedule=PollSchedule(first=(), minimum=1, maximum=1),
        sleep=sleep,
    )
    assert "".join(chunks) == "first\nsecond\nagain\nlast\n"


def test_tail_waits_for_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "later.out"
    chunks: list[str] = []
    alive = iter([True, False])

    def sleep(_: float) -> None:
        path.write_text("hello\n")

    tail_file(path, alive=lambda: next(alive), on_data=chunks.append, sleep=sleep)
    assert chunks == ["hello\n"]


def test_polling_uses_one_query_per_refresh_for_many_jobs() -> None:
    ids = [str(i) for i in range(1, 201)]
    done = "".join(_line(i, "COMPLETED") for i in ids)
    runner = _squeue(done)
    result = follow_jobs(client_for(runner), ids, on_event=lambda e: None, sleep=Sleeps())
    assert result.exit_code == 0 and len(runner.calls) == 1
