"""A job file for a planned layout, ready for ``hpcjobs submit -f``.

The file is the job-file format of :mod:`hpcjobs.script.jobspec` (docs/templates.md): nodes, GPUs
per node, the torchrun launcher, and the layout in ``HPCJOBS_PLAN_*`` variables, for the
training script to turn into Megatron-LM (``--tensor-model-parallel-size "$HPCJOBS_PLAN_TP"``),
DeepSpeed (``"zero_optimization": {"stage": ...}``) or FSDP arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from hpcjobs.atomicfile import READABLE, write_atomic
from hpcjobs.errors import BadInputError
from hpcjobs.plan.memory import Layout, Precision
from hpcjobs.script.jobspec import parse_spec


def plan_env(
    layout: Layout, *, global_batch: int, seq_len: int, precision: Precision
) -> dict[str, str]:
    """The ``HPCJOBS_PLAN_*`` variables of ``layout`` (all text)."""
    return {
        "HPCJOBS_PLAN_TP": str(layout.tp),
        "HPCJOBS_PLAN_PP": str(layout.pp),
        "HPCJOBS_PLAN_DP": str(layout.dp),
        "HPCJOBS_PLAN_ZERO": str(layout.zero),
        "HPCJOBS_PLAN_RECOMPUTE": layout.recompute,
        "HPCJOBS_PLAN_SP": "1" if layout.sp else "0",
        "HPCJOBS_PLAN_MICRO_BATCH": str(layout.micro_batch),
        "HPCJOBS_PLAN_GLOBAL_BATCH": str(global_batch),
        "HPCJOBS_PLAN_SEQ_LEN": str(seq_len),
        "HPCJOBS_PLAN_PRECISION": precision,
    }


def job_data(
    layout: Layout,
    *,
    partition: str,
    gpus_per_node: int,
    global_batch: int,
    seq_len: int,
    precision: Precision,
    command: Sequence[str] = (),
    name: str | None = None,
    spare_nodes: int | None = None,
) -> dict[str, Any]:
    """The job file's fields for ``layout`` on whole nodes of ``partition``.

    Raises:
        BadInputError: The layout's GPUs do not fill whole nodes, or the fields do not make a
            valid job spec.
    """
    if layout.gpus % gpus_per_node and layout.gpus > gpus_per_node:
        raise BadInputError(
            f"{layout.gpus} GPUs do not fill whole nodes of {gpus_per_node} GPUs",
            hint="plan for a multiple of the GPUs per node",
        )
    nodes = max(1, layout.gpus // gpus_per_node)
    data: dict[str, Any] = {
        "name": name or "planned",
        "partition": partition,
        "nodes": nodes,
        "gpus_per_node": min(layout.gpus, gpus_per_node),
        **({} if spare_nodes is None else {"spare_nodes": spare_nodes}),
        "launcher": "torchrun",
        "env": plan_env(layout, global_batch=global_batch, seq_len=seq_len, precision=precision),
    }
    if command:
        data["command"] = list(command)
    parse_spec(data, source="the planned job")  # the file must read back as a job
    return data


def write_job_file(path: Path, data: dict[str, Any], *, header: str, force: bool) -> Path:
    """Write ``data`` as YAML to ``path`` (atomically; an existing file only with ``force``).

    Raises:
        BadInputError: The file exists (without ``force``) or cannot be written.
    """
    if path.exists() and not force:
        raise BadInputError(
            f"{path} exists; not overwriting it", hint="pass --force, or another --apply path"
        )
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    text = comment + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    try:
        write_atomic(path, text, mode=READABLE)
    except OSError as exc:
        raise BadInputError(f"cannot write job file {path}: {exc.strerror}") from None
    return path


__all__ = ["job_data", "plan_env", "write_job_file"]
