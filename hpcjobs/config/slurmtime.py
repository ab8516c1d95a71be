"""Deprecated path of :mod:`hpcjobs.slurm.slurmtime` (see :mod:`hpcjobs._moved`)."""

from hpcjobs._moved import forward

forward(__name__)
