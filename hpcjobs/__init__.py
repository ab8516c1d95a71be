"""hpcjobs: fast, safe multi-node training launches on Slurm.

``import hpcjobs`` loads the standard library only (every rank of a training script imports it):
the names of :data:`PUBLIC` load on first use (PEP 562, :mod:`hpcjobs.lazy`), and
:func:`executor` imports submitit when it is called.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.runtime.checkpoint import Checkpoint, CheckpointDir, report_step
    from hpcjobs.runtime.distributed import (
        accumulation_scale,
        init_process_group,
        leave_process_group,
        micro_batches,
    )
    from hpcjobs.runtime.progress import ProgressWriter
    from hpcjobs.runtime.resumable import Interrupted, Resumable
    from hpcjobs.runtime.stopflag import StopFlag
    from hpcjobs.slurm.client import SlurmClient
    from hpcjobs.submitit.executor import HpcExecutor


def executor(
    site: str | os.PathLike[str] | SiteConfig | None = None,
    *,
    partition: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    folder: str | os.PathLike[str] | None = None,
    python: str | Sequence[str] | None = None,
    client: SlurmClient | None = None,
    **slurm: Any,
) -> HpcExecutor:
    """A submitit executor whose jobs get the site's scripts, binding and requeue behaviour.

    Args:
        site: Site name, path or loaded config (default: ``$HPCJOBS_SITE``, the user file's
            ``site``, else the site matching this host).
        partition: Partition (default: the site's).
        nodes: Number of nodes (default 1).
        gpus_per_node: GPUs per node (default: all of the partition's); one rank per GPU.
        folder: Shared folder for pickles, logs, event logs and checkpoints (default: the
            site's ``slurm.output_dir`` for a job named ``submitit``).
        python: Absolute path of the Python that runs the tasks (default: this one).
        client: Slurm client to submit through (default: local Slurm commands).
        **slurm: Further executor parameters (see ``docs/python-api.md``); submitit's
            ``update_parameters`` takes the same names later.

    Returns:
        An :class:`hpcjobs.submitit.executor.HpcExecutor` (a ``submitit.SlurmExecutor``).

    Raises:
        BadInputError: An unknown parameter (its message lists the valid ones), or a request
            the site cannot run (exit 2).
        ConfigError: The site cannot be found or is invalid.
    """
    from hpcjobs.submitit.executor import make_executor

    given = {"partition": partition, "nodes": nodes, "gpus_per_node": gpus_per_node}
    parameters = {k: v for k, v in given.items() if v is not None}
    return make_executor(site, folder=folder, python=python, client=client, **parameters, **slurm)


#: The public names a training script needs, and the module each lives in. Pinned by
#: ``tests/unit/test_public_api.py``; docs/python-api.md, "The public API".
PUBLIC = {
    "Resumable": "hpcjobs.runtime.resumable",
    "Interrupted": "hpcjobs.runtime.resumable",
    "CheckpointDir": "hpcjobs.runtime.checkpoint",
    "Checkpoint": "hpcjobs.runtime.checkpoint",
    "StopFlag": "hpcjobs.runtime.stopflag",
    "init_process_group": "hpcjobs.runtime.distributed",
    "leave_process_group": "hpcjobs.runtime.distributed",
    "micro_batches": "hpcjobs.runtime.distributed",
    "accumulation_scale": "hpcjobs.runtime.distributed",
    "report_step": "hpcjobs.runtime.checkpoint",
    "ProgressWriter": "hpcjobs.runtime.progress",
}


def __getattr__(name: str) -> Any:
    """The names of :data:`PUBLIC`, imported on first use."""
    from hpcjobs.lazy import lazy_name

    value = lazy_name(__name__, PUBLIC, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *PUBLIC})


__all__ = [
    "Checkpoint",
    "CheckpointDir",
    "Interrupted",
    "ProgressWriter",
    "Resumable",
    "StopFlag",
    "__version__",
    "accumulation_scale",
    "executor",
    "init_process_group",
    "leave_process_group",
    "micro_batches",
    "report_step",
]
