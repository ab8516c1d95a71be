"""Deprecated path of :mod:`hpcjobs.runtime.checkpoint` (see :mod:`hpcjobs._moved`)."""

from hpcjobs._moved import forward

forward(__name__)
