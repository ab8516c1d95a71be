"""What every integration shares with hpcjobs: the warning, progress reports, and the request
to continue the run (docs/frameworks.md)."""

from __future__ import annotations

import contextlib
import os
import signal

from hpcjobs.contract.jobenv import ENV_CHECKPOINT_DIR, ENV_SIGNAL
from hpcjobs.runtime.checkpoint import CheckpointDir, report_step
from hpcjobs.runtime.progress import current_rank
from hpcjobs.runtime.stopflag import StopFlag, signal_from_env
from hpcjobs.runtime.supervisor.requeuerequest import request_continuation

__all__ = ["JobLink", "request_continuation"]


class JobLink:
    """The warning flag (the job's warning signal only: SIGTERM stays the framework's) and the
    progress reports of one rank."""

    def __init__(self) -> None:
        self.rank = current_rank()
        self.stop = StopFlag()
        if os.environ.get(ENV_SIGNAL):
            with contextlib.suppress(ValueError):  # not the main thread: no warning handler
                signal.signal(signal_from_env(), self.stop._handle)
        folder = os.environ.get(ENV_CHECKPOINT_DIR, "")
        self.checkpoints = CheckpointDir(folder) if folder else None

    def step(self, step: int) -> None:
        """Report ``step`` reached: every rank to its node's progress folder, global rank 0
        also to the checkpoint folder's ``PROGRESS`` (what ``history`` reads)."""
        if self.rank == 0 and self.checkpoints is not None:
            with contextlib.suppress(OSError):
                self.checkpoints.note_progress(step)
                return
        report_step(step)

    def should_stop(self) -> bool:
        """Whether any rank got the warning (a collective under torch.distributed: every rank
        calls it at the same point)."""
        return self.stop.should_stop()
