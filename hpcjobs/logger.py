"""How submit-side code logs, and how the command line's ``-v``/``-q`` reach it.

Code below the command line never prints: it logs through :func:`logger`, and the command line
says how much of that to show with :func:`configure` before it runs a command. Neither imports
:mod:`logging` before it is needed: importing it costs about one percent of a whole render
(``benchmarks/cli_startup.py``), and a render has nothing to log. So the command line's
settings wait in this module until the first logger is asked for (or are applied at once when
:mod:`logging` is loaded already), modules that are imported on every command ask for their
logger where they have something to say (``logger(__name__).warning(...)``), and the others
keep one at module level (``log = logger(__name__)``).

The code that runs inside the job (``runtime/``) uses :mod:`logging` directly: there, the
training program configures it. A third-party library that logs by itself, without an hpcjobs
module asking for a logger first in that command, would log with Python's defaults; the ones
hpcjobs uses log through calls made by modules that hold a logger (paramiko through
``remote/``, tenacity through ``backoff.py``), so the settings are in place by then.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

#: How the command line shows a message: ``WARNING hpcjobs.script.jobspec: ...``.
FORMAT = "%(levelname)s %(name)s: %(message)s"
#: The levels of :mod:`logging`, which is not imported to read them.
DEBUG, WARNING, CRITICAL = 10, 30, 50

_pending: int | None = None  # the level configure() asked for, until logging is loaded


def configure(verbosity: int) -> None:
    """Show messages on standard error from ``WARNING`` down ``verbosity`` levels (``-v`` adds
    one, ``-q`` takes one away), between ``DEBUG`` and ``CRITICAL``, in :data:`FORMAT`.

    Applied at once when :mod:`logging` is loaded, else when the first logger is asked for. As
    with :func:`logging.basicConfig`, nothing changes if the root logger has handlers already.
    """
    global _pending
    _pending = max(DEBUG, min(WARNING - 10 * verbosity, CRITICAL))
    if "logging" in sys.modules:
        _apply()


def logger(name: str) -> logging.Logger:
    """The logger of module ``name`` (pass ``__name__``), with the command line's settings."""
    import logging

    if _pending is not None:
        _apply()
    return logging.getLogger(name)


def _apply() -> None:
    global _pending
    import logging

    level, _pending = _pending, None
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stderr)


__all__ = ["FORMAT", "configure", "logger"]
