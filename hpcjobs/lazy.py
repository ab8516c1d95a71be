"""Names a package offers that load on first use (PEP 562): the package's ``__getattr__`` looks
them up here, so ``import hpcjobs`` or a module of ``hpcjobs.slurm`` loads nothing it does not
need. Standard library only (a rank imports ``hpcjobs``)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def lazy_name(package: str, names: Mapping[str, str], name: str) -> Any:
    """``name`` from its module in ``names`` (name -> module), imported now.

    Raises:
        AttributeError: ``package`` offers no such name.
    """
    module = names.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
