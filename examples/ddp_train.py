"""A small, deterministic DDP training run that survives preemption.

It trains an MLP on synthetic data with torch.distributed (gloo on CPU, nccl on GPUs),
checkpoints atomically with hpcjobs.runtime.checkpoint, stops cleanly on Slurm's warning
signal with hpcjobs.runtime.stopflag (every rank agrees), and resumes from the newest complete
checkpoint. The final weights do not depend on how often the run was interrupted, so the
printed digest of an interrupted run equals that of an uninterrupted one.

Run it through hpcjobs, for example::

    hpcjobs submit -N 2 --launcher torchrun --checkpoint-dir ckpt -- \\
        python examples/ddp_train.py --steps 200

or directly (single process): ``python examples/ddp_train.py --steps 20``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.runtime.distributed import init_process_group, leave_process_group
from hpcjobs.runtime.stopflag import StopFlag

IN, HIDDEN, OUT, BATCH = 32, 64, 4, 16


def make_model() -> nn.Module:
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data for a (step, rank) pair in every run, interrupted or not."""
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(BATCH, IN, generator=gen)
    y = torch.sin(x[:, :OUT] * 3.0) + 0.1 * x[:, OUT : 2 * OUT]
    return x, y


def warm_up(ddp: DistributedDataParallel, rank: int) -> None:
    """One forward/backward that changes nothing, so that every real step uses the same buckets.

    DDP reorders its gradient buckets after the first backward pass. The order decides how
    gloo/NCCL split each bucket, and so the order in which floats are added. Without this, the
    first step after a resume would add in a different order than the same step of an
    uninterrupted run, and the weights would differ in the last bits.
    """
    x, _ = batch(0, rank)
    (ddp(x).sum() * 0.0).backward()
    for param in ddp.parameters():
        param.grad = None


def digest(model: nn.Module) -> str:
    sha = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        sha.update(name.encode())
        # repr() of a Python float is exact, so this hashes the weights bit for bit.
        sha.update(repr(tensor.detach().cpu().flatten().tolist()).encode())
    return sha.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.2, help="simulated work per step (s)")
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--checkpoint-dir", default=None, help="default: $HPCJOBS_CHECKPOINT_DIR")
    args = parser.parse_args()

    stop = StopFlag.install()
    info = init_process_group()
    rank = info.rank
    ckpt = CheckpointDir.from_env(default=args.checkpoint_dir or "checkpoints", keep=3)

    def say(message: str) -> None:
        if rank == 0:
            print(f"[train] {message}", flush=True)

    if ckpt.is_done():
        say(f"already finished: {json.dumps(ckpt.done_result())}")
        return 0

    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    last = ckpt.latest()
    if last is not None:
        state = torch.load(last.path / "state.pt", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = last.step + 1
        restart = os.environ.get("HPCJOBS_RESTART_COUNT", "0")
        say(f"resumed from checkpoint step {last.step} (restart {restart})")
    else:
        say(f"starting from scratch: {args.steps} steps on {info.world_size} ranks")
    ddp = DistributedDataParallel(model)
    loss_fn = nn.MSELoss()
    warm_up(ddp, rank)

    def save(step: int) -> None:
        # Model and optimizer are replicated: rank 0 writes, everyone waits for it.
        if rank == 0:
            with ckpt.save(step, {"loss": loss.item()}) as folder:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save(state, folder / "state.pt")
        dist.barrier()

    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()
        time.sleep(args.step_time)
        if rank == 0:
            ckpt.note_progress(step)
        if stop.should_stop():
            save(step)
            say(f"stop signal ({stop.signal_name}) at step {step}: checkpoint saved, exiting")
            leave_process_group()
            return 0
        if (step + 1) % args.checkpoint_every == 0:
            save(step)
            say(f"step {step + 1}/{args.steps} loss {loss.item():.5f} (checkpoint)")

    final = digest(model)
    if rank == 0:
        ckpt.mark_done({"digest": final, "steps": args.steps})
    say(f"finished {args.steps} steps; final weights digest {final}")
    leave_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
