"""What the cluster looks like: ``sinfo`` and ``scontrol show node|partition|config``, parsed.

:meth:`SlurmClient.cluster <hpcjobs.slurm.client.SlurmClient.cluster>` asks; the parsers here are
pure functions over command output, tested against recorded output of each Slurm release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpcjobs.contract.slurmtext import JOB_EXPANSION, options
from hpcjobs.textlines import split_lines

_LEADING_INT = re.compile(r"^\s*(\d+)")
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "N/A", "(NULL)"}


@dataclass(frozen=True)
class Gres:
    """One generic resource of a node, such as ``gpu:h100:4(S:0-1)``."""

    name: str
    type: str | None
    count: int
    sockets: str | None = None


@dataclass
class NodeInfo:
    """What Slurm knows about one node."""

    name: str
    cpus: int = 0
    sockets: int = 0
    cores_per_socket: int = 0
    threads_per_core: int = 0
    memory_mb: int = 0
    gres: list[Gres] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> list[Gres]:
        return [g for g in self.gres if g.name == "gpu"]

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gpus)

    @property
    def gpu_type(self) -> str | None:
        types = [g.type for g in self.gpus if g.type]
        return types[0] if types else None


@dataclass
class PartitionInfo:
    """The limits and preemption settings of one partition."""

    name: str
    default: bool = False
    max_nodes: int | None = None
    max_time: str = "UNLIMITED"
    priority_tier: int | None = None
    preempt_mode: str | None = None
    total_nodes: int | None = None
    state: str | None = None
    hidden: bool = False


@dataclass
class ClusterFacts:
    """Cluster-wide settings from ``scontrol show config``."""

    name: str | None = None
    version: str | None = None
    max_array_size: int | None = None
    preempt_type: str | None = None
    preempt_mode: str | None = None
    send_user_signal: bool = False
    job_expansion: bool = False


def parse_gres(text: str) -> list[Gres]:
    """Parse a GRES string such as ``gpu:h100:4(S:0-1),nvme:1`` or ``gpu:8``.

    Entries without a count (``(null)``, empty) are ignored.
    """
    result: list[Gres] = []
    if not text or text.strip().upper() in _UNLIMITED:
        return result
    for item in _split_top_level(text.strip()):
        sockets = None
        paren = re.search(r"\((.*)\)\s*$", item)
        if paren:
            inner = paren.group(1)
            item = item[: paren.start()]
            if inner.startswith("S:"):
                sockets = inner[2:]
        parts = item.split(":")
        if len(parts) < 2:
            continue
        count_match = _LEADING_INT.match(parts[-1])
        if not count_match:
            continue
        count = int(count_match.group(1))
        gtype = ":".join(parts[1:-1]) or None
        result.append(Gres(parts[0], gtype, count, sockets))
    return result


#: ``sinfo`` fields :func:`parse_sinfo_nodes` reads: node, partition, CPUs, S:C:T, memory, GRES.
SINFO_FORMAT = "%N|%P|%c|%z|%m|%G"


@dataclass
class ClusterView:
    """The cluster as Slurm describes it: its settings, its nodes, its partitions."""

    facts: ClusterFacts
    nodes: dict[str, NodeInfo]
    partitions: list[PartitionInfo]


def parse_sinfo_nodes(text: str) -> dict[str, NodeInfo]:
    """Parse ``sinfo -h -N --all -o '%N|%P|%c|%z|%m|%G'`` into nodes with their partitions.

    Returns:
        Nodes by name, in first-seen order; ``partitions`` keeps sinfo's ``*`` default marker.
    """
    nodes: dict[str, NodeInfo] = {}
    for line in split_lines(text):
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 6 or not fields[0]:
            continue
        name, partition, cpus, sct, memory, gres = fields[:6]
        node = nodes.setdefault(name, NodeInfo(name))
        if partition and partition not in node.partitions:
            node.partitions.append(partition)
        node.cpus = node.cpus or _int(cpus)
        sct_parts = sct.split(":")
        if len(sct_parts) == 3:
            node.sockets = node.sockets or _int(sct_parts[0])
            node.cores_per_socket = node.cores_per_socket or _int(sct_parts[1])
            node.threads_per_core = node.threads_per_core or _int(sct_parts[2])
        node.memory_mb = node.memory_mb or _int(memory)
        if not node.gres:
            node.gres = parse_gres(gres)
    return nodes


def merge_scontrol_nodes(nodes: dict[str, NodeInfo], records: list[dict[str, str]]) -> None:
    """Fill ``nodes`` with the exact per-node values of ``scontrol show node``."""
    for record in records:
        name = record.get("NodeName")
        if not name:
            continue
        node = nodes.setdefault(name, NodeInfo(name))
        node.cpus = _int(record.get("CPUTot", "")) or node.cpus
        boards = _int(record.get("Boards", "")) or 1
        sockets = _int(record.get("Sockets", ""))
        node.sockets = sockets * boards if sockets else node.sockets
        node.cores_per_socket = _int(record.get("CoresPerSocket", "")) or node.cores_per_socket
        node.threads_per_core = _int(record.get("ThreadsPerCore", "")) or node.threads_per_core
        node.memory_mb = _int(record.get("RealMemory", "")) or node.memory_mb
        gres = parse_gres(record.get("Gres", ""))
        if gres:
            node.gres = gres
        if not node.partitions and record.get("Partitions"):
            node.partitions = [p for p in record["Partitions"].split(",") if p]


def parse_partitions(records: list[dict[str, str]]) -> list[PartitionInfo]:
    """Partitions from ``scontrol show partition`` records, in Slurm's order."""
    result = []
    for record in records:
        name = record.get("PartitionName")
        if not name:
            continue
        max_nodes = record.get("MaxNodes", "UNLIMITED")
        max_time = record.get("MaxTime", "UNLIMITED")
        tier = record.get("PriorityTier")
        total = record.get("TotalNodes")
        result.append(
            PartitionInfo(
                name=name,
                default=record.get("Default", "NO").upper() == "YES",
                max_nodes=None if max_nodes.upper() in _UNLIMITED else _int(max_nodes) or None,
                max_time="UNLIMITED" if max_time.upper() in _UNLIMITED else max_time,
                priority_tier=_int(tier) if tier and tier.isdigit() else None,
                preempt_mode=record.get("PreemptMode") or None,
                total_nodes=_int(total) if total else None,
                state=record.get("State"),
                hidden=record.get("Hidden", "NO").upper() == "YES",
            )
        )
    return result


def parse_cluster_facts(config: dict[str, str]) -> ClusterFacts:
    """The settings of ``scontrol show config`` that a site config records."""
    ctld = config.get("SlurmctldParameters", "")
    preempt_params = config.get("PreemptParameters", "")
    max_array = config.get("MaxArraySize", "")
    return ClusterFacts(
        name=config.get("ClusterName") or None,
        version=config.get("SLURM_VERSION") or None,
        max_array_size=_int(max_array) or None,
        preempt_type=config.get("PreemptType") or None,
        preempt_mode=config.get("PreemptMode") or None,
        send_user_signal="preempt_send_user_signal" in options(ctld)
        or "send_user_signal" in options(preempt_params),
        job_expansion=JOB_EXPANSION in options(config.get("SchedulerParameters", "")),
    )


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    if current:
        items.append("".join(current).strip())
    return [item for item in items if item]


def _int(text: str) -> int:
    match = _LEADING_INT.match(text or "")
    return int(match.group(1)) if match else 0
