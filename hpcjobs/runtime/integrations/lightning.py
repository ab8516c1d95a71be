"""PyTorch Lightning: ``Trainer(callbacks=[HpcjobsCallback()])`` (docs/frameworks.md).

At the end of each training batch the callback reports the step to hpcjobs; once the job's
warning came (on any rank) it saves Lightning's own HPC checkpoint (``hpc_ckpt_<N>.ckpt`` in
``default_root_dir``, which Lightning resumes from by itself on Slurm), asks hpcjobs to continue
the run, and stops the training at that step. Without it, Lightning's own SIGUSR1 handling
works too: hpcjobs delivers the warning as SIGUSR1 and honours its ``scontrol requeue``.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from .link import JobLink, request_continuation


class HpcjobsCallback(pl.Callback):  # type: ignore[misc]
    """Reports progress and checkpoints on hpcjobs' warning (see the module docs)."""

    def __init__(self) -> None:
        self.link: JobLink | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.link = self.link or JobLink()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        link = self.link
        if link is None:
            return
        step = trainer.global_step
        link.step(step - 1)  # the last step finished (global_step counts them)
        if not link.should_stop():
            return
        connector = trainer._checkpoint_connector
        trainer.save_checkpoint(connector.hpc_save_path(trainer.default_root_dir))
        if trainer.is_global_zero:
            request_continuation()
        trainer.should_stop = True
