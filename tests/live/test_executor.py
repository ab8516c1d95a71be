"""hpcjobs.executor on the sandbox: every rank's binding, arrays, and DDP preempted once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import hpcjobs
from hpcjobs.cli import cli
from hpcjobs.runner import LocalRunner
from hpcjobs.submitit.executor import HpcExecutor
from hpcjobs.submitit.hpcjob import HpcJob

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).absolute().parent
PYTHON = str(VENV_BIN / "python")
TORCHRUN = str(VENV_BIN / "torchrun")


@pytest.fixture
def slurm_environ(
    slurm_env: dict[str, str], shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """Slurm's commands (ours and submitit's sacct polling) talk to the test sandbox."""
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(shared_tmp / "state"))
    yield slurm_env


def _executor(folder: Path, **params: Any) -> HpcExecutor:
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "examples")])}
    env.update(params.pop("env", {}))
    return hpcjobs.executor(
        "sandbox", folder=folder, python=PYTHON, time="00:05:00", env=env, **params
    )


def _wait(job: HpcJob[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            logs = "\n".join(
                p.read_text(errors="replace")[-3000:]
                for p in sorted(job.paths.folder.glob("slurm-*.out"))
            )
            pytest.fail(f"job {job.job_ids} did not finish within {timeout} s:\n{logs}")
        time.sleep(0.5)


def _final_state(job: HpcJob[Any], timeout: float = 20) -> str:
    """The job's state once accounting has caught up with its end."""
    deadline = time.monotonic() + timeout
    state = job.state
    while state in ("RUNNING", "COMPLETING", "PENDING") and time.monotonic() < deadline:
        time.sleep(0.5)
        state = job.state
    return state


def where_am_i() -> dict[str, Any]:
    """What a rank sees: who it is and where it was placed."""
    import submitit

    env = submitit.JobEnvironment()
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA")
    return {
        "task": env.global_rank,
        "hostname": socket.gethostname(),
        "node": os.environ.get("SLURMD_NODENAME"),
        "affinity": sorted(os.sched_getaffinity(0)),
        **{key: os.environ.get(key) for key in keys},
    }


def square(x: int) -> dict[str, Any]:
    return {"value": x * x, "checkpoints": os.environ.get("HPCJOBS_CHECKPOINT_DIR")}


def test_every_rank_gets_its_binding(shared_tmp: Path, slurm_environ: dict[str, str]) -> None:
    ex = _executor(shared_tmp / "runs", nodes=2, gpus_per_node=4)
    plan = ex.render().binding
    assert plan is not None and plan.by_gpu
    job = ex.submit(where_am_i)
    assert isinstance(job, HpcJob) and job.num_tasks == 8
    _wait(job, timeout=60)
    rows = job.results()
    assert [row["task"] for row in rows] == list(range(8))
    # Block distribution over the two nodes the scheduler picked.
    first, second = sorted({str(row["node"]) for row in rows})
    for row in rows:
        rank = row["task"]
        expected = plan.rank(rank % 4)
        assert row["RANK"] == str(rank) and row["WORLD_SIZE"] == "8"
        assert row["LOCAL_RANK"] == str(rank % 4)
        assert row["node"] == (first if rank < 4 else second)
        assert row["hostname"] == socket.gethostname()  # all sandbox nodes are this host
        assert row["CUDA_VISIBLE_DEVICES"] == expected.cuda_visible_devices
        assert row["affinity"] == list(expected.cpus)
        assert row["NCCL_IB_HCA"] == expected.nccl_ib_hca
    assert job.result() == rows[0]  # several tasks: result() is global rank 0's
    assert _final_state(job) == "COMPLETED"
    assert job.chain().final is not None and job.chain().final.cause == "finish"


def test_map_array_tasks_have_their_own_checkpoints(
    shared_tmp: Path, slurm_environ: dict[str, str]
) -> None:
    ex = _executor(shared_tmp / "runs", gpus_per_node=0)
    jobs = ex.map_array(square, [2, 3, 4])
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_{i}" for i in range(3)]
    with ex.batch():
        batched = [ex.submit(square, 5), ex.submit(square, 6)]
    for job in [*jobs, *batched]:
        assert isinstance(job, HpcJob)
        _wait(job, timeout=60)
    results = [job.result() for job in jobs]
    assert [r["value"] for r in results] == [4, 9, 16]
    assert [job.result()["value"] for job in batched] == [25, 36]
    for job, result in zip(jobs, results, strict=True):
        assert isinstance(job, HpcJob) and job.checkpoint_dir is not None
        assert Path(result["checkpoints"]) == job.checkpoint_dir


def test_ddp_preempted_once_ends_with_the_uninterrupted_digest(
    shared_tmp: Path, slurm_environ: dict[str, str]
) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        import submitit_ddp
    finally:
        sys.path.remove(str(REPO / "examples"))
    steps = 40
    # The uninterrupted run: the CLI example on 2 local ranks, same steps, no Slurm.
    reference = subprocess.Popen(
        [
            TORCHRUN,
            "--standalone",
            "--nproc-per-node=2",
            str(REPO / "examples" / "ddp_train.py"),
            f"--steps={steps}",
            "--step-time=0",
            f"--checkpoint-dir={shared_tmp / 'reference'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    ex = _executor(shared_tmp / "runs", nodes=2, gpus_per_node=1, env={"OMP_NUM_THREADS": "1"})
    job = ex.submit(submitit_ddp.Train(steps=steps, step_time=0.25, checkpoint_every=5))
    assert isinstance(job, HpcJob) and job.checkpoint_dir is not None
    progress = job.checkpoint_dir / "PROGRESS"
    deadline = time.monotonic() + 60
    while not (progress.exists() and int(progress.read_text() or 0) >= 8):
        assert time.monotonic() < deadline and not job.done(), job.stderr()
        time.sleep(0.2)

    urgent = LocalRunner(env=slurm_environ).run(
        [
            "sbatch",
            "--parsable",
            "--partition=urgent",
            "--exclusive",
            "--nodes=3",
            "--account=sandbox",
            "--time=1",
            f"--output={shared_tmp}/urgent-%j.out",
            "--wrap=sleep 3",
        ]
    )
    assert urgent.stdout.strip()
    _wait(job, timeout=90)
    digest = job.result()

    out, _ = reference.communicate(timeout=120)
    assert reference.returncode == 0, out
    assert f"final weights digest {digest}" in out

    assert len(job.job_ids) == 2 and job.job_ids[0] == job.job_id
    assert _final_state(job) == "COMPLETED"
    [cut] = job.chain().interruptions()
    assert cut.cause == "preemption" and cut.resumed_job_id == job.job_ids[1]
    assert cut.resumed_from is not None and cut.resumed_from == cut.checkpoint_at_stop
    assert cut.steps_lost is not None and cut.steps_lost <= 1
    assert "resumed from checkpoint step" in (job.stdout() or "")
    assert os.readlink(ex.folder / f"{job.job_ids[1]}_submitted.pkl") == (
        f"{job.job_id}_submitted.pkl"
    )
    # The command line follows the same chain from the first id.
    shown = CliRunner().invoke(cli, ["history", job.job_id])
    assert shown.exit_code == 0, shown.output
    assert "preemption" in shown.output and all(i in shown.output for i in job.job_ids)


def test_an_executor_job_is_submitted_as_submit_does(
    shared_tmp: Path, slurm_environ: dict[str, str]
) -> None:
    """The executor and 'hpcjobs submit' share one use case: the checkpoint folder is
    claimed (its RUN file names the job), the record is written, and 'history' and 'report'
    know the job."""
    ex = _executor(shared_tmp / "runs", gpus_per_node=0)
    job = ex.submit(square, 7)
    assert isinstance(job, HpcJob) and job.checkpoint_dir is not None
    run_file = job.checkpoint_dir / "RUN"
    claimed = json.loads(run_file.read_text())
    assert claimed["job_ids"] == [job.job_id] and claimed["fingerprint"]
    assert run_file.stat().st_mode & 0o777 == 0o600
    _wait(job, timeout=60)
    assert job.result()["value"] == 49
    assert _final_state(job) == "COMPLETED"
    runner = CliRunner()
    history = runner.invoke(cli, ["history", "--json", job.job_id])
    assert history.exit_code == 0, history.output
    assert job.job_id in history.output and "COMPLETED" in history.output
    report = runner.invoke(cli, ["report", "--json", job.job_id])
    assert report.exit_code == 0, report.output
    assert json.loads(report.output)
