"""The supervisor's pure readers and writers of text: srun's reports, a successor's options."""

from __future__ import annotations

import pytest

from hpcjobs.runtime.supervisor.nodes import NODE_FAILED
from hpcjobs.runtime.supervisor.srunlog import (
    failed_hostlists,
    first_failure,
    has_node_failure,
    launch_failure,
)
from hpcjobs.runtime.supervisor.successor import successor_args, successor_env

STDERR = """hpcjobs: run 0 of job 7
10:00:00 hpcjobs[7]: run 0 of chain 7; no checkpoint yet
srun: error: n2: tasks 4-7: Exited with exit code 1
srun: error: n1: task 0: Terminated
srun: error: Node failure on n[3-4]
srun: error: Node failure on n5 and more words
"""


def test_the_first_failure_is_the_first_task_srun_reported() -> None:
    failure = first_failure(STDERR)
    assert failure is not None
    assert (failure.node, failure.tasks, failure.first_task) == ("n2", "4-7", "4")
    assert failure.what == "Exited with exit code 1"
    assert first_failure("srun: error: Unable to create step\n") is None


def test_a_launch_failure_names_its_node_and_keeps_srun_s_reason() -> None:
    text = "srun: error: Task launch for StepId=12.3 failed on node gpu-007: Communication "
    text += "connection failure\n"
    found = launch_failure(STDERR + text)
    assert found is not None and found.node == "gpu-007"
    assert found.line.endswith("failed on node gpu-007: Communication connection failure")
    assert launch_failure(STDERR) is None


def test_failed_nodes_after_the_runs_marker_only() -> None:
    assert failed_hostlists(STDERR, "7") == ["n[3-4]"]
    assert failed_hostlists(STDERR, "8") == []  # another job's marker
    assert has_node_failure(STDERR) and not has_node_failure("srun: error: n1: task 0: Killed")


def test_a_successor_keeps_the_jobs_options_but_the_one_shot_ones() -> None:
    args = ["--job-name=x", "--array=0-9", "-d", "afterok:1", "--nodes=2", "-a3"]
    args += ["--output=/o/slurm-%j.out", "--error=/o/%A.err", "--exclude=n9", "--comment=t"]
    got = successor_args(args, "100_3", ["n2"], "3", "hpcjobs:tok")
    assert got == [
        "--job-name=x",
        "--nodes=2",
        "--output=/o/slurm-100_3.out",
        "--error=/o/100.err",
        "--exclude=n2,n9",
        "--array=3",
        "--comment=hpcjobs:tok",
    ]
    assert successor_args(["--nodes=1"], "5", [], "", "(null)") == ["--nodes=1"]


def test_a_successors_environment_has_none_of_this_jobs_slurm_settings() -> None:
    env = {"SLURM_JOB_ID": "5", "SLURM_CONF": "/etc/slurm.conf", "SBATCH_X": "1", "HOME": "/h"}
    env["HPCJOBS_STANDBY_FOR"] = "4"
    clean = successor_env(env, "1", "")
    assert clean == {"SLURM_CONF": "/etc/slurm.conf", "HOME": "/h", "HPCJOBS_CHAIN_ROOT": "1"}
    assert successor_env(env, "1", "5")["HPCJOBS_STANDBY_FOR"] == "5"


@pytest.mark.parametrize(
    ("state", "failed"),
    [
        ("down", True),
        ("down*", True),
        ("drained", True),
        ("drained*", True),
        ("fail", True),
        ("failing", True),
        ("allocated*", False),  # only not responding: busy, not failed
        ("mixed*", False),
        ("idle*", False),
        ("draining", False),  # still runs what it has
        ("allocated", False),
        ("completing", False),
    ],
)
def test_a_node_failed_when_slurm_says_so_not_when_it_missed_a_ping(
    state: str, failed: bool
) -> None:
    assert bool(NODE_FAILED.search(state)) is failed
