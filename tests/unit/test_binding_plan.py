"""The per-rank binding plan: disjoint CPU shares, local memory, rail NICs."""

from __future__ import annotations

import pytest

from hpcjobs.config.cpulist import parse_cpulist
from hpcjobs.config.models import Topology
from hpcjobs.errors import BadInputError
from hpcjobs.script.binding import plan_binding, split_cpus

DGX = Topology.model_validate(
    {
        "bootstrap_interface": "bond0",
        "numa": [
            {"id": 0, "cpus": "0-55,112-167", "memory_node": 0, "gpus": [0, 1, 2, 3]},
            {"id": 1, "cpus": "56-111,168-223", "memory_node": 1, "gpus": [4, 5, 6, 7]},
        ],
        "nics": [
            *({"name": f"mlx5_{i}", "numa": i // 4, "gpus": [i]} for i in range(8)),
            {"name": "mlx5_8", "numa": 0, "gpus": [], "nccl": False},
        ],
    }
)

SANDBOX = Topology.model_validate(
    {
        "bootstrap_interface": "lo",
        "numa": [
            {"id": 0, "cpus": "0", "memory_node": 0, "gpus": [0, 1]},
            {"id": 1, "cpus": "1", "memory_node": 1, "gpus": [2, 3]},
        ],
        "nics": [
            {"name": "mlx5_0", "numa": 0, "gpus": [0, 1]},
            {"name": "mlx5_1", "numa": 1, "gpus": [2, 3]},
        ],
    }
)


def test_split_keeps_hyperthread_siblings_together() -> None:
    shares = split_cpus(parse_cpulist("0-55,112-167"), 4)
    assert shares[0] == [*range(0, 14), *range(112, 126)]
    assert shares[3] == [*range(42, 56), *range(154, 168)]
    assert sorted(c for share in shares for c in share) == parse_cpulist("0-55,112-167")


def test_split_uneven_and_scarce() -> None:
    assert split_cpus([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3, 4]]
    assert split_cpus([0, 2, 4, 6], 2) == [[0, 2], [4, 6]]  # runs shorter than parts: flat split
    assert split_cpus([5], 3) == [[5], [5], [5]]  # fewer CPUs than shares: all share
    assert split_cpus([3, 1, 2], 1) == [[1, 2, 3]]


def test_dgx_eight_ranks_get_disjoint_local_cores_and_their_rail() -> None:
    plan = plan_binding(DGX, topology_name="dgx-h100", gpus_per_node=8, ranks_per_node=8)
    assert plan.by_gpu and plan.gpus_per_rank == 1
    seen: set[int] = set()
    for rank in plan.ranks:
        gpu = rank.gpus[0]
        assert gpu == rank.local_rank
        domain = DGX.gpu_numa(gpu)
        assert set(rank.cpus) <= set(domain.cpu_ids)
        assert len(rank.cpus) == 28
        assert not seen & set(rank.cpus)
        seen |= set(rank.cpus)
        assert rank.memory_nodes == (domain.mem_node,)
        assert rank.nccl_ib_hca == f"=mlx5_{gpu}:1"
        assert rank.ucx_net_devices == f"mlx5_{gpu}:1"
        assert rank.cuda_visible_devices == str(gpu)
    assert plan.rank(0).cpulist == "0-13,112-125"
    assert plan.memory_nodes == (0, 1)
    assert all("mlx5_8:1" not in slot.nics for slot in plan.slots)


def test_two_gpus_per_rank_merge_slots() -> None:
    plan = plan_binding(DGX, topology_name="dgx-h100", gpus_per_node=8, ranks_per_node=4)
    rank = plan.rank(2)
    assert rank.gpus == (4, 5)
    assert rank.cuda_visible_devices == "4,5"
    assert rank.nics == ("mlx5_4:1", "mlx5_5:1")
    assert rank.memory_nodes == (1,)
    assert rank.cpulist == "56-83,168-195"


def test_sandbox_ranks_share_the_single_core_of_their_domain() -> None:
    plan = plan_binding(SANDBOX, topology_name="sandbox-node", gpus_per_node=4, ranks_per_node=4)
    assert [r.cpus for r in plan.ranks] == [(0,), (0,), (1,), (1,)]
    assert [r.memory_nodes for r in plan.ranks] == [(0,), (0,), (1,), (1,)]
    assert [r.nccl_ib_hca for r in plan.ranks] == ["=mlx5_0:1"] * 2 + ["=mlx5_1:1"] * 2


def test_nic_falls_back_to_the_domain_when_no_rail_lists_the_gpu() -> None:
    topo = Topology.model_validate(
        {
            "bootstrap_interface": "eth0",
            "numa": [{"id": 0, "cpus": "0-7", "gpus": [0, 1]}],
            "nics": [
                {"name": "mlx5_0", "numa": 0, "gpus": [], "port": 2},
                {"name": "eno1", "kind": "eth", "numa": 0, "gpus": [0, 1]},
            ],
        }
    )
    plan = plan_binding(topo, topology_name="t", gpus_per_node=2, ranks_per_node=2)
    assert plan.rank(0).nics == ("mlx5_0:2",)  # Ethernet NICs never go to NCCL_IB_HCA
    assert plan.rank(1).cpus == (4, 5, 6, 7)


def test_cpu_job_spreads_ranks_over_domains() -> None:
    plan = plan_binding(DGX, topology_name="dgx-h100", gpus_per_node=0, ranks_per_node=4)
    assert not plan.by_gpu
    assert [r.memory_nodes for r in plan.ranks] == [(0,), (0,), (1,), (1,)]
    assert plan.rank(0).cpulist == "0-27,112-139"
    assert plan.rank(3).cpulist == "84-111,196-223"
    assert all(r.gpus == () and r.nics == () for r in plan.ranks)


def test_uneven_gpu_share_and_missing_gpus_are_refused() -> None:
    with pytest.raises(BadInputError, match="shared evenly"):
        plan_binding(DGX, topology_name="dgx-h100", gpus_per_node=8, ranks_per_node=3)
    with pytest.raises(BadInputError, match="lists 4 GPUs"):
        plan_binding(SANDBOX, topology_name="sandbox-node", gpus_per_node=8, ranks_per_node=8)
