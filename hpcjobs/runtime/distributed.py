"""Distributed-training settings from the Slurm environment, for srun and torchrun launches.

Works in three situations, checked in this order:

1. torchrun (or hpcjobs' own rank wrapper) already exported ``RANK``, ``LOCAL_RANK``,
   ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``: those win.
2. One task per GPU under ``srun``: ranks come from ``SLURM_PROCID``, ``SLURM_LOCALID``,
   ``SLURM_NTASKS``; the master is the first node of the job.
3. Neither: a single process (rank 0 of 1 on localhost).

``MASTER_ADDR`` comes from the environment: every hpcjobs batch script (executor jobs too)
exports the first node's ``NodeAddr`` (node names do not always resolve, for example on clusters
whose IB hostnames differ), and torchrun exports its own. This module asks Slurm nothing: on a
single node the address is ``127.0.0.1``, and a job on several nodes without ``MASTER_ADDR`` is
refused with the line that sets it. ``MASTER_PORT`` is derived from the job id so two jobs
sharing a node do not collide.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hpcjobs.contract.jobenv import PORT_BASE, PORT_SPAN
from hpcjobs.errors import BadInputError
from hpcjobs.runtime.stopflag import initialised_dist

log = logging.getLogger(__name__)


def master_port(job_id: int | str | None) -> int:
    """The rendezvous port for a job. Batch scripts compute the same number in bash."""
    try:
        number = int(str(job_id).split("_")[0])
    except (TypeError, ValueError):
        return PORT_BASE + 9500
    return PORT_BASE + number % PORT_SPAN


@dataclass(frozen=True)
class DistEnv:
    """Who this process is in the job, and where the rendezvous is."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int

    def as_env(self) -> dict[str, str]:
        """The variables torch.distributed's ``env://`` initialisation reads."""
        return {
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
        }


def _int(env: Mapping[str, str], *names: str, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return default


def _tasks_on_this_node(env: Mapping[str, str]) -> int:
    """From SLURM_TASKS_PER_NODE ("4(x2),3") and SLURM_NODEID."""
    spec = env.get("SLURM_TASKS_PER_NODE", "")
    counts: list[int] = []
    for part in filter(None, spec.split(",")):
        if "(x" in part:
            count, repeat = part.rstrip(")").split("(x")
            counts += [int(count)] * int(repeat)
        elif part.isdigit():
            counts.append(int(part))
    node = _int(env, "SLURM_NODEID", default=0)
    return counts[node] if node < len(counts) else 1


def from_environment(env: Mapping[str, str] | None = None) -> DistEnv:
    """Work out this process's :class:`DistEnv` (see the module docstring).

    Raises:
        BadInputError: the job spans several nodes and nothing set ``MASTER_ADDR``.
    """
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if "RANK" in env and "WORLD_SIZE" in env:
        rank = _int(env, "RANK", default=0)
        local_rank = _int(env, "LOCAL_RANK", "SLURM_LOCALID", default=0)
        world = _int(env, "WORLD_SIZE", default=1)
        local_world = _int(env, "LOCAL_WORLD_SIZE", default=max(1, _tasks_on_this_node(env)))
        node_rank = _int(env, "GROUP_RANK", "SLURM_NODEID", default=0)
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank = _int(env, "SLURM_PROCID", default=0)
        local_rank = _int(env, "SLURM_LOCALID", default=0)
        world = _int(env, "SLURM_NTASKS", default=1)
        local_world = _tasks_on_this_node(env)
        node_rank = _int(env, "SLURM_NODEID", default=0)
    else:
        rank, local_rank, world, local_world, node_rank = 0, 0, 1, 1, 0
    addr = env.get("MASTER_ADDR") or _single_node_addr(env)
    port = _int(env, "MASTER_PORT", default=master_port(job_id))
    return DistEnv(rank, local_rank, world, local_world, node_rank, addr, port)


def _single_node_addr(env: Mapping[str, str]) -> str:
    """``127.0.0.1`` when every rank is on this node (the step's nodes count, else the job's);
    else there is no address to guess."""
    nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", default=1)
    if nodes <= 1:
        return "127.0.0.1"
    raise BadInputError(
        "MASTER_ADDR is not set, and this job runs on several nodes",
        hint="launch it with 'hpcjobs submit' or torchrun (both set it), or add "
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) '
        "to the batch script before srun (where node names do not resolve, that node's "
        "NodeAddr from 'scontrol show node')",
    )


def init_process_group(
    backend: str | None = None, *, timeout_s: float = 600.0, env: Mapping[str, str] | None = None
) -> DistEnv:
    """Initialise ``torch.distributed`` from the Slurm environment and return the settings.

    Picks ``nccl`` when CUDA is available and ``gloo`` otherwise, unless ``backend`` is given.
    Sets the ``RANK``/``WORLD_SIZE``/``MASTER_*`` variables it used, so libraries that read them
    agree. Works under both srun (one task per GPU) and torchrun.
    """
    import torch
    import torch.distributed as dist

    info = from_environment(env)
    os.environ.update(info.as_env())
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(info.local_rank % max(1, torch.cuda.device_count()))
    if not dist.is_initialized():
        kwargs: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=info.rank,
            world_size=info.world_size,
            **kwargs,
        )
    log.info(
        "rank %d/%d (local %d) initialised %s via %s:%d",
        info.rank,
        info.world_size,
        info.local_rank,
        backend,
        info.master_addr,
        info.master_port,
    )
    return info


def leave_process_group() -> None:
    """End this rank's part in ``torch.distributed``: all ranks meet, then each destroys its group.

    Call it on every rank at the normal end of a run. Without the meeting, a rank that finishes
    first tears its group down while a peer is still working, and gloo can then abort that rank
    (``terminate called without an active exception``: measured 2 runs in 40 of the DDP example
    on a loaded 2-core host, none in 60 with it). Does nothing when no group is up.
    """
    dist = initialised_dist()
    if dist is None:
        return
    dist.barrier()
    dist.destroy_process_group()


def micro_batches(total: int, rank: int, world_size: int) -> range:
    """The micro-batches of a step that ``rank`` takes, when a step is ``total`` micro-batches
    whatever the world size (an elastic job keeps its global batch): every ``world_size``-th,
    from ``rank``. Each rank sums its gradients over them (``no_sync()`` but for the last) with
    each loss times :func:`accumulation_scale`; DDP's mean over the ranks is then the mean over
    all ``total``, at any world size. ValueError when a rank would get none."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of {world_size} ranks")
    if total < world_size:
        raise ValueError(
            f"a step of {total} micro-batches cannot give each of {world_size} ranks one"
        )
    return range(rank, total, world_size)


def accumulation_scale(total: int, world_size: int) -> float:
    """What each micro-batch's loss is multiplied by (see :func:`micro_batches`):
    ``world_size / total``."""
    return world_size / total
