"""Deprecated path of :mod:`hpcjobs.submitit.hpcjob` (see :mod:`hpcjobs._moved`)."""

from hpcjobs._moved import forward

forward(__name__)
