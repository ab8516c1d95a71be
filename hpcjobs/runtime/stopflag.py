"""A stop flag that training loops poll: set when Slurm warns that the job must stop.

hpcjobs jobs receive a warning signal (``$HPCJOBS_SIGNAL``, default SIGUSR2) before preemption
or the time limit, and SIGTERM in other cases. :class:`StopFlag` turns either into a flag. In a
``torch.distributed`` job, :meth:`StopFlag.should_stop` makes every rank agree (a MAX all-reduce),
so no rank is left waiting inside a collective while the others checkpoint and exit.

Typical use::

    stop = StopFlag.install()
    for step in range(start, total):
        train_step()
        if stop.should_stop():          # collective in distributed jobs: call it on every rank
            save_checkpoint(step)
            break
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from types import FrameType
from typing import Any

from hpcjobs.contract.jobenv import ENV_SIGNAL
from hpcjobs.safetext import check_signal_name

log = logging.getLogger(__name__)

DEFAULT_SIGNAL = "USR2"


def signal_from_env(default: str = DEFAULT_SIGNAL) -> signal.Signals:
    """The warning signal named by ``$HPCJOBS_SIGNAL`` (``USR2``, ``SIGUSR2`` or a number)."""
    value = os.environ.get(ENV_SIGNAL, default).strip()
    try:
        if value.isascii() and value.isdigit():
            return signal.Signals(int(value))
        return signal.Signals[f"SIG{check_signal_name(value)}"]
    except ValueError:
        log.warning("unknown %s=%r, using SIG%s", ENV_SIGNAL, value, default)
        return signal.Signals[f"SIG{default}"]


class StopFlag:
    """Set by the warning signal or SIGTERM; read with :meth:`is_set` or :meth:`should_stop`.

    The flag is a plain attribute, not a lock-guarded ``threading.Event``: Python runs a signal
    handler in the main thread between two of its lines, so a handler that waited for a lock
    the main thread held (inside :meth:`set`, called when a peer rank saw the signal first)
    would wait forever. Assigning an attribute needs no lock, and nothing waits on the flag.
    """

    def __init__(self) -> None:
        self._raised = False
        self.signal_name: str | None = None
        self.received_at: float | None = None

    @classmethod
    def install(cls, signals: tuple[signal.Signals, ...] | None = None) -> StopFlag:
        """Create a flag and install it as the handler of the warning signal and SIGTERM.

        Must be called from the main thread (a Python rule for signal handlers).
        """
        flag = cls()
        for sig in signals or (signal_from_env(), signal.SIGTERM):
            signal.signal(sig, flag._handle)
        return flag

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self._raised:
            self.signal_name = signal.Signals(signum).name
            self.received_at = time.time()
        self._raised = True

    def set(self, reason: str = "manual") -> None:
        """Raise the flag by hand (for tests, or an application-level stop)."""
        self.signal_name = self.signal_name or reason
        self.received_at = self.received_at or time.time()
        self._raised = True

    def is_set(self) -> bool:
        """This process's flag, without talking to other ranks."""
        return self._raised

    def should_stop(self) -> bool:
        """True on every rank if any rank got the signal.

        In a job where ``torch.distributed`` is initialised this is a collective: every rank
        must call it at the same point of the loop. Elsewhere it is :meth:`is_set`.
        """
        local = self._raised
        dist = initialised_dist()
        if dist is None:
            return local
        import torch

        flag = torch.tensor([1 if local else 0], dtype=torch.int32)
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        agreed = bool(flag.item())
        if agreed and not local:
            self.set("peer")
        return agreed


def initialised_dist() -> Any:
    """``torch.distributed`` if torch is already imported and a process group is up."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch without distributed support
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None
