"""Talking to Slurm: parsers, error classes, retries, and the :class:`SlurmClient`.

* :mod:`~hpcjobs.slurm.parse`: pure parsers of squeue/sacct/sbatch/scontrol output.
* :mod:`~hpcjobs.slurm.classify`: transient, ambiguous or permanent failures.
* :mod:`~hpcjobs.slurm.retry`: the tenacity retry policy every command shares.
* :mod:`~hpcjobs.slurm.client`: :class:`SlurmClient`, one method per Slurm command.
* :mod:`~hpcjobs.slurm.backend`: CLI tools by default, pyslurm when it matches.
* :mod:`~hpcjobs.slurm.arrays`: array specs, split to fit ``MaxArraySize``.
* :mod:`~hpcjobs.slurm.statusquery`, :mod:`~hpcjobs.slurm.history`: status and per-run history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hpcjobs.slurm.classify import (
        AccountingDisabledError,
        ErrorKind,
        SlurmCommandError,
        UnknownJobError,
    )
    from hpcjobs.slurm.client import SlurmClient
    from hpcjobs.slurm.retry import SLURM_RETRY

#: The names this package offers, and their modules: imported on first use, so that a module
#: of the package (the time syntax, the error classes) loads without the client.
_LAZY = {
    "SLURM_RETRY": "hpcjobs.slurm.retry",
    "AccountingDisabledError": "hpcjobs.slurm.classify",
    "ErrorKind": "hpcjobs.slurm.classify",
    "SlurmClient": "hpcjobs.slurm.client",
    "SlurmCommandError": "hpcjobs.slurm.classify",
    "UnknownJobError": "hpcjobs.slurm.classify",
}


def __getattr__(name: str) -> Any:
    from hpcjobs.lazy import lazy_name

    return lazy_name(__name__, _LAZY, name)


__all__ = [
    "SLURM_RETRY",
    "AccountingDisabledError",
    "ErrorKind",
    "SlurmClient",
    "SlurmCommandError",
    "UnknownJobError",
]
