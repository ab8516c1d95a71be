"""Field types and validators shared by the site config's models and the job spec.

Each wraps the one rule in :mod:`hpcjobs.safetext` or :mod:`hpcjobs.config.slurmtime`, so a
site config and a job file refuse the same text the same way. What differs between the two on
purpose stays in its own module: the job spec refuses the variable names hpcjobs manages
(``script/jobspec.py``), and a site config accepts YAML numbers for NCCL values (``models.py``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from hpcjobs.config.slurmtime import parse_slurm_time
from hpcjobs.safetext import check_safe, check_signal_name


def no_control(value: str) -> str:
    """Refuse control and line-separator characters (:func:`hpcjobs.safetext.check_safe`)."""
    return check_safe(value)


def slurm_time(value: str) -> str:
    """Keep ``value`` if it is Slurm time syntax (:func:`parse_slurm_time`)."""
    parse_slurm_time(value)
    return value


def signal_name(value: str) -> str:
    """Keep ``value`` if it names a signal Slurm can send."""
    return check_signal_name(value)


#: Text without control or line-separator characters.
SafeStr = Annotated[str, AfterValidator(no_control)]
#: The name of a signal (``USR2``, ``SIGTERM``).
SignalName = Annotated[str, AfterValidator(signal_name)]
