"""Why a run of a chain ended: the one vocabulary of causes.

Budgets (``requeue.max_requeues`` in a site config, ``--max-requeues``), the event log, ``hpcjobs
history`` and ``hpcjobs report`` all take their names from here (docs/requeue.md, "Causes").
"""

from __future__ import annotations

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
