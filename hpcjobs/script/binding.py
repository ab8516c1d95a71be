"""Per-rank placement: which GPUs, CPUs, memory node and NICs each rank of a node gets.

The plan is computed from the site topology when the script is rendered and baked into it as
a small lookup table; the script then applies it on the compute node with ``numactl`` (or
``taskset``), so hpcjobs need not be installed there.

Rules:

* GPU jobs: local rank ``k`` drives GPUs ``k*g .. k*g+g-1`` of the node's allocation
  (``g`` = GPUs per rank). Each GPU owns a slice of the CPUs of its NUMA domain: the domain's
  CPUs are split evenly among the domain's GPUs, so no two ranks share cores when the domain
  has at least one core per GPU; otherwise the GPUs of the domain share all of its CPUs.
  Memory is bound to the domain's memory node, and the rank's NICs are the ones on its GPU's
  rail (else the NCCL NICs of its NUMA domain).
* CPU jobs: ranks are spread over the NUMA domains in order, and the CPUs of a domain are split
  among the ranks placed on it.

Contiguous runs of the cpulist (for example the cores ``0-55`` and their hyperthreads
``112-167``) are split separately, so a rank gets a core together with its sibling thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from hpcjobs.config.cpulist import format_cpulist
from hpcjobs.config.models import Nic, NumaDomain, Topology
from hpcjobs.errors import BadInputError


class Slot(NamedTuple):
    """What one GPU (GPU jobs) or one local rank (CPU jobs) is bound to."""

    key: int
    numa: int
    memory_node: int
    cpus: tuple[int, ...]
    nics: tuple[str, ...]

    @property
    def cpulist(self) -> str:
        """The CPUs in cpulist syntax (``0-13,112-125``)."""
        return format_cpulist(self.cpus)


class RankBinding(NamedTuple):
    """The placement of one local rank."""

    local_rank: int
    gpus: tuple[int, ...]
    cpus: tuple[int, ...]
    memory_nodes: tuple[int, ...]
    nics: tuple[str, ...]

    @property
    def cpulist(self) -> str:
        """The CPUs in cpulist syntax."""
        return format_cpulist(self.cpus)

    @property
    def cuda_visible_devices(self) -> str:
        """``CUDA_VISIBLE_DEVICES`` for the rank (its GPUs, comma-separated)."""
        return ",".join(str(gpu) for gpu in self.gpus)

    @property
    def nccl_ib_hca(self) -> str:
        """``NCCL_IB_HCA`` for the rank: an exact-match list such as ``=mlx5_0:1``."""
        return "=" + ",".join(self.nics) if self.nics else ""

    @property
    def ucx_net_devices(self) -> str:
        """``UCX_NET_DEVICES`` for the rank, such as ``mlx5_0:1``."""
        return ",".join(self.nics)


class BindingPlan(NamedTuple):
    """The placement of every local rank of a node.

    ``by_gpu`` tells how the script looks a rank up: by the GPUs Slurm gave it (``slots`` keyed
    by GPU index) or, for CPU jobs, by local rank (``slots`` keyed by local rank). ``ranks`` is
    the resulting placement when a job gets the node's GPUs in order, for display and tests.
    """

    topology: str
    by_gpu: bool
    gpus_per_rank: int
    ranks_per_node: int
    slots: tuple[Slot, ...]
    ranks: tuple[RankBinding, ...]

    @property
    def memory_nodes(self) -> tuple[int, ...]:
        """Every memory node some rank binds to, ascending."""
        return tuple(sorted({slot.memory_node for slot in self.slots}))

    @property
    def has_nics(self) -> bool:
        """Whether any rank gets NICs of its own."""
        return any(slot.nics for slot in self.slots)

    def rank(self, local_rank: int) -> RankBinding:
        """The placement of ``local_rank``."""
        return self.ranks[local_rank]


def plan_binding(
    topology: Topology,
    *,
    topology_name: str,
    gpus_per_node: int,
    ranks_per_node: int,
) -> BindingPlan:
    """Plan the placement of ``ranks_per_node`` ranks on one node of ``topology``.

    Args:
        topology: The node layout from the site config.
        topology_name: Its name, for messages and comments.
        gpus_per_node: GPUs the job uses per node (0 for CPU jobs).
        ranks_per_node: Processes per node.

    Returns:
        The plan.

    Raises:
        BadInputError: The GPUs cannot be shared out evenly among the ranks, or the topology
            lists fewer GPUs than the job uses.
    """
    if ranks_per_node < 1:
        raise BadInputError("a binding plan needs at least one rank per node")
    if gpus_per_node > 0:
        return _plan_gpus(topology, topology_name, gpus_per_node, ranks_per_node)
    return _plan_cpus(topology, topology_name, ranks_per_node)


def _plan_gpus(topology: Topology, name: str, gpus: int, ranks: int) -> BindingPlan:
    node_gpus = topology.gpu_ids
    if len(node_gpus) < gpus:
        raise BadInputError(
            f"topology {name!r} lists {len(node_gpus)} GPUs, but the job uses {gpus} per node",
            hint="list every GPU of the node under the topology's numa[].gpus",
        )
    if gpus % ranks:
        raise BadInputError(
            f"{gpus} GPUs per node cannot be shared evenly among {ranks} ranks per node",
            hint="use a number of tasks per node that divides the GPUs, or --no-bind",
        )
    per_rank = gpus // ranks
    slots: list[Slot] = []
    for domain in topology.numa:
        domain_gpus = sorted(domain.gpus)
        parts = split_cpus(domain.cpu_ids, len(domain_gpus))
        for gpu, cpus in zip(domain_gpus, parts, strict=True):
            nics = tuple(nic.hca for nic in rdma_nics_for_gpu(topology, gpu))
            slots.append(Slot(gpu, domain.id, domain.mem_node, tuple(cpus), nics))
    slots.sort(key=lambda slot: slot.key)
    by_gpu = {slot.key: slot for slot in slots}
    rank_list = []
    for rank in range(ranks):
        mine = node_gpus[rank * per_rank : (rank + 1) * per_rank]
        rank_list.append(_merge(rank, [by_gpu[g] for g in mine], tuple(mine)))
    return BindingPlan(name, True, per_rank, ranks, tuple(slots), tuple(rank_list))


def rdma_nics_for_gpu(topology: Topology, gpu: int) -> list[Nic]:
    """The RDMA NICs (IB/RoCE, ``nccl: true``) on ``gpu``'s rail, else in its NUMA domain."""
    rdma = [nic for nic in topology.nccl_nics() if nic.kind != "eth"]
    rail = [nic for nic in rdma if gpu in nic.gpus]
    if rail:
        return rail
    domain = topology.gpu_numa(gpu).id
    return [nic for nic in rdma if nic.numa == domain]


def _plan_cpus(topology: Topology, name: str, ranks: int) -> BindingPlan:
    domains = topology.numa
    placed: dict[int, list[int]] = {}
    for rank in range(ranks):
        placed.setdefault(rank * len(domains) // ranks, []).append(rank)
    slots: list[Slot] = []
    for index, members in sorted(placed.items()):
        domain: NumaDomain = domains[index]
        for rank, cpus in zip(members, split_cpus(domain.cpu_ids, len(members)), strict=True):
            slots.append(Slot(rank, domain.id, domain.mem_node, tuple(cpus), ()))
    slots.sort(key=lambda slot: slot.key)
    rank_list = tuple(_merge(slot.key, [slot], ()) for slot in slots)
    return BindingPlan(name, False, 0, ranks, tuple(slots), rank_list)


def _merge(rank: int, slots: Sequence[Slot], gpus: tuple[int, ...]) -> RankBinding:
    cpus = sorted({cpu for slot in slots for cpu in slot.cpus})
    mems = sorted({slot.memory_node for slot in slots})
    nics: list[str] = []
    for slot in slots:
        nics.extend(nic for nic in slot.nics if nic not in nics)
    return RankBinding(rank, gpus, tuple(cpus), tuple(mems), tuple(nics))


def split_cpus(cpus: Sequence[int], parts: int) -> list[list[int]]:
    """Split CPUs into ``parts`` disjoint, near-equal shares, run by run.

    Each contiguous run of CPU numbers is cut into ``parts`` pieces and piece ``i`` of every run
    goes to share ``i``, so hyperthread siblings numbered in a second run stay with their core.
    When a run is shorter than ``parts`` the whole list is cut instead; when there are fewer
    CPUs than parts, every share gets all of them.

    Args:
        cpus: CPU numbers, ascending.
        parts: Number of shares (at least 1).

    Returns:
        ``parts`` lists of CPU numbers.
    """
    ordered = sorted(set(cpus))
    if parts <= 1:
        return [ordered]
    if len(ordered) < parts:
        return [list(ordered) for _ in range(parts)]
    runs = _runs(ordered)
    if any(len(run) < parts for run in runs):
        runs = [ordered]
    shares: list[list[int]] = [[] for _ in range(parts)]
    for run in runs:
        for index in range(parts):
            lo = index * len(run) // parts
            hi = (index + 1) * len(run) // parts
            shares[index].extend(run[lo:hi])
    return shares


def _runs(ordered: Sequence[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for cpu in ordered:
        if runs and runs[-1][-1] == cpu - 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return runs


__all__ = [
    "BindingPlan",
    "RankBinding",
    "Slot",
    "plan_binding",
    "rdma_nics_for_gpu",
    "split_cpus",
]
