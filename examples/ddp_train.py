"""A small, deterministic DDP training run that survives preemption.

It trains an MLP on synthetic data with torch.distributed (gloo on CPU, nccl on GPUs),
checkpoints atomically with hpcjobs.runtime.checkpoint, stops cleanly on Slurm's warning
signal with hpcjobs.runtime.stopflag (every rank agrees), and resumes from the newest complete
checkpoint. The final weights do not depend on how often the run was interrupted, so the
printed digest of an interrupted run equals that of an uninterrupted one on as many ranks.

A step is ``--micro-batches`` micro-batches (default: the first run's ranks, kept in the
checkpoints), shared by the ranks (gradient accumulation,
hpcjobs.runtime.distributed.micro_batches): the global batch, and so the training, stays the
same at any world size, and a checkpoint loads at any world size. An elastic job (``-N
MIN-MAX``) that goes on with fewer nodes follows the same loss curve, up to float rounding (the
sums add in another order).

Run it through hpcjobs, for example::

    hpcjobs submit -N 2 --launcher torchrun --checkpoint-dir ckpt -- \\
        python examples/ddp_train.py --steps 200

or directly (single process): ``python examples/ddp_train.py --steps 20``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hpcjobs import (
    Checkpoint,
    CheckpointDir,
    StopFlag,
    accumulation_scale,
    init_process_group,
    leave_process_group,
    micro_batches,
)

IN, HIDDEN, OUT, BATCH = 32, 64, 4, 16


def make_model() -> nn.Module:
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT))


def batch(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same data for a (step, micro-batch) pair in every run, whatever its ranks."""
    gen = torch.Generator().manual_seed(step * 1000 + micro)
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


def step_size(requested: int, last: Checkpoint | None, world_size: int) -> int:
    """The micro-batches of a step: ``requested``, else those the run's checkpoints keep (its
    first start's), else ``world_size`` (this is the first start)."""
    kept = last.meta.get("micro_batches") if last is not None else None
    return requested or (kept if isinstance(kept, int) else 0) or world_size


def train_step(
    ddp: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    step: int,
    mine: list[int],
    scale: float,
) -> torch.Tensor:
    """One optimizer step over this rank's micro-batches ``mine``; this rank's share of the
    step's mean loss (its losses times ``scale``, summed)."""
    optimizer.zero_grad()
    loss = torch.tensor(0.0)
    for i in mine:
        x, y = batch(step, i)
        # Gradients add up on each rank; DDP averages over the ranks at the last micro-batch.
        with ddp.no_sync() if i != mine[-1] else contextlib.nullcontext():
            part = nn.functional.mse_loss(ddp(x), y) * scale
            part.backward()
        loss = loss + part.detach()
    optimizer.step()
    return loss


def log_loss(path: str, step: int, share: torch.Tensor, rank: int, world_size: int) -> None:
    """Rank 0 appends the step's mean loss over all its micro-batches (every rank takes part)."""
    total = share.clone()
    dist.all_reduce(total)  # the shares add up to world_size times the mean
    if rank == 0:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{step} {total.item() / world_size!r}\n")


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
    parser.add_argument(
        "--micro-batches",
        type=int,
        default=0,
        help="per step, shared by the ranks, 1 each at least (default: the first run's ranks)",
    )
    parser.add_argument("--loss-log", default=None, help="rank 0 appends 'step loss' lines here")
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
    warm_up(ddp, rank)
    # The global batch of the run's first start, whatever the ranks of this one.
    micro = step_size(args.micro_batches, last, info.world_size)
    mine = list(micro_batches(micro, rank, info.world_size))
    scale = accumulation_scale(micro, info.world_size)
    say(f"{micro} micro-batches of {BATCH} per step, {len(mine)} on rank 0")

    def save(step: int) -> None:
        # Model and optimizer are replicated: rank 0 writes, everyone waits for it.
        if rank == 0:
            with ckpt.save(step, {"loss": own_loss(), "micro_batches": micro}) as folder:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save(state, folder / "state.pt")
        dist.barrier()

    def own_loss() -> float:
        """The mean loss of this rank's micro-batches at the last step."""
        return loss.item() / (scale * len(mine))

    loss = torch.tensor(0.0)
    for step in range(start, args.steps):
        loss = train_step(ddp, optimizer, step, mine, scale)
        if args.loss_log:
            log_loss(args.loss_log, step, loss, rank, info.world_size)
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
            say(f"step {step + 1}/{args.steps} loss {own_loss():.5f} (checkpoint)")

    final = digest(model)
    if rank == 0:
        ckpt.mark_done({"digest": final, "steps": args.steps})
    say(f"finished {args.steps} steps; final weights digest {final}")
    leave_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
