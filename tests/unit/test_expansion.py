"""Growing in place: the helper allocation's options, when a job may grow in place, and what
salloc says (hpcjobs.runtime.supervisor.expansion)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcjobs.runtime.supervisor import expansion
from hpcjobs.runtime.supervisor.expansion import Helper

ARGS = [
    "--job-name=train", "--partition=batch", "--nodes=2-3", "--ntasks-per-node=1",
    "--cpus-per-task=8", "--time=00:45:00", "--account=sandbox", "--qos=normal",
    "--output=/runs/slurm-%j.out", "--open-mode=append", "--signal=B:USR2@60", "--requeue",
    "--no-kill", "--exclude=n9",
]  # fmt: skip


def test_a_helper_asks_for_the_missing_nodes_with_the_jobs_own_resources() -> None:
    args = [*ARGS, "--licenses=fluent:2", "--tmp=100G"]
    argv = expansion.helper_args(args, "50", "batch", "1", ["n2", "n1"], 40)
    assert argv == [
        "--no-shell", "--dependency=expand:50", "--nodes=1", "--time=40", "--time-min=1",
        "--deadline=now+40minutes", "--partition=batch", "--job-name=train",
        "--ntasks-per-node=1", "--cpus-per-task=8", "--account=sandbox", "--qos=normal",
        "--tmp=100G", "--exclude=n2,n1,n9",
    ]  # fmt: skip
    # The partition the job runs in, not the list it was submitted to.
    listed = ["--partition=batch,urgent", "--nodes=2-3"]
    assert "--partition=urgent" in expansion.helper_args(listed, "50", "urgent", "1", [], 5)
    assert not any(
        a.startswith("--partition=batch")
        for a in expansion.helper_args(listed, "50", "urgent", "1", [], 5)
    )


def test_a_job_that_holds_gres_does_not_grow_in_place() -> None:
    config = "SchedulerParameters     = bf_continue,permit_job_expansion\n"
    cpu = "JobId=5 JobName=x\n   TRES=cpu=3,node=3,billing=3\n"
    gpu = "JobId=5\n   TRES=cpu=3,node=3,billing=3,gres/gpu=3\n   TresPerNode=gres:gpu:1\n"
    assert expansion.why_not(None, config, cpu) == ""
    assert "GPUs" in expansion.why_not(None, config, gpu)
    assert "GPUs" in expansion.why_not(True, "", gpu)
    # A job name is no field: "TRES=gres" in it does not count.
    assert expansion.why_not(None, config, "JobId=5 JobName=TRES=gres/gpu\n   TRES=cpu=3\n") == ""


def test_the_controller_or_the_site_decides() -> None:
    cpu = "   TRES=cpu=3,node=3\n"
    assert expansion.controller_permits("SchedulerParameters = permit_job_expansion\n")
    assert not expansion.controller_permits("SchedulerParameters = (null)\n")
    assert not expansion.controller_permits("")
    assert "does not permit" in expansion.why_not(None, "SchedulerParameters = (null)\n", cpu)
    assert expansion.why_not(True, "", cpu) == ""  # the site config says so: not asked
    assert "site config" in expansion.why_not(False, "permit_job_expansion", cpu)


def _salloc(script: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def test_a_helper_knows_its_id_at_once_and_is_granted_once_salloc_says_so() -> None:
    proc = _salloc(
        "import sys, time; sys.stderr.write('salloc: Pending job allocation 61\\n'); "
        "sys.stderr.flush(); time.sleep(0.5); "
        "sys.stderr.write('salloc: job 61 has been allocated resources\\n"
        "salloc: Granted job allocation 61\\n')"
    )
    helper = Helper.start(proc, timeout=10)
    assert helper.job == "61" and not helper.granted()
    proc.wait(10)
    helper._done.wait(10)
    assert helper.granted()


def test_salloc_that_fails_says_why() -> None:
    proc = _salloc(
        "import sys; sys.stderr.write('salloc: error: Job submit/allocate failed: "
        "Requested operation not supported on this system\\n'); sys.exit(1)"
    )
    with pytest.raises(RuntimeError, match="not supported"):
        Helper.start(proc, timeout=10)


def test_a_helper_cancelled_while_it_waits_is_not_granted() -> None:
    proc = _salloc(
        "import sys, time; sys.stderr.write('salloc: Pending job allocation 62\\n'); "
        "sys.stderr.flush(); time.sleep(30)"
    )
    helper = Helper.start(proc, timeout=10)
    helper.stop()
    proc.wait(10)
    helper._done.wait(10)
    assert helper.job == "62" and not helper.granted()
