"""Rank and rendezvous settings from srun, torchrun and plain environments."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.runtime.distributed import (
    PORT_BASE,
    PORT_SPAN,
    accumulation_scale,
    from_environment,
    leave_process_group,
    master_port,
    micro_batches,
)


def test_master_port_from_job_id() -> None:
    assert master_port(123) == PORT_BASE + 123
    assert master_port("12345_7") == PORT_BASE + 12345 % PORT_SPAN
    assert PORT_BASE <= master_port("999999") < PORT_BASE + PORT_SPAN
    assert master_port(None) == PORT_BASE + 9500


SRUN = {
    "SLURM_JOB_ID": "77",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_NODEID": "1",
    "SLURM_TASKS_PER_NODE": "4(x2)",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
}


def test_srun_environment_takes_the_scripts_master_addr() -> None:
    info = from_environment({**SRUN, "MASTER_ADDR": "10.1.2.3"})
    assert (info.rank, info.local_rank, info.world_size) == (5, 1, 8)
    assert (info.local_world_size, info.node_rank) == (4, 1)
    assert info.master_addr == "10.1.2.3"
    assert info.master_port == PORT_BASE + 77


def test_several_nodes_without_master_addr_are_refused_with_the_fix() -> None:
    with pytest.raises(BadInputError) as info:
        from_environment(SRUN)
    assert "several nodes" in info.value.message
    assert info.value.hint is not None and "scontrol show hostnames" in info.value.hint


def test_one_node_rendezvous_on_loopback() -> None:
    env = {**SRUN, "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "n1"}
    assert from_environment(env).master_addr == "127.0.0.1"
    # A one-node step inside a larger allocation: its ranks all share this node.
    assert from_environment({**SRUN, "SLURM_STEP_NUM_NODES": "1"}).master_addr == "127.0.0.1"


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
    info = from_environment(env)
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size) == (3, 1, 4, 2)
    assert (info.master_addr, info.master_port) == ("10.0.0.9", 29400)
    assert info.as_env()["RANK"] == "3"


def test_single_process() -> None:
    info = from_environment({})
    assert (info.rank, info.world_size, info.master_addr) == (0, 1, "127.0.0.1")


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


def test_leave_process_group_meets_then_destroys(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dist = pytest.importorskip("torch.distributed")
    leave_process_group()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        calls: list[str] = []
        real_barrier, real_destroy = dist.barrier, dist.destroy_process_group
        monkeypatch.setattr(dist, "barrier", lambda: calls.append("barrier") or real_barrier())
        monkeypatch.setattr(
            dist, "destroy_process_group", lambda: calls.append("destroy") or real_destroy()
        )
        leave_process_group()
        assert calls == ["barrier", "destroy"]
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---- the same global batch at any world size --------------------------------------------------


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_every_micro_batch_is_taken_once_at_any_world_size(world: int) -> None:
    taken = [i for rank in range(world) for i in micro_batches(4, rank, world)]
    assert sorted(taken) == [0, 1, 2, 3]
    # DDP's mean over the ranks of each rank's scaled sum is the mean over all micro-batches.
    scale = accumulation_scale(4, world)
    per_rank = [scale * sum(micro_batches(4, rank, world)) for rank in range(world)]
    assert sum(per_rank) / world == pytest.approx(sum(range(4)) / 4)


@pytest.mark.parametrize(("total", "rank", "world"), [(2, 0, 3), (4, 4, 4), (4, 0, 0)])
def test_micro_batches_refuse_a_rank_without_one(total: int, rank: int, world: int) -> None:
    with pytest.raises(ValueError):
        micro_batches(total, rank, world)
