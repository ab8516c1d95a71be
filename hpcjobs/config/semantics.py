"""Checks across values of a site config: references, GPU/CPU/NIC maps, NCCL variables.

The checks read the raw (merged) data, and validate each topology and partition on its own, so
they still run, and still find problems, when another part of the file has type errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import ValidationError

from hpcjobs.config.models import Partition, Topology
from hpcjobs.config.ncclvars import DEBUG_NCCL_VARS, KNOWN_NCCL_VARS, QUIET_DEBUG_LEVELS
from hpcjobs.config.problems import KeyPath, Severity, suggest
from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.safetext import env_name_problem


class Finding(NamedTuple):
    """A problem at a key path, before it is tied to a file and line."""

    path: KeyPath
    message: str
    severity: Severity = "error"


def check_site_data(data: Mapping[str, Any]) -> list[Finding]:
    """Run every cross-value check on raw site config data.

    Args:
        data: The merged site config mapping (possibly with type errors elsewhere).

    Returns:
        Errors and warnings, in file order as far as possible.
    """
    findings: list[Finding] = []
    partitions = _valid_partitions(data, findings)
    topologies = _valid_topologies(data)
    profiles = data.get("nccl_profiles")
    profile_names = set(profiles) if isinstance(profiles, dict) else set()
    raw_topologies = data.get("topologies")
    topology_names = set(raw_topologies) if isinstance(raw_topologies, dict) else set()
    check_refs = raw_topologies is None or isinstance(raw_topologies, dict)
    check_profiles = profiles is None or isinstance(profiles, dict)

    _check_defaults(data, partitions, profiles, findings)
    for name, topology in topologies.items():
        findings.extend(check_topology(name, topology))
    for index, name, raw in partitions:
        base: KeyPath = ("partitions", index)
        if check_refs:
            _check_reference(raw, "topology", topology_names, base, "topology", findings)
        if check_profiles:
            _check_reference(raw, "nccl_profile", profile_names, base, "NCCL profile", findings)
        part = _try_partition(raw)
        topo_name = raw.get("topology")
        if part is not None and isinstance(topo_name, str) and topo_name in topologies:
            findings.extend(_check_partition_topology(base, part, topo_name, topologies[topo_name]))
        elif part is not None and part.gpus_per_node > 0 and topo_name is None:
            findings.append(
                Finding(
                    (*base, "topology"),
                    f"GPU partition {name!r} has no topology, so ranks will not be bound to "
                    "CPUs, NUMA memory or NICs",
                    "warning",
                )
            )
        if part is not None and _gpu_price_without_gpus(part):
            findings.append(
                Finding(
                    (*base, "price", "gpu_hour"),
                    f"partition {name!r} has no GPUs: price it per node_hour",
                )
            )
        if isinstance(raw.get("env"), dict):
            findings.extend(_check_nccl_names((*base, "env"), raw["env"]))
    if isinstance(profiles, dict):
        for pname, profile in profiles.items():
            if isinstance(profile, dict):
                findings.extend(_check_profile(str(pname), profile))
    findings.extend(_check_default_time(data, partitions))
    return findings


def _gpu_price_without_gpus(part: Partition) -> bool:
    return part.price is not None and part.price.gpu_hour is not None and part.gpus_per_node < 1


def check_topology(name: str, topology: Topology) -> list[Finding]:
    """Checks inside one topology: NUMA ids, CPU overlaps, GPU placement and the NIC map."""
    base: KeyPath = ("topologies", name)
    findings: list[Finding] = []
    ids: dict[int, int] = {}
    gpu_home: dict[int, int] = {}
    cpu_home: dict[int, int] = {}
    for index, domain in enumerate(topology.numa):
        path: KeyPath = (*base, "numa", index)
        if domain.id in ids:
            findings.append(
                Finding(
                    (*path, "id"), f"duplicate NUMA id {domain.id} (also numa.{ids[domain.id]})"
                )
            )
        ids.setdefault(domain.id, index)
        overlap = sorted(cpu for cpu in domain.cpu_ids if cpu in cpu_home)
        if overlap:
            other = cpu_home[overlap[0]]
            findings.append(
                Finding(
                    (*path, "cpus"),
                    f"CPU sets overlap: CPU {_short(overlap)} is also in numa.{other}.cpus",
                )
            )
        for cpu in domain.cpu_ids:
            cpu_home.setdefault(cpu, index)
        for gpu in domain.gpus:
            if gpu in gpu_home:
                findings.append(
                    Finding(
                        (*path, "gpus"),
                        f"GPU {gpu} is in more than one NUMA domain (also numa.{gpu_home[gpu]})",
                    )
                )
            gpu_home.setdefault(gpu, index)
    findings.extend(_check_nics(base, topology, set(ids), set(gpu_home)))
    return findings


def _check_nics(
    base: KeyPath, topology: Topology, numa_ids: set[int], gpus: set[int]
) -> list[Finding]:
    findings: list[Finding] = []
    names: dict[str, int] = {}
    for index, nic in enumerate(topology.nics):
        path: KeyPath = (*base, "nics", index)
        if nic.name in names:
            findings.append(
                Finding(
                    (*path, "name"),
                    f"NIC names must be unique: {nic.name!r} is also nics.{names[nic.name]}",
                )
            )
        names.setdefault(nic.name, index)
        if nic.numa is not None and nic.numa not in numa_ids:
            known = ", ".join(str(i) for i in sorted(numa_ids))
            findings.append(
                Finding((*path, "numa"), f"NUMA domain {nic.numa} does not exist (known: {known})")
            )
        for gpu in nic.gpus:
            if gpu not in gpus:
                findings.append(
                    Finding(
                        (*path, "gpus"),
                        f"GPU {gpu} is missing from the NUMA map (no numa[].gpus lists it)",
                    )
                )
        if nic.kind == "roce" and nic.gid_index is None:
            findings.append(
                Finding(
                    (*path, "gid_index"),
                    "a RoCE NIC needs gid_index (see 'show_gids' on a node; usually 3 for RoCEv2)",
                )
            )
        if nic.kind == "eth" and nic.nccl:
            findings.append(
                Finding(
                    (*path, "nccl"),
                    "an Ethernet NIC cannot carry NCCL's IB transport; set nccl: false",
                    "warning",
                )
            )
    return findings


def _check_partition_topology(
    base: KeyPath, part: Partition, topo_name: str, topology: Topology
) -> list[Finding]:
    findings: list[Finding] = []
    listed = set(topology.gpu_ids)
    expected = set(range(part.gpus_per_node))
    missing = sorted(expected - listed)
    if missing:
        findings.append(
            Finding(
                ("topologies", topo_name, "numa"),
                f"GPU {_short(missing)} is missing from the NUMA map: partition {part.name!r} "
                f"has {part.gpus_per_node} GPUs per node",
            )
        )
    extra = sorted(listed - expected)
    if extra:
        findings.append(
            Finding(
                (*base, "gpus_per_node"),
                f"topology {topo_name!r} lists GPU {_short(extra)}, which does not exist: "
                f"the partition has {part.gpus_per_node} GPUs per node",
            )
        )
    too_high = [cpu for cpu in topology.cpu_ids if cpu >= part.cpus_per_node]
    if too_high:
        findings.append(
            Finding(
                (*base, "cpus_per_node"),
                f"topology {topo_name!r} uses CPU {too_high[0]}, but Slurm counts "
                f"{part.cpus_per_node} CPUs per node (0-{part.cpus_per_node - 1})",
                "warning",
            )
        )
    return findings


def _check_profile(name: str, profile: Mapping[str, Any]) -> list[Finding]:
    env = profile.get("env")
    if not isinstance(env, dict):
        return []
    path: KeyPath = ("nccl_profiles", name, "env")
    findings = _check_nccl_names(path, env)
    if profile.get("debug") is True:
        return findings
    for var, value in env.items():
        if var not in DEBUG_NCCL_VARS:
            continue
        if var == "NCCL_DEBUG" and str(value).upper() in QUIET_DEBUG_LEVELS:
            continue
        findings.append(
            Finding(
                (*path, var),
                f"{var} is a debugging variable and slows or changes production runs; move it to "
                "a profile with 'debug: true'",
                "warning",
            )
        )
    return findings


def _check_nccl_names(path: KeyPath, env: Mapping[Any, Any]) -> list[Finding]:
    findings: list[Finding] = []
    for var in env:
        if not isinstance(var, str) or env_name_problem(var) is not None:
            continue  # the schema reports the bad name; an unknown-variable warning adds nothing
        if var.startswith("NCCL_") and var not in KNOWN_NCCL_VARS:
            findings.append(
                Finding(
                    (*path, var),
                    f"unknown NCCL variable {var!r}{suggest(var, KNOWN_NCCL_VARS)}; NCCL ignores "
                    "names it does not know",
                    "warning",
                )
            )
    return findings


def _check_defaults(
    data: Mapping[str, Any],
    partitions: list[tuple[int, str, dict[str, Any]]],
    profiles: Any,
    findings: list[Finding],
) -> None:
    """Check the ``defaults`` references, unless the lists they point into are malformed."""
    defaults = data.get("defaults")
    if not isinstance(defaults, dict):
        return
    if isinstance(data.get("partitions"), list):
        names = {name for _, name, _ in partitions}
        _check_reference(defaults, "partition", names, ("defaults",), "partition", findings)
    if profiles is None or isinstance(profiles, dict):
        known = set(profiles or {})
        _check_reference(defaults, "nccl_profile", known, ("defaults",), "NCCL profile", findings)


def _check_reference(
    raw: Mapping[str, Any],
    key: str,
    known: set[str],
    base: KeyPath,
    what: str,
    findings: list[Finding],
) -> None:
    value = raw.get(key)
    if not isinstance(value, str) or value in known:
        return
    listed = ", ".join(sorted(known)) or "none defined"
    findings.append(
        Finding(
            (*base, key),
            f"{what} {value!r} does not exist{suggest(value, known)} (known: {listed})",
        )
    )


def _check_default_time(
    data: Mapping[str, Any], partitions: list[tuple[int, str, dict[str, Any]]]
) -> list[Finding]:
    slurm = data.get("slurm")
    time = slurm.get("time") if isinstance(slurm, dict) else None
    if not isinstance(time, str):
        return []
    try:
        seconds = parse_slurm_time(time)
    except ValueError:
        return []
    findings: list[Finding] = []
    for index, name, raw in partitions:
        limit = raw.get("max_time")
        try:
            max_seconds = parse_slurm_time(limit) if isinstance(limit, str) else None
        except ValueError:
            continue
        if max_seconds is not None and (seconds is None or seconds > max_seconds):
            findings.append(
                Finding(
                    ("partitions", index, "max_time"),
                    f"the default time {time} is longer than partition {name!r} allows ({limit}); "
                    "jobs there must pass a shorter --time",
                    "warning",
                )
            )
    return findings


def _valid_partitions(
    data: Mapping[str, Any], findings: list[Finding]
) -> list[tuple[int, str, dict[str, Any]]]:
    """(index, name, raw) of every partition entry with a string name; flags duplicates."""
    raw = data.get("partitions")
    if not isinstance(raw, list):
        return []
    result: list[tuple[int, str, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"]
        if name in seen:
            findings.append(
                Finding(
                    ("partitions", index, "name"),
                    f"duplicate partition {name!r} (also partitions.{seen[name]})",
                )
            )
            continue
        seen[name] = index
        result.append((index, name, entry))
    return result


def _valid_topologies(data: Mapping[str, Any]) -> dict[str, Topology]:
    raw = data.get("topologies")
    if not isinstance(raw, dict):
        return {}
    result: dict[str, Topology] = {}
    for name, entry in raw.items():
        try:
            result[str(name)] = Topology.model_validate(entry)
        except ValidationError:
            continue
    return result


def _try_partition(raw: Mapping[str, Any]) -> Partition | None:
    try:
        return Partition.model_validate(raw)
    except ValidationError:
        return None


def _short(numbers: list[int], limit: int = 6) -> str:
    shown = ",".join(str(n) for n in numbers[:limit])
    return shown + ("..." if len(numbers) > limit else "")
