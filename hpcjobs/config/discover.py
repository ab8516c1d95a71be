"""Draft a site config from a live cluster.

Slurm tells partitions, node counts, CPUs, memory, GPUs (from GRES) and preemption settings.
Topology that Slurm cannot know (NUMA CPU lists, GPU placement, NICs, the bootstrap interface)
is either left as commented placeholders or, with ``probe_node``, read from a compute node
through ``srun``. The draft is YAML text with comments, and it validates as is.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hpcjobs.config.models import Requeue, Setup, SlurmDefaults
from hpcjobs.config.nodeprobe import PROBE_SCRIPT, ProbedNode, numa_cpulists, parse_probe_output
from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.errors import BadInputError, SlurmError
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.clusterinfo import ClusterFacts, NodeInfo, PartitionInfo

#: The site-wide default time limit, unless the default partition allows less.
DEFAULT_TIME: str = SlurmDefaults.model_fields["time"].default
ROCE_GID_INDEX = 3
PROBE_TIMEOUT = 180.0
_PREEMPTING_MODES = ("REQUEUE", "CANCEL", "SUSPEND")


@dataclass
class Draft:
    """A drafted site config: the YAML text, and notes for the admin."""

    text: str
    notes: list[str] = field(default_factory=list)


@dataclass
class ClusterSnapshot:
    """Everything read from Slurm (and optionally one node) to write a draft."""

    facts: ClusterFacts
    nodes: dict[str, NodeInfo]
    partitions: list[PartitionInfo]
    probed: ProbedNode | None = None
    probe_node: str | None = None


def read_cluster(client: SlurmClient, *, timeout: float = 60.0) -> ClusterSnapshot:
    """Query ``sinfo`` and ``scontrol`` through ``client`` (its retries and time format).

    Raises:
        SlurmError: A Slurm command failed for good (for example, no controller is reachable).
    """
    view = client.cluster(timeout=timeout)
    return ClusterSnapshot(facts=view.facts, nodes=view.nodes, partitions=view.partitions)


def probe_node(client: SlurmClient, snapshot: ClusterSnapshot, node: str) -> ProbedNode:
    """Run the probe script on ``node`` with ``srun`` and parse what it prints.

    Raises:
        BadInputError: Slurm does not know the node.
        SlurmError: ``srun`` failed.
    """
    info = snapshot.nodes.get(node)
    if info is None:
        known = ", ".join(sorted(snapshot.nodes)) or "none"
        raise BadInputError(f"node {node!r} is not in this cluster (known: {known})")
    partition = info.partitions[0].rstrip("*") if info.partitions else None
    output = client.run_on_node(
        node,
        ["sh", "-c", PROBE_SCRIPT],
        partition=partition,
        job_name="hpcjobs-discover",
        timeout=PROBE_TIMEOUT,
    )
    if "@@end" not in output:
        raise SlurmError(
            f"probing node {node!r} returned incomplete output",
            hint="run 'srun -w NODE hostname' to check that jobs can start there",
        )
    return parse_probe_output(output)


def discover_site(
    client: SlurmClient, *, name: str | None = None, probe: str | None = None, now: str = ""
) -> Draft:
    """Query the cluster behind ``client`` and draft its site config.

    Args:
        client: Runs Slurm commands (over a local or SSH runner).
        name: The site name; default: Slurm's ``ClusterName``.
        probe: A node to read the topology from (``lscpu``, ``nvidia-smi``, ``ibv_devinfo``
            through ``srun``); None leaves the topology as commented placeholders.
        now: A timestamp for the header comment.

    Returns:
        The draft.
    """
    snapshot = read_cluster(client)
    if probe:
        snapshot.probed = probe_node(client, snapshot, probe)
        snapshot.probe_node = probe
    return build_draft(snapshot, name=name, now=now)


def build_draft(snapshot: ClusterSnapshot, *, name: str | None = None, now: str = "") -> Draft:
    """Write the draft YAML for ``snapshot``. Pure: no commands run."""
    notes: list[str] = []
    site_name = _site_name(name or snapshot.facts.name or "cluster")
    parts = _partition_rows(snapshot, notes)
    if not parts:
        raise SlurmError(
            "Slurm reported no partition with nodes, so there is nothing to draft",
            hint="check 'sinfo --all' on this machine",
        )
    default = next((p for p in parts if p["default"]), parts[0])
    topo_name, topology = _probed_topology(snapshot, parts, notes)

    out: list[str] = []
    w = out.append
    _write_header(w, snapshot, site_name, now)
    _write_slurm(w, snapshot, default)
    w("defaults:")
    w(f"  partition: {_y(default['name'])}")
    w("  # nccl_profile: production")
    w("")
    w("partitions:")
    for row in parts:
        _write_partition(w, row)
    w("")
    _write_topologies(w, snapshot.probe_node, topo_name, topology)
    w("")
    _write_site_defaults(w)
    return Draft("\n".join(out) + "\n", notes)


def _probed_topology(
    snapshot: ClusterSnapshot, parts: list[dict[str, Any]], notes: list[str]
) -> tuple[str | None, dict[str, Any] | None]:
    """The probed node's topology and its name, set on the partitions whose nodes match it."""
    if snapshot.probed is None or not snapshot.probe_node:
        return None, None
    topo_name = _site_name(f"{snapshot.probe_node}-node")
    node = snapshot.nodes[snapshot.probe_node]
    topology = _topology(snapshot.probed, node.gpu_count, notes)
    for row in parts:
        if snapshot.probe_node in row["members"] and row["gpus_per_node"] == node.gpu_count:
            row["topology"] = topo_name
    return topo_name, topology


def _write_header(w: Any, snapshot: ClusterSnapshot, site_name: str, now: str) -> None:
    """The draft's opening comments, name, description and login-host settings."""
    w(f"# Draft site config for the Slurm cluster {snapshot.facts.name or site_name!r},")
    w("# written by 'hpcjobs site discover'" + (f" on {now}" if now else "") + ".")
    w("# Review every value, fill in the commented placeholders, then check it with")
    w("#   hpcjobs site validate THIS_FILE")
    w(f"name: {_y(site_name)}")
    w(f"description: {_y(f'Slurm cluster {snapshot.facts.name or site_name}')}")
    w("# Regexes matched (re.fullmatch) against the login node's hostname to pick this site:")
    w("hostnames: []")
    w('#  - "^login[0-9]+\\\\.example\\\\.org$"')
    w("login_hosts: []")
    w("host_keys: []")
    w("")


def _write_slurm(w: Any, snapshot: ClusterSnapshot, default: dict[str, Any]) -> None:
    """The ``slurm:`` section: defaults for sbatch and what Slurm told about itself."""
    w("slurm:")
    w("  account: null")
    w("  qos: null")
    w(f"  time: {_y(_default_time(default['max_time']))}")
    w(f"  output_dir: {_y(SlurmDefaults.model_fields['output_dir'].default)}")
    if snapshot.facts.version:
        w(f"  version: {_y(snapshot.facts.version)}")
    if snapshot.facts.max_array_size:
        w(f"  max_array_size: {snapshot.facts.max_array_size}")
    if snapshot.facts.preempt_mode:
        w(f"  preempt_mode: {_y(snapshot.facts.preempt_mode)}")
    w(f"  preempt_send_user_signal: {_y(snapshot.facts.send_user_signal)}")
    w(f"  job_expansion: {_y(snapshot.facts.job_expansion)}")
    w("")


def _write_topologies(
    w: Any, probe_node: str | None, topo_name: str | None, topology: dict[str, Any] | None
) -> None:
    """The ``topologies:`` section: the probed node's, or a commented example to fill in."""
    if topology is not None and topo_name is not None:
        w("topologies:")
        w(f"  # Probed on node {probe_node}.")
        _write_topology(w, topo_name, topology)
        return
    w("# Slurm cannot know the node layout. Describe it to enable CPU/GPU/NIC binding, or")
    w("# run 'hpcjobs site discover --probe-node NODE' to read it from a compute node.")
    w("topologies: {}")
    w("#  gpu-node:")
    w("#    bootstrap_interface: ib0")
    w("#    numa:")
    w('#      - {id: 0, cpus: "0-31", memory_node: 0, gpus: [0, 1, 2, 3]}')
    w('#      - {id: 1, cpus: "32-63", memory_node: 1, gpus: [4, 5, 6, 7]}')
    w("#    nics:")
    w("#      - {name: mlx5_0, kind: ib, port: 1, numa: 0, gpus: [0, 1], nccl: true}")


def _write_site_defaults(w: Any) -> None:
    """The NCCL profile example and the ``setup:`` and ``requeue:`` sections, at their defaults."""
    w("nccl_profiles: {}")
    w("#  production:")
    w('#    env: {NCCL_IB_TIMEOUT: "22", NCCL_IB_RETRY_CNT: "7"}')
    w("")
    setup = Setup()
    w("setup:")
    w(f"  modules: {_y(setup.modules)}")
    w(f"  lines: {_y(setup.lines)}")
    w("  container:")
    w(f"    runtime: {_y(setup.container.runtime)}")
    w("")
    requeue = Requeue()
    budgets = ", ".join(f"{k}: {v}" for k, v in requeue.max_requeues.model_dump().items())
    w("requeue:")
    w(f"  signal: {requeue.signal}")
    w(f"  lead_time: {requeue.lead_time}")
    w(f"  max_requeues: {{{budgets}}}")


def _partition_rows(snapshot: ClusterSnapshot, notes: list[str]) -> list[dict[str, Any]]:
    infos = {p.name: p for p in snapshot.partitions}
    order = [p.name for p in snapshot.partitions]
    sinfo_default = None
    for node in snapshot.nodes.values():
        for label in node.partitions:
            bare = label.rstrip("*")
            if label.endswith("*"):
                sinfo_default = bare
            if bare not in infos:
                infos[bare] = PartitionInfo(bare)
                order.append(bare)
    preempting = (snapshot.facts.preempt_type or "preempt/none") != "preempt/none"
    rows = []
    for pname in order:
        info = infos[pname]
        members = [
            n for n in snapshot.nodes.values() if pname in (p.rstrip("*") for p in n.partitions)
        ]
        if not members:
            notes.append(f"partition {pname!r} has no nodes and was left out")
            continue
        if len({(n.cpus, n.gpu_count, n.memory_mb) for n in members}) > 1:
            notes.append(f"nodes of partition {pname!r} differ; the draft uses the smallest")
        mode = (info.preempt_mode or "").upper()
        gpu_types = Counter(n.gpu_type for n in members if n.gpu_type)
        rows.append(
            {
                "name": pname,
                "default": info.default or pname == sinfo_default,
                "members": {n.name for n in members},
                "gpu_type": gpu_types.most_common(1)[0][0] if gpu_types else None,
                "gpus_per_node": min(n.gpu_count for n in members),
                "cpus_per_node": max(1, min(n.cpus for n in members)),
                "sockets_per_node": max(1, min(n.sockets or 1 for n in members)),
                "memory_mb": max(1, min(n.memory_mb for n in members)),
                "max_nodes": info.max_nodes or len(members),
                "max_time": info.max_time,
                "nodes": len(members),
                "priority_tier": info.priority_tier,
                "preemptible": preempting and any(m in mode for m in _PREEMPTING_MODES),
                "hidden": info.hidden,
                "topology": None,
            }
        )
    return rows


def _topology(probed: ProbedNode, gpu_count: int, notes: list[str]) -> dict[str, Any]:
    domains = numa_cpulists(probed)
    if not domains:
        raise SlurmError("the probed node reported no CPUs (no sysfs NUMA data and no lscpu)")
    ids = sorted(domains)
    gpu_home: dict[int, int] = {}
    if probed.gpus.gpu_numa:
        for gpu, numa in probed.gpus.gpu_numa.items():
            gpu_home[gpu] = numa if numa in domains else ids[0]
    elif gpu_count:
        notes.append("nvidia-smi was not available: GPUs were spread evenly over NUMA domains")
        per_domain = -(-gpu_count // len(ids))
        for gpu in range(gpu_count):
            gpu_home[gpu] = ids[min(gpu // per_domain, len(ids) - 1)]
    interface = probed.default_interface
    if interface is None:
        interface = "eth0"
        notes.append("no default route on the node: bootstrap_interface is a guess (eth0)")
    nics = []
    for port in probed.ib_ports:
        served = sorted(g for g, names in probed.gpus.gpu_nics.items() if port.device in names)
        numa = probed.ib_numa.get(port.device)
        nic: dict[str, Any] = {
            "name": port.device,
            "kind": port.kind,
            "port": port.port,
            "numa": numa if numa in domains else None,
            "gpus": served,
            "nccl": port.active,
        }
        if port.kind == "roce":
            nic["gid_index"] = ROCE_GID_INDEX
            notes.append(f"{port.device}: gid_index {ROCE_GID_INDEX} is a guess; check show_gids")
        nics.append(nic)
    return {
        "bootstrap_interface": interface,
        "numa": [
            {
                "id": domain,
                "cpus": domains[domain],
                "memory_node": domain,
                "gpus": sorted(g for g, home in gpu_home.items() if home == domain),
            }
            for domain in ids
        ],
        "nics": nics,
    }


def _write_partition(w: Any, row: dict[str, Any]) -> None:
    w(f"  - name: {_y(row['name'])}")
    if row["hidden"]:
        w("    description: hidden partition")
    w(f"    gpu_type: {_y(row['gpu_type'])}")
    w(f"    gpus_per_node: {row['gpus_per_node']}")
    w(f"    cpus_per_node: {row['cpus_per_node']}")
    w(f"    sockets_per_node: {row['sockets_per_node']}")
    w(f"    memory_mb: {row['memory_mb']}")
    w(f"    max_nodes: {row['max_nodes']}")
    w(f"    max_time: {_y(row['max_time'])}")
    w(f"    nodes: {row['nodes']}")
    if row["priority_tier"] is not None:
        w(f"    priority_tier: {row['priority_tier']}")
    w(f"    preemptible: {_y(row['preemptible'])}")
    w("    launcher: srun")
    if row["topology"]:
        w(f"    topology: {_y(row['topology'])}")
    elif row["gpus_per_node"]:
        w("    # topology: gpu-node    # name a topology below to enable binding")


def _write_topology(w: Any, name: str, topo: dict[str, Any]) -> None:
    w(f"  {_y(name)}:")
    w(f"    bootstrap_interface: {_y(topo['bootstrap_interface'])}")
    w("    numa:")
    for domain in topo["numa"]:
        w(f"      - id: {domain['id']}")
        w(f"        cpus: {_y(domain['cpus'])}")
        w(f"        memory_node: {domain['memory_node']}")
        w(f"        gpus: {_y(domain['gpus'])}")
    if not topo["nics"]:
        w("    nics: []")
        w("    # - {name: mlx5_0, kind: ib, port: 1, numa: 0, gpus: [0], nccl: true}")
        return
    w("    nics:")
    for nic in topo["nics"]:
        w(f"      - name: {_y(nic['name'])}")
        w(f"        kind: {nic['kind']}")
        w(f"        port: {nic['port']}")
        if "gid_index" in nic:
            w(f"        gid_index: {nic['gid_index']}")
        w(f"        numa: {_y(nic['numa'])}")
        w(f"        gpus: {_y(nic['gpus'])}")
        w(f"        nccl: {_y(nic['nccl'])}")


def _default_time(max_time: str) -> str:
    try:
        limit = parse_slurm_time(max_time)
    except ValueError:
        return DEFAULT_TIME
    default = parse_slurm_time(DEFAULT_TIME)
    if limit is not None and default is not None and limit < default:
        return max_time
    return DEFAULT_TIME


def _site_name(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")
    return cleaned[:64] or "cluster"


def _y(value: Any) -> str:
    """One YAML flow scalar (or list): JSON is valid YAML and quotes every string safely."""
    return json.dumps(value)
