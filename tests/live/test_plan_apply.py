"""`hpcjobs plan --apply` writes a job file that `hpcjobs submit -f ... --wait` runs on the sandbox.

The sandbox's GPUs are fake: the job is torchrun on one node of 4 "GPUs", each worker printing
the planned layout's variables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).absolute().parent
PYTHON = str(VENV_BIN / "python")
TORCHRUN = str(VENV_BIN / "torchrun")

# One write(2) per rank: four workers share the job's stdout, and an unbuffered print()
# writes each of its pieces separately, so lines from different ranks would interleave.
PRINT_PLAN = (
    "import os; os.write(1, ('PLAN ' + os.environ['RANK'] + ' ' + ' '.join(k + '=' + "
    "os.environ[k] for k in sorted(os.environ) if k.startswith('HPCJOBS_PLAN_')) + "
    "'\\n').encode())"
)

pytestmark = pytest.mark.slurm


def test_applied_plan_submits_and_runs(shared_tmp: Path, slurm_env: dict[str, str]) -> None:
    env = {**os.environ, **slurm_env}
    hpcjobs = [sys.executable, "-m", "hpcjobs", "--site", "sandbox"]
    job = shared_tmp / "job.yaml"
    plan = subprocess.run(
        [*hpcjobs, "plan", "--params", "1B", "--seq-len", "1024", "--tokens", "1B",
         "--global-batch", "16", "--gpus", "4", "--json", "--apply", str(job),
         "-J", "planned-live", "--", PYTHON, "-c", PRINT_PLAN],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    chosen = json.loads(plan.stdout)["layouts"][0]
    out = shared_tmp / "out"
    out.mkdir(mode=0o755)
    submit = subprocess.run(
        [*hpcjobs, "submit", "-f", str(job), "--wait", "--json", "-t", "5:00",
         "--torchrun", TORCHRUN, "--output-dir", str(out)],
        env=env, cwd=shared_tmp, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    print(submit.stdout[-2000:], submit.stderr[-2000:], sep="\n")
    assert submit.returncode == 0, submit.stderr
    job_id = json.loads(submit.stdout)["job_id"]
    log = "".join(p.read_text() for p in out.glob(f"slurm-{job_id}*.out"))
    lines = sorted(line for line in log.splitlines() if line.startswith("PLAN "))
    assert [line.split()[1] for line in lines] == ["0", "1", "2", "3"], log[-3000:]
    expected = (
        f"HPCJOBS_PLAN_DP={chosen['dp']} HPCJOBS_PLAN_GLOBAL_BATCH=16 "
        f"HPCJOBS_PLAN_MICRO_BATCH={chosen['micro_batch']} HPCJOBS_PLAN_PP={chosen['pp']} "
        f"HPCJOBS_PLAN_PRECISION=bf16 HPCJOBS_PLAN_RECOMPUTE={chosen['recompute']} "
        f"HPCJOBS_PLAN_SEQ_LEN=1024 HPCJOBS_PLAN_SP={int(chosen['sequence_parallel'])} "
        f"HPCJOBS_PLAN_TP={chosen['tp']} HPCJOBS_PLAN_ZERO={chosen['zero']}"
    )
    for line in lines:
        assert line.split(" ", 2)[2] == expected


def test_plan_from_a_real_run(shared_tmp: Path, slurm_env: dict[str, str]) -> None:
    """A finished run of the DDP example is timed from its checkpoints and planned at its speed."""
    env = {**os.environ, **slurm_env}
    hpcjobs = [sys.executable, "-m", "hpcjobs", "--site", "sandbox"]
    out = shared_tmp / "from-run"
    out.mkdir(mode=0o755)
    train = str(Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py")
    submit = subprocess.run(
        [*hpcjobs, "submit", "--wait", "-J", "plan-from-run", "-N", "1", "--gpus-per-node", "2",
         "-t", "5:00", "--output-dir", str(out), "--", PYTHON, train, "--steps", "40",
         "--step-time", "0.05", "--checkpoint-every", "10"],
        env=env, cwd=shared_tmp, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stderr
    job_id = submit.stdout.split()[0]
    plan = subprocess.run(
        [*hpcjobs, "plan", "--from-run", job_id, "--params", "2372", "--seq-len", "1",
         "--tokens", "1e6", "--global-batch", "32", "--gpus", "4", "--json",
         "--layout", "tp=1,pp=1", "--zero", "0", "--recompute", "none"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    measured = data["from_run"]
    print(f"\nrun {job_id}: {measured['step_s'] * 1000:.1f} ms per step ({measured['timed_by']})")
    # 50 ms of simulated work per step, plus a little: the timing is the run's own.
    assert 0.05 <= measured["step_s"] < 1.0
    assert measured["gpus"] == 2 and measured["steps_timed"] >= 10
    # Twice the GPUs for the same global batch: half the compute per step.
    step = data["layouts"][0]["step_s"]
    assert step["compute"] == pytest.approx(measured["step_s"] / 2, rel=0.05)
