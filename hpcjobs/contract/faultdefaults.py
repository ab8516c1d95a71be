"""The defaults of the fault rules a site tunes in its config's ``faults`` section, defined
once: the site config's model (:class:`hpcjobs.config.models.Faults`), the job's policy (the
supervisor's ``Policy``) and the rules themselves (:mod:`.suspects`, the supervisor's ``pace``
and ``repeats``) read them here. Why each value: docs/faults.md.
"""

from __future__ import annotations

#: Seconds a stalled run gets, after the warning signal, to save a checkpoint.
STALL_GRACE_S = 10
#: Nodes a chain excludes at most (the oldest exclusion is lifted first).
MAX_EXCLUDED_NODES = 8
#: Seconds a site's health check may take on a suspect node.
HEALTH_CHECK_TIMEOUT_S = 60
#: Runs in a row that end with the same fault and get no further before the chain stops (a
#: restart storm; 0: never).
STORM_RUNS = 3
#: Faults within :data:`KEEP_OUT_HOURS` that keep a node out of the user's later jobs (a
#: repeat offender; 0: none is kept out).
KEEP_OUT_FAULTS = 2
KEEP_OUT_HOURS = 24
#: A node below this share of its peers' pace is a straggler (0: none is looked for), judged
#: over :data:`STRAGGLER_WINDOW_S` seconds of progress.
STRAGGLER_RATIO = 0.8
STRAGGLER_WINDOW_S = 60
