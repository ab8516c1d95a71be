"""Deprecated path of :mod:`hpcjobs.runtime.stopflag` (see :mod:`hpcjobs._moved`)."""

from hpcjobs._moved import forward

forward(__name__)
