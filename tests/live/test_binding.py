"""Per-rank binding on the sandbox: 2 nodes x 4 GPUs with srun, every task matches the plan."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.jobs.supervisorapp import write_supervisor
from hpcjobs.runner import LocalRunner
from hpcjobs.script.jobspec import JobSpec, RequeuePolicy
from hpcjobs.script.render import RenderedJob, render_job

PYTHON = str(Path(sys.executable).absolute().parent / "python")

#: Each rank prints what it really got: affinity, memory policy, GPUs, NICs, rank variables.
REPORT = r"""
import json, os, subprocess, sys
show = subprocess.run(["numactl", "--show"], capture_output=True, text=True).stdout
policy = dict(line.split(":", 1) for line in show.splitlines() if ":" in line)
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR",
        "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "NCCL_IB_HCA", "UCX_NET_DEVICES",
        "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURMD_NODENAME",
        "HPCJOBS_CHECKPOINT_DIR", "HPCJOBS_RESTART_COUNT", "HPCJOBS_SIGNAL"]
report = {k: os.environ.get(k) for k in keys}
report["affinity"] = sorted(os.sched_getaffinity(0))
report["membind"] = policy.get("membind", "").split()
report["policy"] = policy.get("policy", "").strip()
with open(os.path.join(sys.argv[1], "report-%s.json" % os.environ["RANK"]), "w") as f:
    json.dump(report, f)
"""

#: A name full of shell syntax: it must reach Slurm byte for byte and execute nothing.
NASTY_NAME = "bind test $(touch /tmp/hpcjobs-pwned) 'q' \"d\" #1 ü*"


def submit(rendered: RenderedJob, folder: Path, slurm_env: dict[str, str]) -> str:
    script = folder / "job.sh"
    script.write_text(rendered.script, encoding="utf-8")
    assert rendered.supervisor is not None
    write_supervisor(rendered.supervisor)  # what 'hpcjobs submit' does before sbatch
    runner = LocalRunner(env=slurm_env)
    out = runner.run(["sbatch", "--parsable", *rendered.sbatch_args, str(script)]).stdout
    return out.strip().split(";")[0]


def wait_done(job_id: str, slurm_env: dict[str, str], timeout: float = 50) -> None:
    runner = LocalRunner(env=slurm_env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = runner.run(["squeue", "-h", "-j", job_id, "-o", "%T"], check=False).stdout
        if not out.strip():
            return
        time.sleep(0.3)
    runner.run(["scancel", job_id], check=False)
    pytest.fail(f"job {job_id} did not finish within {timeout} s")


def reports(folder: Path) -> list[dict[str, object]]:
    """The per-rank reports the job wrote (one file each: ranks' stdout may interleave)."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("report-*"))]


def test_srun_binding_matches_plan(shared_tmp: Path, slurm_env: dict[str, str]) -> None:
    site = load_site("sandbox")
    reporter = shared_tmp / "report.py"
    reporter.write_text(REPORT, encoding="utf-8")
    spec = JobSpec(
        name=NASTY_NAME,
        nodes=2,
        gpus_per_node=4,
        launcher="srun",
        time="00:05:00",
        output_dir=str(shared_tmp),
        requeue=RequeuePolicy(lead_time=30),
        command=[PYTHON, str(reporter), str(shared_tmp)],
    )
    rendered = render_job(spec, site)
    plan = rendered.binding
    assert plan is not None and plan.by_gpu
    job_id = submit(rendered, shared_tmp, slurm_env)
    wait_done(job_id, slurm_env)
    log = shared_tmp / f"slurm-{job_id}.out"
    rows = reports(shared_tmp)
    assert len(rows) == 8, log.read_text(encoding="utf-8")
    assert not Path("/tmp/hpcjobs-pwned").exists()

    port = str(20000 + int(job_id) % 20000)
    matched = 0
    # Block distribution: ranks 0-3 on the allocation's first node, 4-7 on its second (which
    # two nodes is the scheduler's choice).
    first, second = sorted({str(row["SLURMD_NODENAME"]) for row in rows})
    for row in rows:
        rank = int(str(row["RANK"]))
        local = rank % 4
        expected = plan.rank(local)
        assert row["SLURM_PROCID"] == str(rank)
        assert row["LOCAL_RANK"] == str(local)
        assert row["WORLD_SIZE"] == "8" and row["LOCAL_WORLD_SIZE"] == "4"
        assert row["NODE_RANK"] == str(rank // 4)
        assert row["SLURMD_NODENAME"] == (first if rank < 4 else second)
        assert row["MASTER_ADDR"] == "127.0.0.1"  # the first node's NodeAddr, not its name
        assert row["MASTER_PORT"] == port
        assert row["CUDA_VISIBLE_DEVICES"] == expected.cuda_visible_devices
        assert row["NCCL_IB_HCA"] == expected.nccl_ib_hca
        assert row["UCX_NET_DEVICES"] == expected.ucx_net_devices
        assert row["affinity"] == list(expected.cpus)
        assert row["policy"] == "bind"
        assert row["membind"] == [str(n) for n in expected.memory_nodes]
        assert row["SLURM_JOB_NAME"] == NASTY_NAME
        assert row["HPCJOBS_CHECKPOINT_DIR"] == os.path.join(shared_tmp, "checkpoints")
        assert row["HPCJOBS_RESTART_COUNT"] == "0"
        assert row["HPCJOBS_SIGNAL"] == "USR2"
        matched += 1
    assert matched == 8
    assert sorted(int(str(r["RANK"])) for r in rows) == list(range(8))
    # GPUs 0,1 sit on NUMA 0 (CPU 0, NIC mlx5_0), GPUs 2,3 on NUMA 1 (CPU 1, NIC mlx5_1).
    assert [plan.rank(i).cpus for i in range(4)] == [(0,), (0,), (1,), (1,)]
    assert [plan.rank(i).nccl_ib_hca for i in range(4)] == ["=mlx5_0:1"] * 2 + ["=mlx5_1:1"] * 2


#: Handles the warning signal once per rank, then exits 3 (as a checkpointing app would).
ON_SIGNAL = r"""
import os, signal, sys, time
out = sys.argv[1]
def handler(sig, frame):
    with open(os.path.join(out, "got-%s" % os.environ["RANK"]), "a") as f:
        f.write(signal.Signals(sig).name + "\n")
    sys.exit(3)
signal.signal(signal.SIGUSR2, handler)
open(os.path.join(out, "started-%s" % os.environ["RANK"]), "w").close()
time.sleep(60)
"""


def test_warning_signal_reaches_every_rank_once(
    shared_tmp: Path, slurm_env: dict[str, str]
) -> None:
    program = shared_tmp / "on_signal.py"
    program.write_text(ON_SIGNAL, encoding="utf-8")
    spec = JobSpec(
        name="signal-forward",
        nodes=2,
        gpus_per_node=1,
        launcher="srun",
        time="00:05:00",
        output_dir=str(shared_tmp),
        requeue=RequeuePolicy(lead_time=30),
        command=[PYTHON, str(program), str(shared_tmp)],
    )
    job_id = submit(render_job(spec, load_site("sandbox")), shared_tmp, slurm_env)
    deadline = time.monotonic() + 30
    while len(list(shared_tmp.glob("started-*"))) < 2:
        assert time.monotonic() < deadline, "ranks did not start"
        time.sleep(0.2)
    runner = LocalRunner(env=slurm_env)
    runner.run(["scancel", "--batch", "--signal=USR2", job_id])
    wait_done(job_id, slurm_env, timeout=30)
    for rank in (0, 1):
        assert (shared_tmp / f"got-{rank}").read_text(encoding="utf-8") == "SIGUSR2\n"
    log = (shared_tmp / f"slurm-{job_id}.out").read_text(encoding="utf-8")
    assert "SIGUSR2 received (the warning): delivering it" in log
    # The warning signal means "checkpoint and come back": the job continues as a new job
    # (whatever the program's exit code), which this test does not need to run.
    match = re.search(r"continuing as job (\d+)", log)
    assert match, log
    runner.run(["scancel", match.group(1)], check=False)
