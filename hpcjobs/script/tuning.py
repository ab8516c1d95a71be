"""The NCCL/UCX/Gloo variables of a job, each with the place it came from.

Layers, lowest first: values derived from the node topology, the partition's NCCL profile,
the partition's own ``env``, debugging variables (only with ``--nccl-debug``: those of the
site's ``debug: true`` profiles, else ``NCCL_DEBUG=INFO``), then the job's own ``--env``
values for the same variables ("user override"). Without ``--nccl-debug`` the debugging class
(``NCCL_DEBUG=INFO``, ``NCCL_ALGO``...) is left out, unless the partition's own profile is a
debug profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from hpcjobs.config.models import Partition, SiteConfig, Topology
from hpcjobs.config.ncclvars import DEBUG_NCCL_VARS, QUIET_DEBUG_LEVELS

#: Prefixes of variables that belong to the NCCL/UCX block when a job sets them.
TUNING_PREFIXES = ("NCCL_", "UCX_", "GLOO_", "TORCH_NCCL_", "FI_", "OMPI_MCA_")

#: What ``--nccl-debug`` turns on when the site has no debug profile.
DEFAULT_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


class EnvVar(NamedTuple):
    """An exported variable, its value, and where the value came from."""

    name: str
    value: str
    origin: str


def tuning_env(
    site: SiteConfig,
    partition: Partition,
    topology: Topology | None,
    *,
    topology_name: str | None,
    user_env: Mapping[str, str],
    nccl_debug: bool,
) -> list[EnvVar]:
    """The NCCL/UCX/Gloo variables for a job on ``partition``, in a stable order.

    Args:
        site: The site config.
        partition: The job's partition.
        topology: Its node topology, if any.
        topology_name: The topology's name, for origin labels.
        user_env: The job's ``--env`` values; those that are tuning variables override.
        nccl_debug: Whether debugging variables are allowed (``--nccl-debug``).

    Returns:
        One :class:`EnvVar` per variable: topology-derived ones first, then in the order the
        profile and partition list them.
    """
    result: dict[str, EnvVar] = {}
    if topology is not None:
        label = f"topology {topology_name}"
        for name, value in topology_vars(topology).items():
            result[name] = EnvVar(name, value, label)
    debug_profiles = {name for name, prof in site.nccl_profiles.items() if prof.debug}
    for name, (value, origin) in site.nccl_env_for(partition).items():
        from_debug_profile = origin.removeprefix("profile ") in debug_profiles
        if not nccl_debug and not from_debug_profile and is_debug_var(name, value):
            continue
        result[name] = EnvVar(name, value, origin)
    if nccl_debug:
        _add_debug_vars(site, result)
    for name, value in user_env.items():
        if is_tuning_var(name) or name in result:
            result.pop(name, None)
            result[name] = EnvVar(name, value, "user override")
    return list(result.values())


def _add_debug_vars(site: SiteConfig, result: dict[str, EnvVar]) -> None:
    """Layer the debugging variables of the site's debug profiles (else hpcjobs' defaults).

    Only their debugging variables are taken: a debug profile's tuning values must not replace
    the partition's own.
    """
    applied = False
    for prof_name, prof in site.nccl_profiles.items():
        if not prof.debug:
            continue
        for name, value in prof.env.items():
            if name in DEBUG_NCCL_VARS:
                result[name] = EnvVar(name, value, f"profile {prof_name} (--nccl-debug)")
                applied = True
    if not applied:
        for name, value in DEFAULT_DEBUG_ENV.items():
            result[name] = EnvVar(name, value, "--nccl-debug")


def topology_vars(topology: Topology) -> dict[str, str]:
    """Variables that follow from the node layout alone.

    ``NCCL_IB_HCA``/``UCX_NET_DEVICES`` list the RDMA NICs NCCL may use (storage NICs, marked
    ``nccl: false``, never appear), with their port. ``NCCL_IB_GID_INDEX`` is set for RoCE.
    ``NCCL_NET_GDR_LEVEL=PHB`` lets GPUDirect RDMA work between a GPU and a NIC of the same NUMA
    domain, which is what the per-rank NIC choice provides. The bootstrap interface carries
    NCCL's and Gloo's socket traffic.
    """
    env: dict[str, str] = {}
    rdma = [nic for nic in topology.nccl_nics() if nic.kind in ("ib", "roce")]
    if rdma:
        hcas = ",".join(nic.hca for nic in rdma)
        env["NCCL_IB_HCA"] = f"={hcas}"
        env["UCX_NET_DEVICES"] = hcas
        gids = [nic.gid_index for nic in rdma if nic.kind == "roce" and nic.gid_index is not None]
        if gids:
            env["NCCL_IB_GID_INDEX"] = str(gids[0])
        env["NCCL_NET_GDR_LEVEL"] = "PHB"
    env["NCCL_SOCKET_IFNAME"] = topology.bootstrap_interface
    env["GLOO_SOCKET_IFNAME"] = topology.bootstrap_interface
    return env


def is_debug_var(name: str, value: str) -> bool:
    """Whether ``name=value`` is a debugging setting that stays out of production runs."""
    if name not in DEBUG_NCCL_VARS:
        return False
    return not (name == "NCCL_DEBUG" and value.upper() in QUIET_DEBUG_LEVELS)


def is_tuning_var(name: str) -> bool:
    """Whether a job's ``--env`` variable belongs to the NCCL/UCX block."""
    return name.startswith(TUNING_PREFIXES)


__all__ = ["EnvVar", "is_debug_var", "is_tuning_var", "topology_vars", "tuning_env"]
