"""The executor's parameters: their names, submitit's aliases, and how each becomes part of
the job spec or an sbatch option."""

from __future__ import annotations

import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.errors import BadInputError
from hpcjobs.safetext import MAX_COUNT, check_int, require_safe

#: Executor parameters and what each one sets (defaults in parentheses).
PARAMETERS: dict[str, str] = {
    "job_name": "job name (the function's name)",
    "partition": "partition (the site's default)",
    "nodes": "number of nodes (1)",
    "gpus_per_node": "GPUs per node (all of the partition's)",
    "ntasks_per_node": "ranks per node (one per GPU)",
    "cpus_per_task": "CPUs per rank (the node's CPUs shared by the ranks)",
    "time": "time limit: minutes (int) or Slurm time text (the site's)",
    "account": "account to charge (the site's)",
    "qos": "quality of service (the site's)",
    "mem": "memory per node, sbatch syntax, e.g. '64G'",
    "mem_per_cpu": "memory per CPU, sbatch syntax",
    "mem_per_gpu": "memory per GPU, sbatch syntax",
    "constraint": "node features, sbatch syntax",
    "exclude": "nodes to avoid",
    "nodelist": "nodes to use",
    "exclusive": "whole nodes (True, or 'user'/'mcs')",
    "reservation": "reservation to run in",
    "mail_type": "mail events, e.g. 'END,FAIL'",
    "mail_user": "mail address",
    "comment": "job comment",
    "dependency": "Slurm dependency, e.g. 'afterok:1234'",
    "array_parallelism": "most array tasks running at once (256)",
    "additional_parameters": "other sbatch options, {'name': value} (True for a flag)",
    "env": "variables for the job, {'NAME': 'value'}",
    "checkpoint_dir": "folder holding one checkpoint folder per job (FOLDER/checkpoints)",
    "signal": "warning signal (the site's, e.g. USR2)",
    "signal_delay_s": "seconds between the warning signal and the time limit (the site's)",
    "max_requeues": "requeue budget: N in total, or {cause: N} (the site's)",
    "requeue": "come back after preemption, time limit or node failure (True)",
    "nccl_debug": "NCCL debugging variables (False)",
    "bind": "per-rank CPU/GPU/NIC binding (True)",
}

#: submitit's names for the same parameters (``update_parameters(timeout_min=60)`` works).
ALIASES: dict[str, str] = {
    "name": "job_name",
    "timeout_min": "time",
    "tasks_per_node": "ntasks_per_node",
    "mem_gb": "mem",
}

#: Parameters passed to sbatch as they are (``mem_per_cpu`` -> ``--mem-per-cpu``).
SBATCH_PARAMETERS = (
    "mem",
    "mem_per_cpu",
    "mem_per_gpu",
    "constraint",
    "exclude",
    "nodelist",
    "exclusive",
    "reservation",
    "mail_type",
    "mail_user",
    "comment",
)


class UnknownParameterError(BadInputError, ValueError):
    """An executor parameter hpcjobs does not know (also a ValueError, as in submitit)."""


def python_argv(python: str | Sequence[str] | None) -> list[str]:
    if python is None:
        argv = [str(Path(sys.executable).absolute())]
    elif isinstance(python, str):
        argv = shlex.split(python)
    else:
        argv = [str(item) for item in python]
    if not argv or not os.path.isabs(argv[0]):
        raise BadInputError(
            f"the executor's python must be an absolute path, not {python!r}",
            hint="for example python='/opt/venv/bin/python'; jobs do not search PATH for it",
        )
    return argv


def requeue_fields(p: Mapping[str, Any]) -> dict[str, Any] | None:
    fields: dict[str, Any] = {}
    if p.get("signal") is not None:
        fields["signal"] = p["signal"]
    if p.get("signal_delay_s") is not None:
        fields["lead_time"] = p["signal_delay_s"]
    if p.get("requeue") is not None:
        fields["enabled"] = p["requeue"]
    budget = p.get("max_requeues")
    if isinstance(budget, Mapping):
        causes = {str(k).replace("-", "_"): v for k, v in budget.items()}
        total = causes.pop("total", None)
        fields["max_requeues"] = causes
        if total is not None:
            fields["max_total"] = total
    elif budget is not None:
        fields["max_total"] = budget
    return fields or None


def sbatch_options(p: Mapping[str, Any]) -> list[str]:
    options: list[tuple[str, Any]] = [(k, p[k]) for k in SBATCH_PARAMETERS if k in p]
    extra = p.get("additional_parameters") or {}
    if not isinstance(extra, Mapping):
        raise BadInputError(
            "additional_parameters must be a mapping of sbatch option names to values",
            hint="for example additional_parameters={'gres-flags': 'enforce-binding'}",
        )
    options += list(extra.items())
    result = []
    for key, value in options:
        name = str(key).replace("_", "-").lstrip("-")
        if value is None or value is False:
            continue
        # Named here, not later as "sbatch_options[N]", so the message says which parameter.
        where = f"additional_parameters[{key!r}]" if key in extra else str(key)
        require_safe(str(key), f"executor parameter name {where}")
        if value is not True:
            require_safe(str(value), f"executor parameter {where}")
        result.append(f"--{name}" if value is True else f"--{name}={value}")
    return result


def array_spec(count: int, p: Mapping[str, Any]) -> str:
    try:
        parallel = check_int(p.get("array_parallelism") or 256, minimum=1, text_ok=True)
    except ValueError as exc:
        raise BadInputError(f"invalid executor parameter array_parallelism: {exc}") from None
    return f"0-{count - 1}%{max(1, min(count, parallel))}"


def mem_from_gb(value: Any) -> str:
    hint = "give the memory per node in GB, for example mem_gb=64 or mem_gb=1.5"
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        if not 1 <= value * 1024 <= MAX_COUNT:
            raise BadInputError(f"invalid executor parameter mem_gb: {value!r}", hint=hint)
        return f"{int(value * 1024)}M"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return f"{check_int(value, minimum=1, maximum=MAX_COUNT // 1024)}G"
    except ValueError as exc:
        raise BadInputError(f"invalid executor parameter mem_gb: {exc}", hint=hint) from None


def minutes(time_text: str | None) -> int:

    seconds = parse_slurm_time(time_text) if time_text else None
    return (seconds or 0) // 60


def callable_name(function: object) -> str:
    name = getattr(function, "__name__", None) or type(function).__name__
    return str(name)
