"""What each rank of an executor job runs: ``python -m hpcjobs.submitit.task FOLDER``.

The task runs in a real subprocess with the variables Slurm and the batch script would set,
so signals, exit codes and output redirection are the real ones.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from submitit.core import utils
from submitit.helpers import Checkpointable

from hpcjobs.runtime.resumable import EXIT_INTERRUPTED, Resumable
from hpcjobs.submitit.pickles import write_pickle
from hpcjobs.submitit.task import previous_run
from tests.eventlines import line

REPO = Path(__file__).resolve().parents[2]


def power(base: int, exponent: int) -> int:
    return int(base**exponent)


def explode() -> None:
    raise ValueError("no luck")


class Steps(Resumable):
    """Counts steps until stopped; a run that resumed finishes three steps later."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __call__(self) -> str:
        last = self.checkpoints.latest()
        start = 0 if last is None else last.step + 1
        end = start + 3 if last is not None else 10_000
        Path(self.marker).write_text(str(start))
        for step in range(start, end):
            time.sleep(0.02)
            self.note_progress(step)
            if self.stop.should_stop():
                self.save(step, lambda folder, n=step: (folder / "step.json").write_text(f"{n}"))
                self.interrupted(f"stopped at step {step}")
        return f"resumed at {start}, ended at {end}"


class Counter(Checkpointable):
    """submitit's checkpoint protocol: the whole object is pickled on the warning signal."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.count = 0

    def __call__(self) -> int:
        Path(self.marker).touch()
        while True:
            self.count += 1
            time.sleep(0.01)


def _event(job: str, event: str, cause: str = "-", detail: str = "", **data: object) -> str:
    return line(job, event, cause, detail, at=1700000000.0, **data)


def _start(folder: Path, job_id: str, root: str | None = None) -> subprocess.Popen[str]:
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": job_id,
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "HPCJOBS_JOB_OUTPUT_DIR": str(folder),
        "HPCJOBS_CHECKPOINT_DIR": str(folder / "checkpoints"),
        "HPCJOBS_CHAIN_ROOT": root or job_id,
        "HPCJOBS_SIGNAL": "USR2",
    }
    argv = [sys.executable, "-u", "-m", "hpcjobs.submitit.task", str(folder)]
    return subprocess.Popen(argv, cwd=REPO, env=env, text=True, stderr=subprocess.PIPE)


def _run(folder: Path, job_id: str, root: str | None = None) -> int:
    proc = _start(folder, job_id, root)
    _, err = proc.communicate(timeout=60)
    assert not err, err  # everything goes to the rank's own log files
    return proc.returncode


def _submit(folder: Path, job_id: str, fn: Any, *args: Any) -> None:
    write_pickle(folder / f"{job_id}_submitted.pkl", utils.DelayedSubmission(fn, *args))


def _interrupt(proc: subprocess.Popen[str], marker: Path) -> int:
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the task did not start"
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGUSR2)
    proc.communicate(timeout=30)
    return proc.returncode


def _result(folder: Path, name: str) -> Any:
    return utils.pickle_load(folder / name)


def test_plain_function_result_log_and_done_marker(tmp_path: Path) -> None:
    _submit(tmp_path, "5", power, 2, 10)
    assert _run(tmp_path, "5") == 0
    assert _result(tmp_path, "5_0_result.pkl") == ("success", 1024)
    assert (tmp_path / "DONE-5").exists()
    assert "job 5 (chain 5), rank 0 of 1" in (tmp_path / "5_0_log.err").read_text()


def test_exception_is_stored_and_fails_the_task(tmp_path: Path) -> None:
    _submit(tmp_path, "5", explode)
    assert _run(tmp_path, "5") == 1
    outcome, trace = _result(tmp_path, "5_0_result.pkl")
    assert outcome == "error" and "ValueError: no luck" in trace
    assert not (tmp_path / "DONE-5").exists()


def test_resumable_stops_without_result_and_continuation_resumes(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    _submit(tmp_path, "5", Steps(str(marker)))
    write_pickle(tmp_path / "5_0_result.pkl", ("success", "left by an earlier run of job 5"))
    assert _interrupt(_start(tmp_path, "5"), marker) == EXIT_INTERRUPTED
    assert not (tmp_path / "5_0_result.pkl").exists() and not (tmp_path / "DONE-5").exists()
    saved = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert len(saved) == 1
    step = int(saved[0].removeprefix("step-"))
    assert int((tmp_path / "checkpoints" / "PROGRESS").read_text()) == step
    assert "stopped at step" in (tmp_path / "5_0_log.err").read_text()

    # The batch script continued the job as job 7: it finds the pickle through a link.
    chain = _event("5", "start") + _event(
        "5", "requeue", "preemption", "continued as job 7", how="continued", next="7"
    )
    (tmp_path / "chain-5.jsonl").write_text(chain)
    assert _run(tmp_path, "7", root="5") == 0
    link = tmp_path / "7_submitted.pkl"
    assert link.is_symlink() and os.readlink(link) == "5_submitted.pkl"
    assert _result(tmp_path, "7_0_result.pkl") == (
        "success",
        f"resumed at {step + 1}, ended at {step + 4}",
    )
    assert (tmp_path / "DONE-5").exists()


def test_checkpointable_pickles_its_state_for_the_next_run_only(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    _submit(tmp_path, "5", Counter(str(marker)))
    chain = _event("5", "start") + _event(
        "5", "requeue", "preemption", "continued as job 7", how="continued", next="7"
    )
    (tmp_path / "chain-5.jsonl").write_text(chain)
    assert _interrupt(_start(tmp_path, "7", root="5"), marker) == EXIT_INTERRUPTED
    mine = tmp_path / "7_submitted.pkl"
    assert not mine.is_symlink()
    assert utils.DelayedSubmission.load(mine).function.count > 0
    assert utils.DelayedSubmission.load(tmp_path / "5_submitted.pkl").function.count == 0
    assert not (tmp_path / "7_0_result.pkl").exists()


def test_missing_pickle_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcjobs.submitit import pickles

    monkeypatch.setattr(pickles, "PICKLE_WAIT_S", 0.1)
    with pytest.raises(RuntimeError, match="never appeared"):
        pickles.load_submission(tmp_path / "1_submitted.pkl")


def test_previous_run_follows_the_log(tmp_path: Path) -> None:
    text = (
        _event("5", "requeue", "preemption", "continued as job 7", checkpoint=1, next="7")
        + _event("7", "requeue", "timeout", "continued as job 70", checkpoint=3, next="70")
        + _event("70", "requeue", "preemption", "continued as job 9", next="9")
    )
    (tmp_path / "chain-5.jsonl").write_text(text)
    assert previous_run(tmp_path, "5", "7") == "5"
    assert previous_run(tmp_path, "5", "70") == "7"
    assert previous_run(tmp_path, "5", "9") == "70"
    assert previous_run(tmp_path, "5", "11") == "5"
    assert previous_run(tmp_path, "8", "9") == "8"  # no log: the root


def test_the_checkpoint_handler_writes_past_a_stream_in_mid_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The warning signal may come while the function writes to standard error: the handler's
    own lines go out with write(2), so it still checkpoints instead of failing on a reentrant
    write into Python's buffered stream."""
    from hpcjobs.runtime.resumable import Interrupted
    from hpcjobs.submitit.task import install_checkpoint_handler
    from tests.unit.test_standby import _StderrInUse

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR2, signal.SIGTERM)}
    delayed = utils.DelayedSubmission(Counter(str(tmp_path / "started")))
    handler = install_checkpoint_handler(delayed, tmp_path / "next.pkl", rank=0)
    raised: list[BaseException] = []

    def signal_arrives() -> None:
        try:
            handler(signal.SIGUSR2, None)
        except Interrupted as exc:
            raised.append(exc)

    try:
        monkeypatch.setattr("sys.stderr", _StderrInUse(signal_arrives))
        sys.stderr.write("the function's own line\n")
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)
    assert raised and (tmp_path / "next.pkl").exists()
    assert "SIGUSR2 received: checkpointing" in capfd.readouterr().err
