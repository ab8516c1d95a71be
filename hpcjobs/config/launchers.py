"""The launchers a job can start its program with: the one list every layer takes them from.

A launcher's name is valid in a site config's partitions (``launcher:``), in a job file and in
``--launcher``; what it runs is the matching branch of ``templates/blocks/launch.sh.j2``, and
what it needs from the job spec (the processes per node) is ``script/jobspec.py``'s
``_tasks_per_node``. Light on purpose: the command line builds ``--launcher``'s choices from it
without loading the site-config models.
"""

from __future__ import annotations

from typing import Literal, get_args

Launcher = Literal["srun", "torchrun", "none"]

#: Every launcher and what it starts, in the order ``--help`` lists them.
LAUNCHERS: dict[Launcher, str] = {
    "srun": "a task per rank",
    "torchrun": "one per node",
    "none": "run once",
}

assert tuple(LAUNCHERS) == get_args(Launcher), "LAUNCHERS and Launcher must name the same"


def launcher_help() -> str:
    """``srun (a task per rank), torchrun (one per node) or none (run once).``"""
    parts = [f"{name} ({what})" for name, what in LAUNCHERS.items()]
    return f"{', '.join(parts[:-1])} or {parts[-1]}."
