"""Rank and rendezvous settings from srun, torchrun and plain environments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hpcjobs.runner import Result
from hpcjobs.runtime.distributed import (
    PORT_BASE,
    PORT_SPAN,
    from_environment,
    master_port,
    node_addr,
)


class FakeRunner:
    def __init__(self, stdout: str) -> None:
        self.stdout = stdout
        self.calls: list[list[str]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.calls.append(list(argv))
        return Result(tuple(argv), 0, self.stdout, "")


NODE = "NodeName=n1 Arch=x86_64 CoresPerSocket=4 NodeAddr=10.1.2.3 NodeHostName=n1 State=IDLE"


def test_master_port_from_job_id() -> None:
    assert master_port(123) == PORT_BASE + 123
    assert master_port("12345_7") == PORT_BASE + 12345 % PORT_SPAN
    assert PORT_BASE <= master_port("999999") < PORT_BASE + PORT_SPAN
    assert master_port(None) == PORT_BASE + 9500


def test_srun_environment_uses_node_addr() -> None:
    runner = FakeRunner(NODE)
    env = {
        "SLURM_JOB_ID": "77",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_NTASKS": "8",
        "SLURM_NODEID": "1",
        "SLURM_TASKS_PER_NODE": "4(x2)",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    info = from_environment(env, runner=runner)
    assert (info.rank, info.local_rank, info.world_size) == (5, 1, 8)
    assert (info.local_world_size, info.node_rank) == (4, 1)
    assert info.master_addr == "10.1.2.3"
    assert info.master_port == PORT_BASE + 77
    assert runner.calls == [["scontrol", "show", "node", "n1", "-o"]]


def test_torchrun_environment_wins() -> None:
    env = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "MASTER_ADDR": "10.0.0.9",
        "MASTER_PORT": "29400",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "2",
        "SLURM_JOB_ID": "5",
    }
    info = from_environment(env, runner=FakeRunner(""))
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.master_addr, info.master_port) == ("10.0.0.9", 29400)
    assert info.as_env()["RANK"] == "3"


def test_single_process() -> None:
    info = from_environment({}, runner=FakeRunner(""))
    assert (info.rank, info.world_size, info.master_addr) == (0, 1, "127.0.0.1")


def test_node_addr_falls_back_to_name() -> None:
    assert node_addr("n7", FakeRunner("")) == "n7"


def test_batch_script_port_matches_python() -> None:
    """The rendezvous port the batch script computes is the one Python code derives."""
    import subprocess

    from hpcjobs.script.render import master_port_expr

    for job_id in (7, 12345, 987654):
        out = subprocess.run(
            ["bash", "-c", f"echo {master_port_expr()}"],
            env={"SLURM_JOB_ID": str(job_id)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert int(out) == master_port(job_id)
