"""The DDP training of ddp_train.py, submitted from Python through ``hpcjobs.executor``.

The model, the data and the digest come from ``ddp_train.py`` (imported, not copied), so both
examples train the same network on the same batches: for the same number of ranks and steps
they print the same digest, whether the run went through the CLI or this API, and however
often it was interrupted.

``Train`` is a :class:`hpcjobs.Resumable`: on the warning signal every rank agrees to stop,
rank 0 saves a checkpoint, and the run exits without a result. hpcjobs continues the job in a
new job, the same ``Train`` is called again and resumes from the checkpoint folder. The job
object returned by ``submit`` follows the continuation, so ``job.result()`` is the digest of
the run that finished.

Run it on the sandbox (``hpcjobs sandbox up``, then ``eval "$(hpcjobs sandbox env)"``)::

    python examples/submitit_ddp.py --site sandbox --nodes 2 --steps 100

or directly, in one process without Slurm: ``python examples/submitit_ddp.py --local``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

EXAMPLES = Path(__file__).resolve().parent
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

from ddp_train import digest, make_model, step_size, train_step, warm_up  # noqa: E402  (next to this file)

import hpcjobs  # noqa: E402
from hpcjobs import accumulation_scale, init_process_group, leave_process_group  # noqa: E402


class Train(hpcjobs.Resumable):
    """Train the example MLP for ``steps`` steps and return the digest of its weights."""

    def __init__(
        self,
        steps: int = 200,
        step_time: float = 0.2,
        checkpoint_every: int = 20,
        micro_batches: int = 0,
    ) -> None:
        self.steps = steps
        self.step_time = step_time
        self.checkpoint_every = checkpoint_every
        #: Per step, whatever the world size (0: the first run's ranks), as in ddp_train.py.
        self.micro = micro_batches

    def __call__(self) -> str:
        info = init_process_group()
        model = make_model()
        # The same optimiser settings as ddp_train.py, so that the digests agree.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        start = 0
        last = self.checkpoints.latest()
        if last is not None:
            state = torch.load(last.path / "state.pt", weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = last.step + 1
            self.say(f"resumed from checkpoint step {last.step} (restart {self.restart_count})")
        else:
            self.say(f"starting from scratch: {self.steps} steps on {info.world_size} ranks")
        ddp = DistributedDataParallel(model)
        warm_up(ddp, info.rank)  # the same gradient buckets on every run (see ddp_train.py)
        micro = step_size(self.micro, last, self.world_size)
        mine = list(self.micro_batches(micro))
        scale = accumulation_scale(micro, self.world_size)

        def write(folder: Path) -> None:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, folder / "state.pt")

        for step in range(start, self.steps):
            share = train_step(ddp, optimizer, step, mine, scale)
            loss = share / (scale * len(mine))  # the mean of this rank's micro-batches
            time.sleep(self.step_time)
            self.note_progress(step)
            if self.stop.should_stop():  # collective: every rank, same place
                self.save(step, write, {"loss": loss.item(), "micro_batches": micro})
                self.interrupted(f"stop signal ({self.stop.signal_name}) at step {step}")
            if (step + 1) % self.checkpoint_every == 0:
                self.save(step, write, {"loss": loss.item(), "micro_batches": micro})
                self.say(f"step {step + 1}/{self.steps} loss {loss.item():.5f} (checkpoint)")

        final = digest(model)
        self.say(f"finished {self.steps} steps; final weights digest {final}")
        leave_process_group()
        return final

    def say(self, message: str) -> None:
        if self.rank == 0:
            print(f"[train] {message}", flush=True)


def make_executor(args: argparse.Namespace) -> Any:
    """An executor for the run; the job imports this folder's modules (PYTHONPATH)."""
    return hpcjobs.executor(
        args.site,
        partition=args.partition,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        folder=args.folder,
        time=args.time,
        env={"PYTHONPATH": str(EXAMPLES), "OMP_NUM_THREADS": "1"},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default=None, help="site name or file (default: $HPCJOBS_SITE)")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=1, help="ranks per node")
    parser.add_argument("--time", default="00:10:00")
    parser.add_argument("--folder", default=None, help="executor folder (default: the site's)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--step-time", type=float, default=0.2)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--local", action="store_true", help="run here, in one process")
    args = parser.parse_args()

    train = Train(args.steps, args.step_time, args.checkpoint_every)
    if args.local:
        # One process, no Slurm: a fresh checkpoint folder unless one is named.
        os.environ.setdefault("HPCJOBS_CHECKPOINT_DIR", tempfile.mkdtemp(prefix="ddp-ckpt-"))
        print(train())
        return 0
    executor = make_executor(args)
    job = executor.submit(train)
    print(f"submitted job {job.job_id}; logs in {executor.folder}", flush=True)
    result = job.result()
    for cut in job.chain().interruptions():
        print(
            f"interrupted ({cut.cause}) in job {cut.job_id}, resumed as job "
            f"{cut.resumed_job_id} from step {cut.resumed_from}",
            flush=True,
        )
    print(f"final weights digest {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
