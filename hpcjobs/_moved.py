"""Old import paths of modules that moved (under :mod:`hpcjobs.runtime` in 0.1.0; Slurm's time
syntax to :mod:`hpcjobs.slurm.slurmtime`; the executor's job objects to
:mod:`hpcjobs.submitit.hpcjob`, so that one module only is called ``jobs``). Each still works,
with a :class:`DeprecationWarning`, until the next release removes it."""

from __future__ import annotations

import importlib
import sys
import warnings

#: Old module -> where it lives now.
MOVED = {
    "hpcjobs.checkpoint": "hpcjobs.runtime.checkpoint",
    "hpcjobs.config.slurmtime": "hpcjobs.slurm.slurmtime",
    "hpcjobs.distributed": "hpcjobs.runtime.distributed",
    "hpcjobs.resumable": "hpcjobs.runtime.resumable",
    "hpcjobs.stopflag": "hpcjobs.runtime.stopflag",
    "hpcjobs.submitit.jobs": "hpcjobs.submitit.hpcjob",
}


def forward(old: str) -> None:
    """Make the module ``old`` the module it moved to (the same objects, pickles included),
    and warn the importer."""
    new = MOVED[old]
    public = (
        " (or import the name from 'hpcjobs' itself)" if new.startswith("hpcjobs.runtime.") else ""
    )
    warnings.warn(
        f"'{old}' moved to '{new}'{public}; the old path goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
