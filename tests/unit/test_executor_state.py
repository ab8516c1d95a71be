"""``HpcJob.state`` before accounting knows the job: the queue answers, sparingly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcjobs.errors import CommandTimeoutError
from hpcjobs.submitit import hpcjob as submitit_jobs
from hpcjobs.submitit.hpcjob import HpcJob, queue_state
from tests.fakes import FakeRunner, client_for, ok
from tests.unit.test_executor import FakeWatcher
from tests.unit.test_follow import _line


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(submitit_jobs, "_QUEUE_STATES", {})
    yield


def test_queue_state_is_one_squeue_reused_for_a_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = FakeRunner().add("squeue", ok(_line("12", "PENDING", "Priority")))
    client = client_for(runner)
    now = [100.0]
    monkeypatch.setattr("hpcjobs.submitit.hpcjob.time.monotonic", lambda: now[0])
    assert queue_state("12", client) == "PENDING"
    assert queue_state("12", client) == "PENDING"
    assert runner.count("squeue") == 1
    now[0] += submitit_jobs.QUEUE_STATE_TTL_S
    assert queue_state("12", client) == "PENDING" and runner.count("squeue") == 2


def test_queue_state_of_an_array_task_in_a_pending_block() -> None:
    runner = FakeRunner().add("squeue", ok(_line("12_[0-3]", "PENDING")))
    assert queue_state("12_2", client_for(runner)) == "PENDING"


def test_queue_state_without_an_answer_is_none() -> None:
    runner = FakeRunner().add("squeue", ok(""))
    assert queue_state("12", client_for(runner)) is None
    broken = FakeRunner().add("squeue", CommandTimeoutError(["squeue"], 15))
    assert queue_state("13", client_for(broken, total=0)) is None


def test_state_asks_the_queue_while_accounting_does_not_know_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeWatcher()
    monkeypatch.setattr(HpcJob, "watcher", fake)
    asked: list[str] = []

    def queued(job_id: str) -> str | None:
        asked.append(job_id)
        return "PENDING"

    monkeypatch.setattr(submitit_jobs, "queue_state", queued)
    job: HpcJob[int] = HpcJob(tmp_path, "12")
    assert job.state == "PENDING" and asked == ["12"]  # sacct says UNKNOWN
    fake.states["12"] = "RUNNING"
    assert job.state == "RUNNING" and asked == ["12"]  # accounting knows it: no squeue
