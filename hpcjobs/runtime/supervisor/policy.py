"""What the batch script tells its supervisor: the job's requeue and fault policy.

The renderer writes it into the script as one JSON object (``--policy``); its fields are the
site config's ``requeue`` and ``faults`` sections as the job resolved them. Unknown fields are
refused, so that a script and a supervisor of different hpcjobs releases never half-agree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hpcjobs.contract import faultdefaults as defaults
from hpcjobs.contract.causes import CAUSES

#: The policy format this supervisor reads.
FORMAT = 1


class Policy(NamedTuple):
    """The policy one job runs under. A NamedTuple, not a dataclass: the renderer builds one on
    every render, and a NamedTuple class costs a fraction of a dataclass to define. Its sequence
    and mapping fields are read-only (their defaults are shared)."""

    signal: str = "USR2"  #: the warning signal, without SIG
    lead: int = 300  #: seconds before the time limit it comes
    #: The signals forwarded to the step.
    forward: Sequence[str] = ["USR2", "TERM"]
    #: Requeues allowed per cause (a cause left out allows none).
    budgets: Mapping[str, int] = {}
    max_total: int | None = None  #: requeues allowed in total (None: no limit)
    standby: bool = True  #: keep a standby (False for --no-requeue)
    stall_timeout: int = 0  #: seconds without progress that make a stall (0: no watch)
    stall_grace: int = defaults.STALL_GRACE_S  #: seconds a stalled run gets to checkpoint
    max_excluded: int = defaults.MAX_EXCLUDED_NODES  #: nodes a chain excludes at most
    #: Runs in a row that end the same way and get no further before the chain stops (a
    #: restart storm; 0: never).
    storm_runs: int = defaults.STORM_RUNS
    #: The user's suspects file ("": the user's own, :mod:`hpcjobs.contract.suspects`).
    suspects_file: str = ""
    #: Faults within ``keep_out_hours`` that keep a node out of later jobs (0: none is kept out).
    keep_out_faults: int = defaults.KEEP_OUT_FAULTS
    keep_out_hours: int = defaults.KEEP_OUT_HOURS
    #: A node below this share of its peers' pace is a straggler (0: none is looked for;
    #: :mod:`.pace`), judged over ``straggler_window`` seconds.
    straggler_ratio: float = defaults.STRAGGLER_RATIO
    straggler_window: int = defaults.STRAGGLER_WINDOW_S
    health_check: str = ""  #: shell command run on a suspect before it is excluded
    health_timeout: int = defaults.HEALTH_CHECK_TIMEOUT_S
    #: The site's infrastructure signatures (grep -E), searched after hpcjobs' own.
    patterns: Sequence[str] = []
    #: The sbatch options a continuation is submitted with.
    sbatch_args: Sequence[str] = []
    #: The nodes a run takes (0: all of the job's).
    nodes: int = 0
    #: Nodes the job holds beyond ``nodes``, to replace a lost or suspect node within the job
    #: (submitted --no-kill: Slurm takes a failed node out of the job instead of ending it).
    spare_nodes: int = 0
    #: Elastic size: the fewest nodes a run may take (0: ``nodes``). A job whose ``min_nodes``
    #: is below ``nodes`` asks Slurm for a range, and after a fault runs again inside the job on
    #: the nodes left while they are at least this many.
    min_nodes: int = 0
    #: Elastic size: a run takes a multiple of this many nodes (1: any count).
    node_multiple: int = 1
    #: Whether Slurm may add nodes to a running job (the site config's ``job_expansion``;
    #: None: the supervisor asks the controller). A run below its full size that holds no GRES
    #: then grows in place (:mod:`.expansion`).
    job_expansion: bool | None = None

    @property
    def elastic(self) -> bool:
        """Whether a run may take fewer nodes than ``nodes`` (an elastic size)."""
        return 0 < self.min_nodes < self.nodes

    @property
    def in_job(self) -> bool:
        """Whether the chain runs again inside the job after a fault of a node (spare nodes or
        an elastic size; the job is submitted --no-kill)."""
        return self.spare_nodes > 0 or self.elastic


def parse(text: str) -> Policy:
    """The policy in ``text`` (JSON); ValueError when it is not one this supervisor reads."""
    data: Any = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("the policy is not a JSON object")
    if data.pop("format", None) != FORMAT:
        raise ValueError(f"the policy is not in format {FORMAT}")
    known = set(Policy._fields)
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown policy field(s): {', '.join(unknown)}")
    budgets = data.get("budgets", {})
    if not isinstance(budgets, dict) or set(budgets) - set(CAUSES):
        raise ValueError(f"budgets name causes other than {', '.join(CAUSES)}")
    return Policy(**data)


def dump(policy: Policy) -> str:
    """``policy`` as the JSON text :func:`parse` reads (one line, keys sorted)."""
    body = dict(policy._asdict(), format=FORMAT)
    return json.dumps(body, sort_keys=True, separators=(",", ":"))
