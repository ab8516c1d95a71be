"""Deprecated path of :mod:`hpcjobs.runtime.distributed` (see :mod:`hpcjobs._moved`)."""

from hpcjobs._moved import forward

forward(__name__)
