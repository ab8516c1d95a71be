"""PyTorch Lightning under hpcjobs, with Trainer defaults: nothing to add (docs/frameworks.md).

    hpcjobs submit -N 1 --gpus-per-node 1 -t 1:00:00 -- python examples/lightning_train.py

On preemption or the time limit hpcjobs delivers its warning as SIGUSR1, the signal Lightning's
``SLURMEnvironment`` listens for; Lightning saves ``hpc_ckpt_<N>.ckpt`` in its
``default_root_dir`` (the job's working folder) and runs ``scontrol requeue``, which hpcjobs
turns into one continuation; the next run resumes from that file by itself. After a lost node
or a crash (no warning), hpcjobs makes the newest checkpoint of Lightning's ``ModelCheckpoint``
(saved at each epoch's end by default) the one Lightning resumes from.
``--hpcjobs-callback`` adds :class:`hpcjobs.runtime.integrations.lightning.HpcjobsCallback`
(one line): hpcjobs then also knows the step reached, so ``history`` reports the work lost.

A tiny regression model on random data, on the CPU: ``--step-time`` makes each step longer.
``--trace FILE`` appends ``<pid> <step>`` for every step global rank 0 trains (the tests count
redone steps).
"""

from __future__ import annotations

import argparse
import os
import time

import lightning as L
import torch


class Regression(L.LightningModule):
    def __init__(self, step_time: float, trace: str) -> None:
        super().__init__()
        self.net = torch.nn.Linear(16, 1)
        self.step_time = step_time
        self.trace = trace

    def training_step(self, batch: list[torch.Tensor], _index: int) -> torch.Tensor:
        if self.trace and self.global_rank == 0:
            with open(self.trace, "a") as handle:
                handle.write(f"{os.getpid()} {self.global_step}\n")
        time.sleep(self.step_time)
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--samples", type=int, default=4096, help="samples in an epoch")
    parser.add_argument("--trace", default="")
    parser.add_argument("--hpcjobs-callback", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(args.samples, 16), torch.randn(args.samples, 1)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    callbacks = []
    if args.hpcjobs_callback:
        from hpcjobs.runtime.integrations.lightning import HpcjobsCallback

        callbacks.append(HpcjobsCallback())
    nodes = int(os.environ.get("SLURM_NNODES", "1"))
    trainer = L.Trainer(
        max_steps=args.steps, num_nodes=nodes, callbacks=callbacks, enable_progress_bar=False
    )
    trainer.fit(Regression(args.step_time, args.trace), loader)


if __name__ == "__main__":
    main()
