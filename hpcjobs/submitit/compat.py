"""Every use of submitit's own modules, in one place, pinned to the releases we support.

hpcjobs subclasses submitit's Slurm executor, job and sacct watcher and overrides some of their
private methods, so a submitit release may change what hpcjobs relies on. Only this module
imports submitit (ruff's banned-API rule says so), and tests/unit/test_submitit_compat.py checks
that the installed release is one of :data:`SUPPORTED` and still has what is overridden.
"""

from __future__ import annotations

import submitit
from submitit.core import core, utils
from submitit.slurm import slurm

#: The submitit releases hpcjobs is tested with (``pyproject.toml`` asks for the same range).
SUPPORTED = ((1, 5), (1, 6))

#: submitit's private methods and attributes that hpcjobs overrides or reads.
OVERRIDDEN = {
    slurm.SlurmExecutor: (
        "_valid_parameters",
        "_internal_update_parameters",
        "_num_tasks",
        "_submitit_command_str",
        "_make_submission_file_text",
        "_internal_process_submissions",
        "_submit_command",
        "_throttle",
    ),
    slurm.SlurmJob: ("_get_outcome_and_result", "_get_logs_string"),
    slurm.SlurmInfoWatcher: ("get_state", "is_done", "get_info"),
    utils.DelayedSubmission: ("_checkpoint_function", "set_timeout"),
}


def version() -> tuple[int, ...]:
    """The installed submitit's version, as numbers."""
    return tuple(int(part) for part in submitit.__version__.split(".")[:3] if part.isdigit())


def supported(installed: tuple[int, ...] | None = None) -> bool:
    """Whether ``installed`` (default: the installed release) is in :data:`SUPPORTED`."""
    low, high = SUPPORTED
    return low <= (installed or version())[:2] < high


__all__ = ["OVERRIDDEN", "SUPPORTED", "core", "slurm", "supported", "utils", "version"]
