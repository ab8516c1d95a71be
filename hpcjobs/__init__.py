"""hpcjobs: fast, safe multi-node training launches on Slurm."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
