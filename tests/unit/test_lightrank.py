"""The light rank (hpcjobs/runtime/lightrank.py): its options, its state, its contracts with
the checkpoint folder and the progress folder, and its faults, run as the job runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcjobs.runtime import lightrank
from hpcjobs.runtime.checkpoint import CheckpointDir


def run(
    tmp_path: Path, *args: str, rank: int = 0, restart: int = 0
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "progress").mkdir(exist_ok=True)
    env = {
        "PATH": os.environ["PATH"],
        "RANK": str(rank),
        "HPCJOBS_RESTART_COUNT": str(restart),
        "HPCJOBS_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "HPCJOBS_PROGRESS_DIR": str(tmp_path / "progress"),
        "SLURMD_NODENAME": "n7",
    }
    return subprocess.run(
        [sys.executable, lightrank.__file__, *args, "--step-time", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_options_are_pairs_of_known_names() -> None:
    args = lightrank.parse_args(["--steps", "5", "--hang", "1:9:12", "--crash", "2:3:4"])
    assert (args.steps, args.step_time, args.checkpoint_every) == (5, 1.0, 10)
    assert args.fault(1, 9, 12) == "hang" and args.fault(2, 3, 4) == "crash"
    assert args.fault(0, 9, 12) == ""
    for bad in (
        ["--steps"],
        ["--step", "5"],
        [],
        ["--steps", "x"],
        ["--steps", "1", "--hang", "1:2"],
    ):
        with pytest.raises(ValueError):
            lightrank.parse_args(bad)


def test_a_bad_option_exits_2_with_the_usage(tmp_path: Path) -> None:
    proc = run(tmp_path, "--steps", "3", "--bogus", "1")
    assert proc.returncode == 2 and "unknown option '--bogus'" in proc.stderr
    assert "--steps N" in proc.stderr


def test_rank_0_checkpoints_and_finishes_with_the_expected_state(tmp_path: Path) -> None:
    proc = run(tmp_path, "--steps", "25")
    assert proc.returncode == 0, proc.stderr
    ckpt = CheckpointDir(tmp_path / "ckpt")
    assert ckpt.done_result() == {"steps": 25, "state": lightrank.expected_state(25)}
    assert [c.step for c in ckpt.checkpoints()] == [9, 19, 24]
    assert (tmp_path / "progress" / "rank-0").read_text().split()[0] == "24"


def test_a_crash_in_its_run_then_a_resume_ends_with_the_same_state(tmp_path: Path) -> None:
    crashed = run(tmp_path, "--steps", "30", "--crash", "0:0:15", "--crash-text", "NCCL WARN x")
    assert crashed.returncode == 1 and "NCCL WARN x" in crashed.stderr
    assert lightrank.newest_complete(str(tmp_path / "ckpt"), 1) == 9
    assert lightrank.newest_complete(str(tmp_path / "ckpt"), 0) is None  # saved by run 0
    again = run(tmp_path, "--steps", "30", "--crash", "0:0:15", restart=1)
    assert again.returncode == 0, again.stderr
    assert "from step 10" in again.stdout
    result = CheckpointDir(tmp_path / "ckpt").done_result()
    assert result == {"steps": 30, "state": lightrank.expected_state(30)}


def test_other_ranks_start_after_the_newest_complete_checkpoint(tmp_path: Path) -> None:
    assert run(tmp_path, "--steps", "20", "--crash", "0:0:12").returncode == 1
    (tmp_path / "ckpt" / "step-000000015").mkdir()  # no COMPLETE: not a checkpoint
    proc = run(tmp_path, "--steps", "12", rank=5, restart=1)
    assert proc.returncode == 0 and proc.stdout == ""
    assert (tmp_path / "progress" / "rank-5").read_text() == "11 n7\n"
    assert not (tmp_path / "progress" / "rank-5.log").exists()


def test_a_finished_chain_starts_no_step(tmp_path: Path) -> None:
    assert run(tmp_path, "--steps", "3").returncode == 0
    assert "already finished" in run(tmp_path, "--steps", "3").stdout
    assert run(tmp_path, "--steps", "3", rank=2).returncode == 0
    assert not (tmp_path / "progress" / "rank-2").exists()


def test_the_stop_signal_checkpoints_the_step_just_made(tmp_path: Path) -> None:
    (tmp_path / "progress").mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "RANK": "0",
        "HPCJOBS_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "HPCJOBS_PROGRESS_DIR": str(tmp_path / "progress"),
    }
    proc = subprocess.Popen(
        [sys.executable, lightrank.__file__, "--steps", "1000", "--step-time", "0.05"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # started
    progress = tmp_path / "progress" / "rank-0"
    while not progress.exists():
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR2)
    assert proc.wait(timeout=30) == 0
    ckpt = CheckpointDir(tmp_path / "ckpt")
    last = ckpt.latest()
    assert last is not None and not ckpt.is_done()
    assert last.step == int(progress.read_text().split()[0])
