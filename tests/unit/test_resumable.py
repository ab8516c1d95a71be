"""Resumable: checkpoint folder, stop flag, rank-0 saves, and a clean interruption."""

from __future__ import annotations

import json
import os
import pickle
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import hpcjobs
from hpcjobs.runtime.resumable import EXIT_INTERRUPTED, Interrupted, Resumable, checkpoint_folder


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR2, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


class Sum(Resumable):
    """Adds 1..n, one number per step; stops when told to after ``stop_after`` steps."""

    keep_checkpoints = 2

    def __init__(self, n: int, stop_after: int | None = None) -> None:
        self.n = n
        self.stop_after = stop_after

    def __call__(self) -> int:
        last = self.checkpoints.latest()
        start, total = (0, 0) if last is None else (last.step + 1, last.meta["total"])
        for step in range(start, self.n):
            total += step + 1
            self.note_progress(step)
            if self.stop_after is not None and step + 1 - start >= self.stop_after:
                self.stop.set("test")
            if self.stop.should_stop():
                self.save(step, lambda folder: None, {"total": total})
                self.interrupted()
        return total


def test_checkpoint_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert checkpoint_folder("here") == Path("here")
    monkeypatch.setenv("SUBMITIT_FOLDER", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    assert checkpoint_folder() == tmp_path / "checkpoints" / "12"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "10")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    assert checkpoint_folder() == tmp_path / "checkpoints" / "10_2"
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path / "ck"))
    assert checkpoint_folder() == tmp_path / "ck"


def test_interrupted_runs_resume_from_the_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    job = Sum(10, stop_after=4)
    runs = 0
    while True:
        # Each run is a fresh unpickling of the submitted object, as in a continuation.
        fresh = pickle.loads(pickle.dumps(job))
        runs += 1
        try:
            result = fresh()
            break
        except Interrupted as stop:
            assert stop.code == EXIT_INTERRUPTED
    assert result == sum(range(1, 11)) and runs == 3
    assert job.checkpoints.progress() == 9
    kept = [c.step for c in job.checkpoints.checkpoints()]
    assert kept == [3, 7]  # keep_checkpoints = 2


def test_interrupted_is_not_an_exception(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    caught = []
    with pytest.raises(SystemExit) as stop:
        try:
            Sum(5, stop_after=1)()
        except Exception as exc:  # what user code often has around its loop
            caught.append(exc)
    assert not caught and stop.value.code == EXIT_INTERRUPTED
    assert str(stop.value) == "stop signal: checkpoint saved"


def test_signal_raises_the_stop_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    job = Sum(3)
    job.prepare()
    assert not job.stop.is_set()
    os.kill(os.getpid(), signal.SIGUSR2)
    assert job.stop.should_stop() and job.stop.signal_name == "SIGUSR2"


def test_only_rank_zero_writes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "1")
    job = Sum(3)
    assert job.rank == 1
    calls: list[Path] = []
    job.save(0, calls.append)
    job.note_progress(0)
    assert calls == [] and job.checkpoints.latest() is None and job.checkpoints.progress() is None
    monkeypatch.setenv("RANK", "0")
    job.save(0, lambda folder: (folder / "state.json").write_text(json.dumps({"x": 1})))
    latest = job.checkpoints.latest()
    assert latest is not None and json.loads((latest.path / "state.json").read_text()) == {"x": 1}


def test_runtime_state_is_not_pickled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    job = Sum(3)
    job.prepare()
    copy = pickle.loads(pickle.dumps(job))
    assert copy.__dict__ == {"n": 3, "stop_after": None}


def test_restart_count(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Sum(1).restart_count == 0
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert Sum(1).restart_count == 1
    monkeypatch.setenv("HPCJOBS_RESTART_COUNT", "3")
    assert Sum(1).restart_count == 3


def test_call_must_be_implemented() -> None:
    with pytest.raises(NotImplementedError, match="Resumable must implement"):
        hpcjobs.Resumable()()


def test_distributed_save_waits_and_interrupt_shuts_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dist = pytest.importorskip("torch.distributed")
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path / "ck"))
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        barriers: list[int] = []
        real = dist.barrier
        monkeypatch.setattr(dist, "barrier", lambda: barriers.append(1) or real())
        job = Sum(4, stop_after=2)
        assert job.rank == 0
        with pytest.raises(Interrupted):
            job()
        assert barriers == [1]
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_a_resumable_takes_its_share_of_the_micro_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    job = Resumable()
    assert job.world_size == 3
    assert list(job.micro_batches(8)) == [1, 4, 7]
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert job.world_size == 1 and list(job.micro_batches(2)) == [0, 1]
