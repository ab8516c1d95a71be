"""A workload for the report tests: it reports progress every step and checkpoints every
``--checkpoint-every`` steps, but on the warning signal it exits *without* checkpointing, so
the next run redoes the steps since the last checkpoint (what ``hpcjobs report`` calls steps
redone). Rank 0 notes its progress through ``CheckpointDir.note_progress``, the other ranks
through ``hpcjobs.runtime.progress.ProgressWriter``. ``--sleep-first S`` sleeps S seconds before the
first step of every run (start-up).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.runtime.progress import ProgressWriter
from hpcjobs.runtime.stopflag import StopFlag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="report test workload")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-time", type=float, default=0.1)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--sleep-first", type=float, default=0.0)
    args = parser.parse_args(argv)
    stop = StopFlag.install()
    ckpt = CheckpointDir.from_env(keep=3)
    rank = int(os.environ.get("RANK", "0"))
    writer = ProgressWriter.from_env()
    if ckpt.is_done():
        return 0
    last = ckpt.latest()
    start = last.step + 1 if last else 0
    print(f"[report-workload] starting at step {start}", flush=True)
    time.sleep(args.sleep_first)
    for step in range(start, args.steps):
        time.sleep(args.step_time)
        if rank == 0:
            ckpt.note_progress(step)  # PROGRESS (for the event log) and rank 0's files
        elif writer is not None:
            writer.step(step)  # the other ranks: their own progress files only
        if stop.is_set():
            print(f"[report-workload] stop after step {step}, no checkpoint", flush=True)
            return 0
        if rank == 0 and (step + 1) % args.checkpoint_every == 0:
            with ckpt.save(step) as folder:
                (folder / "state").write_text(str(step))
    if rank == 0:
        ckpt.mark_done({"steps": args.steps})
    return 0


if __name__ == "__main__":
    sys.exit(main())
