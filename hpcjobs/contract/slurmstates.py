"""Slurm job states, the one table: which are final, which may still turn into a requeue, which
wait for a person. Both sides read it: the supervisor (is the run it stood by for over?) and the
submit side (is the job done?)."""

from __future__ import annotations

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


def base_state(state: str) -> str:
    """The state's first word: ``CANCELLED`` of ``CANCELLED by 1000``, ``COMPLETED`` of
    accounting's ``COMPLETED+`` (sacct cuts long words with ``+``)."""
    return state.strip().split(" ", 1)[0].rstrip("+") if state else ""


def is_terminal(state: str) -> bool:
    """True if a job in ``state`` (a state word) has ended."""
    return state in TERMINAL


def has_ended(state: str) -> bool:
    """Whether ``state`` as Slurm prints it (``CANCELLED by 0``, ``COMPLETED+``) is final."""
    return base_state(state) in TERMINAL
