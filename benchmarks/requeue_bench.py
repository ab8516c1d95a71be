"""Resume latency and work lost per preemption on the sandbox: hpcjobs vs Slurm's default path.

Prints:
  * for a 2-node ``hpcjobs submit`` job preempted N times by an ``urgent`` job: the resume
    latency (end of the preempted run -> the continuation running; and the preemptor's end ->
    running), and the work lost (steps redone) with a workload that checkpoints on the signal;
  * for a plain ``sbatch --requeue`` job preempted once (Slurm's default path, which submitit
    takes): the same two latencies, dominated by Slurm's requeue hold (~121 s). ``--skip-default``
    leaves it out (it takes about two and a half minutes).

Times come from the jobs themselves (the chain's event log, and ``date`` in the plain job and
in the preemptor), so they are not rounded to sacct's whole seconds.

Run: SLURM_CONF=<state>/etc/slurm.conf .venv/bin/python benchmarks/requeue_bench.py
Without SLURM_CONF it starts (and afterwards stops) a sandbox of its own with
``hpcjobs sandbox up --state-dir DIR --port-base N``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TypeVar

from hpcjobs.jobs.chain import Chain, read_chain
from hpcjobs.runtime.checkpoint import CheckpointDir

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")
ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = str(ROOT / "tests" / "live" / "requeue_workload.py")

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class Slurm:
    """Slurm's commands (and hpcjobs') against one cluster."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**os.environ, **env}
        self.jobs: list[str] = []

    def run(self, *argv: str, check: bool = True, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            list(argv), env=self.env, cwd=cwd, capture_output=True, text=True, timeout=120
        )
        if check and proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr}")
        return proc.stdout

    def state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T %r", check=False).strip()

    def preempt(self, end_file: Path) -> str:
        """An ``urgent`` job on every node; it writes the time it ended to ``end_file``."""
        wrap = f"sleep 5; date +%s.%N > {end_file}"
        out = self.run(
            "sbatch", "--parsable", "-p", "urgent", "-N", "3", "--exclusive",
            "-J", "preemptor", "-o", "/dev/null", "--wrap", wrap,
        )  # fmt: skip
        job_id = out.strip().split(";")[0]
        self.jobs.append(job_id)
        return job_id

    def cancel_all(self) -> None:
        if self.jobs:
            self.run("scancel", *self.jobs, check=False)


@contextmanager
def cluster(args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The sandbox named by SLURM_CONF, or one started (and stopped) here."""
    if os.environ.get("SLURM_CONF"):
        yield {"SLURM_CONF": os.environ["SLURM_CONF"]}
        return
    state = Path(args.state_dir)
    up = [HPCJOBS, "sandbox", "up", "--state-dir", str(state), "--port-base", str(args.port_base)]
    subprocess.run([*up, "--grace-time", "15"], check=True)
    try:
        yield {"SLURM_CONF": str(state / "etc" / "slurm.conf")}
    finally:
        subprocess.run([HPCJOBS, "sandbox", "down", "--state-dir", str(state)], check=False)


def sandbox_options(parser: argparse.ArgumentParser) -> None:
    """The options of a benchmark that may start a sandbox of its own (see :func:`cluster`)."""
    parser.add_argument("--state-dir", default="/tmp/hpcjobs-bench-sandbox")
    parser.add_argument("--port-base", type=int, default=25810)


def scratch(prefix: str) -> Path:
    """A folder under /tmp that the jobs (other users too) can read."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(folder, 0o755)
    return folder


def progressed(ckpt: CheckpointDir, step: int) -> bool:
    return (ckpt.progress() or 0) >= step


def fast_path(slurm: Slurm, folder: Path, preemptions: int) -> list[dict[str, float]]:
    """hpcjobs' path: one 2-node job, preempted ``preemptions`` times, continued each time."""
    out = folder / "hpcjobs"
    out.mkdir(mode=0o755)
    steps = 100 + 100 * preemptions
    stdout = slurm.run(
        HPCJOBS, "--site", "sandbox", "submit", "-J", "bench-requeue", "-N", "2",
        "--gpus-per-node", "1", "-t", "10:00", "--output-dir", str(out), "--",
        PYTHON, WORKLOAD, "--steps", str(steps), "--step-time", "0.1",
        # Checkpoint only on the signal: the work lost is then what the signal path loses.
        "--checkpoint-every", str(steps + 1), "--result", str(out / "result.json"),
        cwd=out,
    )  # fmt: skip
    root = stdout.split()[-1]
    slurm.jobs.append(root)
    log = out / f"chain-{root}.jsonl"
    ckpt = CheckpointDir(out / "checkpoints")

    def chain() -> Chain:
        return read_chain(log)

    rows = []
    for n in range(1, preemptions + 1):
        target = (ckpt.progress() or 0) + 30
        wait_for("the job to make progress", partial(progressed, ckpt, target), 120)
        end_file = folder / f"preemptor-{n}.end"
        slurm.preempt(end_file)

        def resumed(count: int = n) -> Chain | None:
            c = chain()
            stops = c.interruptions()
            return c if len(stops) >= count and stops[count - 1].resumed_at else None

        stop = wait_for(f"resume {n}", resumed, 120).interruptions()[n - 1]
        if stop.resumed_job_id:
            slurm.jobs.append(stop.resumed_job_id)
        wait_for("the preemptor's end", end_file.exists, 60)
        preemptor_end = float(end_file.read_text())
        assert stop.resumed_at is not None
        rows.append(
            {
                "after_run_end": stop.resume_latency or 0.0,
                "after_preemptor_end": stop.resumed_at - preemptor_end,
                "steps_lost": float(stop.steps_lost or 0),
                "checkpoint": float(stop.checkpoint_at_stop or 0),
            }
        )
    wait_for("the chain to end", lambda: chain().final is not None, 300)
    return rows


PLAIN_JOB = """#!/bin/bash
date +%s.%N >> {starts}
trap 'date +%s.%N >> {ends}; exit 0' TERM
sleep 600 &
wait
"""


def default_path(slurm: Slurm, folder: Path) -> dict[str, float]:
    """Slurm's own requeue: a plain ``--requeue`` job, preempted once, left to come back."""
    out = folder / "plain"
    out.mkdir(mode=0o755)
    starts, ends = out / "starts", out / "ends"
    script = out / "job.sh"
    script.write_text(PLAIN_JOB.format(starts=starts, ends=ends))
    job_id = slurm.run(
        "sbatch", "--parsable", "--requeue", "-p", "batch", "-N", "1", "-J", "bench-plain",
        "-o", "/dev/null", str(script),
    ).strip().split(";")[0]  # fmt: skip
    slurm.jobs.append(job_id)
    wait_for("the plain job to start", starts.exists, 60)
    end_file = folder / "preemptor-plain.end"
    slurm.preempt(end_file)

    def two_starts() -> list[str] | None:
        lines = starts.read_text().split()
        return lines if len(lines) >= 2 else None

    lines = wait_for(
        "the plain job to run again (Slurm's requeue hold is ~2 minutes)", two_starts, 300, 0.2
    )
    slurm.run("scancel", job_id, check=False)
    restart = float(lines[1])
    run_end = float(ends.read_text().split()[0]) if ends.exists() else float("nan")
    return {
        "after_run_end": restart - run_end,
        "after_preemptor_end": restart - float(end_file.read_text()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=3)
    parser.add_argument(
        "--skip-default", action="store_true", help="skip the ~2.5 min default path"
    )
    sandbox_options(parser)
    args = parser.parse_args()

    with cluster(args) as env:
        slurm = Slurm(env)
        folder = scratch("hpcjobs-requeue-bench-")
        try:
            rows = fast_path(slurm, folder, args.preemptions)
            plain = None if args.skip_default else default_path(slurm, folder)
        finally:
            slurm.cancel_all()
            shutil.rmtree(folder, ignore_errors=True)

    print(f"hpcjobs continuation (2-node job, {len(rows)} preemptions, GraceTime 15 s):")
    print("  #  run end -> running   preemptor end -> running   steps lost")
    for n, row in enumerate(rows, start=1):
        print(
            f"  {n}  {row['after_run_end']:15.2f} s   {row['after_preemptor_end']:22.2f} s"
            f"   {row['steps_lost']:10.0f}"
        )
    for key, label in (("after_run_end", "run end"), ("after_preemptor_end", "preemptor end")):
        values = [r[key] for r in rows]
        print(f"  median from {label}: {statistics.median(values):.2f} s (max {max(values):.2f} s)")
    print(f"  steps lost per preemption: max {max(r['steps_lost'] for r in rows):.0f}")
    if plain is None:
        print(
            "Slurm's default requeue path: skipped (docs/requeue.md: ~121 s requeue hold;"
            " 145 s from the preemptor's end on the sandbox)"
        )
    else:
        print("Slurm's default requeue path (plain --requeue job, preempted once):")
        print(f"  run end -> running:        {plain['after_run_end']:.2f} s")
        print(f"  preemptor end -> running:  {plain['after_preemptor_end']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
