"""The sbatch options and environment of a job that continues a chain (a standby, a
continuation, a hand-off): this job's options without the ones for the first submission only,
with the chain's exclusions, its array task and its comment (the chain's token)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from hpcjobs.contract.jobenv import ENV_CHAIN_ROOT

#: The variables that tell a successor which run it stands by for (a standby) or grows (a
#: grower); the supervisor reads them at start.
ENV_STANDBY_FOR = "HPCJOBS_STANDBY_FOR"
ENV_GROW_FOR = "HPCJOBS_GROW_FOR"

#: Options a successor never repeats (it gets its own dependency and array task).
_DROPPED = ("--array=", "--dependency=", "--comment=", "--kill-on-invalid-dep=")
#: The same options with their value in the next argument.
_DROPPED_WITH_VALUE = ("-a", "-d", "--array", "--dependency", "--comment")


def successor_args(
    args: Sequence[str],
    root: str,
    excluded: Sequence[str],
    task: str,
    comment: str,
    nodes: str = "",
) -> list[str]:
    """The options for a successor of a job submitted with ``args``: every run appends to the
    first run's log files (``%j``/``%A`` become ``root``), the chain's ``excluded`` nodes join
    any ``--exclude``, and ``task`` (an array task) and ``comment`` are kept. ``nodes``, when
    given, replaces the node count (``--nodes``: a grower asks for more nodes)."""
    exclude = list(excluded)
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith(_DROPPED):
            continue
        if arg in _DROPPED_WITH_VALUE:
            skip = True
            continue
        if arg.startswith(("-a", "-d")):
            continue
        if arg.startswith("--exclude="):
            exclude.append(arg[len("--exclude=") :])
            continue
        if nodes and arg.startswith("--nodes="):
            arg = "--nodes=" + nodes
        if arg.startswith(("--output=", "--error=")):
            arg = arg.replace("%j", root).replace("%A", root.split("_")[0])
        kept.append(arg)
    if exclude:
        kept.append("--exclude=" + ",".join(exclude))
    if task:
        kept.append("--array=" + task)
    if comment and comment != "(null)":
        kept.append("--comment=" + comment)
    return kept


def successor_env(
    env: Mapping[str, str], root: str, standby_for: str, grow_for: str = ""
) -> dict[str, str]:
    """The environment a successor is submitted with: none of this job's Slurm settings (but
    ``SLURM_CONF``), the chain's root, ``HPCJOBS_STANDBY_FOR`` for a standby and
    ``HPCJOBS_GROW_FOR`` for a grower."""
    clean = {
        k: v
        for k, v in env.items()
        if not re.match(r"(SLURM|SBATCH|SALLOC|SRUN)_", k) or k == "SLURM_CONF"
    }
    clean.pop(ENV_STANDBY_FOR, None)
    clean.pop(ENV_GROW_FOR, None)
    clean[ENV_CHAIN_ROOT] = root
    if standby_for:
        clean[ENV_STANDBY_FOR] = standby_for
    if grow_for:
        clean[ENV_GROW_FOR] = grow_for
    return clean
