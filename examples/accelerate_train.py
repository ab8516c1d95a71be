"""An Accelerate training loop under hpcjobs, with its checkpoints in two calls
(docs/frameworks.md).

    hpcjobs submit -N 1 --gpus-per-node 1 -t 1:00 -- python examples/accelerate_train.py

:class:`hpcjobs.runtime.integrations.accelerate.Checkpoints` resumes from the newest complete
checkpoint in ``$HPCJOBS_CHECKPOINT_DIR``, reports each step to hpcjobs, saves every
``--save-every`` steps and, on the job's warning, saves at the step's end, asks hpcjobs to
continue the run and leaves the loop.

A tiny regression model on random data, on the CPU. ``--trace FILE`` appends ``<pid> <step>``
for every step the main process trains (the tests count redone steps).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from accelerate import Accelerator

from hpcjobs.runtime.integrations.accelerate import Checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--trace", default="")
    args = parser.parse_args()
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    ckpt = Checkpoints(accelerator)
    start = ckpt.resume()
    for step in range(start, args.steps):
        generator = torch.Generator().manual_seed(step)  # the data depends on the step only
        x = torch.randn(16, 16, generator=generator)
        y = torch.randn(16, 1, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if args.trace and accelerator.is_main_process:
            with open(args.trace, "a") as handle:
                handle.write(f"{os.getpid()} {step}\n")
        time.sleep(args.step_time)
        if ckpt.step_end(step, every=args.save_every):
            break


if __name__ == "__main__":
    main()
