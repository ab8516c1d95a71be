"""A tiny deterministic workload that checkpoints, stops on Slurm's warning and resumes.

Each step folds the step number into a 64-bit state. The final state depends only on the
number of steps, so a run that was interrupted and resumed any number of times ends with the
same result as an uninterrupted one, provided it always resumes from a complete checkpoint.

Every rank computes; rank 0 writes the checkpoints (``step-N/state.json`` through
:class:`hpcjobs.runtime.checkpoint.CheckpointDir`), notes its progress every step, and at the end
writes ``--result`` and the done marker. On the warning signal or SIGTERM
(:class:`hpcjobs.runtime.stopflag.StopFlag`) rank 0 checkpoints the step it just finished and every
rank exits 0.

Fault injection, used by the live requeue tests:

- ``--fail-at STEP --fail-code N``: every rank exits with code N after STEP.
- ``--slow-save-at STEP``: in the first run only (``HPCJOBS_RESTART_COUNT`` 0), the checkpoint
  of STEP writes half of its file, touches ``--slow-save-marker`` and then hangs inside the save
  until the job is killed.

Faults of one rank (``--fault-rank R``, default 1), in the first run only, after step
``--fault-at``:

- ``--fault crash --fault-text TEXT``: the rank prints TEXT to stderr and exits 1 (an NCCL
  error, say);
- ``--fault raise``: the rank raises an ordinary Python exception;
- ``--fault hang``: the rank stops making progress and ignores the warning signal.

``--fault-every-run``: in every run, not only the first (a fault that follows the program: it
resumes before ``--fault-at`` and fails there again). ``--fault-node NODE``: the rank that runs
on NODE has the fault, whatever its rank (a fault that follows the node).

Every rank reports its progress (``hpcjobs.runtime.progress``); ``--step-time-after`` slows
every step after ``--fault-at`` instead (a slow job that still progresses). ``--slow-node NODE
--slow-factor F``: in every run, each step of the ranks on NODE takes F times as long (a slow
GPU or NIC: a straggler); ``--slow-node-file PATH`` names NODE in a file the test writes
once it knows the nodes (read each step until it is there). With
``--step-only`` the ranks other than 0 write only their step, no node and no log, as a shell
program may.

Run it directly for a reference result::

    HPCJOBS_CHECKPOINT_DIR=/tmp/ck python tests/live/requeue_workload.py --steps 50 \\
        --step-time 0 --result /tmp/ref.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.runtime.progress import ProgressWriter
from hpcjobs.runtime.stopflag import StopFlag

MASK = (1 << 64) - 1


def advance(state: int, step: int) -> int:
    """The state after ``step``: a 64-bit LCG mixed with the step number."""
    return (state * 6364136223846793005 + 1442695040888963407 + step * 2654435761) & MASK


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="deterministic requeue test workload")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-time", type=float, default=0.1, help="seconds per step")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--fail-at", type=int, default=None)
    parser.add_argument("--fail-code", type=int, default=3)
    parser.add_argument("--slow-save-at", type=int, default=None)
    parser.add_argument("--slow-save-marker", type=Path, default=None)
    parser.add_argument("--fault", choices=("crash", "raise", "hang"), default=None)
    parser.add_argument("--fault-at", type=int, default=None)
    parser.add_argument("--fault-rank", type=int, default=1)
    parser.add_argument("--fault-text", default="")
    parser.add_argument("--fault-every-run", action="store_true")
    parser.add_argument("--fault-node", default=None)
    parser.add_argument("--step-time-after", type=float, default=None)
    parser.add_argument("--slow-node", default=None)
    parser.add_argument("--slow-node-file", type=Path, default=None)
    parser.add_argument("--slow-factor", type=float, default=1.0)
    parser.add_argument(
        "--step-only",
        action="store_true",
        help="ranks other than 0 report their step without their node, as a shell program may",
    )
    return parser.parse_args(argv)


def resume_point(ckpt: CheckpointDir) -> tuple[int, int, int | None]:
    """(state, first step to run, checkpoint step resumed from) from the newest checkpoint."""
    last = ckpt.latest()
    if last is None:
        return 0, 0, None
    saved = json.loads((last.path / "state.json").read_text())
    return int(saved["state"]), last.step + 1, last.step


def save(ckpt: CheckpointDir, step: int, state: int, args: argparse.Namespace) -> None:
    """Checkpoint ``step`` (rank 0 only); hangs halfway when told to (``--slow-save-at``)."""
    body = json.dumps({"step": step, "state": state})
    with ckpt.save(step) as folder:
        if step == args.slow_save_at and os.environ.get("HPCJOBS_RESTART_COUNT", "0") == "0":
            (folder / "state.json").write_text(body[: len(body) // 2])
            if args.slow_save_marker is not None:
                args.slow_save_marker.write_text(str(folder))
            print(f"[workload] writing checkpoint {step} slowly", flush=True)
            while True:
                time.sleep(1)
        (folder / "state.json").write_text(body)


def pause_for(args: argparse.Namespace, step: int) -> float:
    """Seconds ``step`` takes: ``--step-time``, or ``--step-time-after`` after ``--fault-at``."""
    if args.step_time_after is not None and args.fault_at is not None and step > args.fault_at:
        return float(args.step_time_after)
    if args.slow_node is None and args.slow_node_file is not None:
        with contextlib.suppress(OSError):
            args.slow_node = args.slow_node_file.read_text().strip() or None
    if args.slow_node is not None and os.environ.get("SLURMD_NODENAME") == args.slow_node:
        return float(args.step_time) * float(args.slow_factor)
    return float(args.step_time)


def inject(args: argparse.Namespace, rank: int, step: int) -> None:
    """The fault this rank was told to have after ``step`` (first run only)."""
    if args.fault is None or step != args.fault_at:
        return
    if args.fault_node is not None:
        if os.environ.get("SLURMD_NODENAME") != args.fault_node:
            return
    elif rank != args.fault_rank:
        return
    if not args.fault_every_run and os.environ.get("HPCJOBS_RESTART_COUNT", "0") != "0":
        return
    if args.fault == "crash":
        print(f"[workload] rank {rank} crashing after step {step}", flush=True)
        sys.stderr.write(args.fault_text + "\n")
        sys.stderr.flush()
        sys.exit(1)
    if args.fault == "raise":
        raise ValueError(f"rank {rank}: a bug in the training loop at step {step}")
    print(f"[workload] rank {rank} hangs after step {step}", flush=True)
    while True:
        time.sleep(1)


def report_step_only(folder: Path, rank: int, step: int) -> None:
    """The progress contract's minimum (hpcjobs.runtime.progress): the step, no node."""
    tmp = folder / f".rank-{rank}.tmp"
    tmp.write_text(f"{step}\n")
    os.replace(tmp, folder / f"rank-{rank}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopFlag.install()
    rank = int(os.environ.get("RANK", "0"))
    restart = os.environ.get("HPCJOBS_RESTART_COUNT", "0")
    ckpt = CheckpointDir.from_env(keep=3)

    def say(message: str) -> None:
        if rank == 0:
            print(f"[workload] {message}", flush=True)

    if ckpt.is_done():
        say("already finished")
        return 0
    state, start, resumed = resume_point(ckpt)
    if resumed is None:
        say(f"starting from scratch (restart {restart})")
    else:
        say(f"resumed from checkpoint step {resumed} (restart {restart})")

    others = ProgressWriter.from_env() if rank else None
    for step in range(start, args.steps):
        state = advance(state, step)
        time.sleep(pause_for(args, step))
        if rank == 0:
            ckpt.note_progress(step)
        elif others is not None and args.step_only:
            report_step_only(others.folder, rank, step)
        elif others is not None:
            others.step(step)
        inject(args, rank, step)
        if step == args.fail_at:
            say(f"failing on purpose after step {step} (exit {args.fail_code})")
            return int(args.fail_code)
        stopping = stop.is_set()
        if stopping or (step + 1) % args.checkpoint_every == 0:
            if rank == 0:
                save(ckpt, step, state, args)
            if stopping:
                say(
                    f"stop signal ({stop.signal_name}) after step {step}: checkpoint saved, exiting"
                )
                return 0

    if rank == 0:
        result = {"steps": args.steps, "state": f"{state:016x}"}
        args.result.write_text(json.dumps(result, sort_keys=True) + "\n")
        ckpt.mark_done(result)
        say(f"finished {args.steps} steps: {result['state']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
