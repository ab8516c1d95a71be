"""What srun wrote to the job's stderr about a run's tasks, read as text.

srun reports the first task that failed (``srun: error: n2: task 1: Exited with exit code 1``),
a node whose slurmd did not take the step's tasks (``srun: error: Task launch for StepId=7.0
failed on node n2: Socket timed out on send/recv operation``) and every node that failed under
a step (``srun: error: Node failure on n2``). The supervisor
reads them from the job's stderr file: this run's part of it for a crash, and everything after
a run's start marker (``hpcjobs[<job>]: run ...``) for the nodes a dead run lost.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_TASK = re.compile(r"^srun: error: ([^ :]+): tasks? ([0-9,-]+): (.*)$", re.M)
NODE_FAILURE = "srun: error: Node failure on "
#: Slurm's step_launch.c: "Task launch for %ps failed on node %s: %m" (22.05 to 26.05).
_LAUNCH = re.compile(r"^srun: error: Task launch for \S+ failed on node ([^ :]+): (.*)$", re.M)


class Failure(NamedTuple):
    """The first task srun reported failed."""

    node: str
    tasks: str  #: as srun wrote them: ``1``, ``0-3`` or ``2,5``
    what: str  #: ``Exited with exit code 1``, ``Killed``, ``Bus error`` ...

    @property
    def first_task(self) -> str:
        return re.split(r"[,-]", self.tasks)[0]


def first_failure(text: str) -> Failure | None:
    """The first task srun reported failed in ``text``, if any."""
    found = _TASK.search(text)
    return Failure(found.group(1), found.group(2), found.group(3)) if found else None


class LaunchFailure(NamedTuple):
    """The first node srun could not start the step's tasks on."""

    node: str
    line: str  #: srun's line, without its ``srun: error: `` prefix


def launch_failure(text: str) -> LaunchFailure | None:
    """The first node srun reported it could not launch tasks on in ``text``, if any."""
    found = _LAUNCH.search(text)
    if found is None:
        return None
    return LaunchFailure(found.group(1), found.group(0)[len("srun: error: ") :].rstrip())


def has_node_failure(text: str) -> bool:
    """Whether srun reported a failed node in ``text``."""
    return any(line.startswith(NODE_FAILURE) for line in text.splitlines())


def failed_hostlists(text: str, job: str) -> list[str]:
    """The hostlists srun named in ``Node failure on ...`` lines after ``job``'s first run
    marker (``hpcjobs[<job>]: run``) in ``text``."""
    mark = f"hpcjobs[{job}]: run "
    named: list[str] = []
    on = False
    for line in text.splitlines():
        if mark in line:
            on = True
            continue
        if on and line.startswith(NODE_FAILURE):
            rest = line[len(NODE_FAILURE) :]
            if rest and " " not in rest:
                named.append(rest)
    return named
