"""Slurm job states: which are final, which mean success, and which may turn into a requeue."""

from __future__ import annotations

from hpcjobs.errors import EXIT_JOB_FAILED, EXIT_OK

#: The job will not change any more (unless an admin requeues it).
TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
    }
)

#: Final only if the job is not requeued: Slurm shows these briefly before it requeues a job.
MAY_REQUEUE = frozenset({"PREEMPTED", "NODE_FAIL"})

#: Waiting for a person (``scontrol release``): not final, but nothing happens by itself.
HELD = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})

SUCCESS = "COMPLETED"


def is_terminal(state: str) -> bool:
    """True if a job in ``state`` has ended."""
    return state in TERMINAL


def exit_code_for(states: list[str] | tuple[str, ...]) -> int:
    """The CLI exit status for jobs that ended in ``states``: 0 if all COMPLETED, else 1."""
    return EXIT_OK if states and all(s == SUCCESS for s in states) else EXIT_JOB_FAILED
