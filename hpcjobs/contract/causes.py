"""Why a run of a chain ended: the one vocabulary of causes.

Budgets (``requeue.max_requeues`` in a site config, ``--max-requeues``), the event log, ``hpcjobs
history`` and ``hpcjobs report`` all take their names from here (docs/requeue.md, "Causes").
"""

from __future__ import annotations

from .slurmstates import base_state

PREEMPTION = "preemption"
TIMEOUT = "timeout"
NODE_FAILURE = "node_failure"
INFRASTRUCTURE = "infrastructure"
STALL = "stall"
APPLICATION = "application"

#: Every cause a chain can be requeued for, in the order budgets are listed.
CAUSES = (PREEMPTION, TIMEOUT, NODE_FAILURE, INFRASTRUCTURE, STALL, APPLICATION)

#: Faults without a warning: the run ends without a signal, and a node may be to blame.
FAULTS = (NODE_FAILURE, INFRASTRUCTURE, STALL)

#: The end of a run that is not a requeue cause: the user cancelled the job.
CANCELLED = "cancelled"
#: The program exited 0 without a warning signal: the chain is finished.
FINISHED = "none"
#: Not an end: a run below its full size made way for its grower, which holds more nodes (the
#: cause of that ``handoff``). It spends no requeue budget.
GROW = "grow"
#: Not a fault: a run that made way, at a checkpoint, for a spare node in place of a node
#: slower than its peers (a straggler; the ``straggler`` event says by how much). It spends no
#: requeue budget.
STRAGGLER = "straggler"

#: How Slurm records the end of a run (a job state, first word) -> its cause, where the state
#: says one. What a state means in context (a batch host that died without a word, a requeue
#: Slurm did itself) is decided in :mod:`.decide`.
SLURM_STATES = {
    "PREEMPTED": PREEMPTION,
    "TIMEOUT": TIMEOUT,
    "DEADLINE": TIMEOUT,
    "NODE_FAIL": NODE_FAILURE,
    "BOOT_FAIL": NODE_FAILURE,
    "FAILED": APPLICATION,
    "OUT_OF_MEMORY": APPLICATION,
    "CANCELLED": CANCELLED,
}


#: The state of an accounting record of a job Slurm resized while it ran (a node it took out
#: of a ``--no-kill`` job, or one released with ``scontrol update NodeList=``: spare nodes). No
#: end of a run: measured on 22.05, such a job has one record per size, every earlier one
#: ``RESIZING``, each with its own start, end, nodes and AllocTRES; the run goes on in the next.
RESIZING = "RESIZING"


def of_slurm_state(state: str) -> str:
    """The cause a Slurm job state names ("" for none: COMPLETED, RUNNING, ...)."""
    return SLURM_STATES.get(base_state(state), "")
