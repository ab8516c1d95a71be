"""Accelerate: a training loop's checkpoints in two calls (docs/frameworks.md)::

    ckpt = Checkpoints(accelerator)           # after accelerator.prepare(...)
    start = ckpt.resume()                     # the step to start from (0: none saved)
    for step in range(start, total):
        train_step(step)
        if ckpt.step_end(step, every=100):    # saves every 100 steps and on the warning
            break                             # the warning: saved; hpcjobs continues the run

``accelerator.save_state`` writes into hpcjobs' checkpoint folder (``$HPCJOBS_CHECKPOINT_DIR``,
else ``checkpoints/``), one ``step-<N>`` folder per save, published by the main process once
every process has written (a ``COMPLETE`` marker last): ``hpcjobs history`` and the next run
see the same step.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hpcjobs.contract.jobenv import ENV_CHECKPOINT_DIR
from hpcjobs.runtime.checkpoint import CheckpointDir

from .link import JobLink, request_continuation

#: Where a loop's checkpoints go outside an hpcjobs job.
DEFAULT_DIR = "checkpoints"


class Checkpoints:
    """Resume, report and save an Accelerate loop (see the module docs)."""

    def __init__(self, accelerator: Any, folder: str | None = None, keep: int = 3) -> None:
        self.accelerator = accelerator
        self.link = JobLink()
        root = folder or os.environ.get(ENV_CHECKPOINT_DIR) or DEFAULT_DIR
        self.dir = CheckpointDir(root, keep=keep)

    def resume(self) -> int:
        """Load the newest complete checkpoint; the step to start from (0: none)."""
        latest = self.dir.latest()
        if latest is None:
            return 0
        self.accelerator.load_state(str(latest.path))
        return latest.step + 1

    def save(self, step: int) -> None:
        """Save the state of every process as checkpoint ``step``."""
        acc = self.accelerator
        staging = Path(self.dir.root) / f".staging-{step}"
        if acc.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True, mode=0o700)
        acc.wait_for_everyone()
        acc.save_state(str(staging))
        acc.wait_for_everyone()
        if acc.is_main_process:
            with self.dir.save(step) as folder:
                for item in staging.iterdir():
                    os.replace(item, folder / item.name)
            shutil.rmtree(staging, ignore_errors=True)
        acc.wait_for_everyone()

    def step_end(self, step: int, every: int = 0) -> bool:
        """Report ``step`` finished; save every ``every`` steps, and on the warning (then ask
        hpcjobs to continue the run and return True: leave the loop)."""
        self.link.step(step)
        if self.link.should_stop():
            self.save(step)
            if self.accelerator.is_main_process:
                request_continuation()
            return True
        if every and (step + 1) % every == 0:
            self.save(step)
        return False
