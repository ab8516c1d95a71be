"""Submission and status against a live Slurm (the sandbox): what a researcher waits for.

Prints:
  * the time to submit a 1,000-task sweep (``--array=0-999``, one sbatch call), and a
    2,500-task sweep that is split to fit MaxArraySize;
  * the time and the number of Slurm calls of ``status`` over 200 jobs (in-process and as a
    whole ``hpcjobs status`` process);
  * the time for a permanent-error failure (unknown partition: no retries).

Jobs are submitted held and cancelled at the end, so the cluster does no work.

Run: SLURM_CONF=<state>/etc/slurm.conf .venv/bin/python benchmarks/submit_bench.py
(``eval "$(hpcjobs sandbox env)"`` sets SLURM_CONF for the default sandbox.)
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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hpcjobs.errors import SlurmError
from hpcjobs.jobs.submission import submit_rendered
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.statusquery import query_status


@dataclass(frozen=True)
class Spec:
    name: str


@dataclass(frozen=True)
class Rendered:
    script: str
    sbatch_args: list[str]
    spec: Spec
    site_name: str
    output_dir: Path
    blocks: dict[str, str] = field(default_factory=dict)


@dataclass
class Counting:
    inner: LocalRunner
    counts: Counter[str] = field(default_factory=Counter)

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.counts[argv[0]] += 1
        return self.inner.run(argv, stdin=stdin, timeout=timeout, check=check, env=env)

    def total(self) -> int:
        return sum(self.counts.values())


def job(tmp: Path, name: str, *args: str) -> Rendered:
    script = '#!/bin/bash\necho "task ${HPCJOBS_ARRAY_TASK_ID:-$SLURM_ARRAY_TASK_ID}"\n'
    sbatch_args = ["-J", name, "-o", "/dev/null", "--hold", *args]
    return Rendered(script, sbatch_args, Spec(name), "bench", tmp / name)


def timed(fn: object, runs: int) -> tuple[list[float], object]:
    times, last = [], None
    for _ in range(runs):
        start = time.perf_counter()
        last = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return times, last


def fmt(times: list[float]) -> str:
    return f"median {statistics.median(times) * 1000:8.1f} ms  (min {min(times) * 1000:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('set SLURM_CONF (eval "$(hpcjobs sandbox env)") to point at a test cluster')
    tmp = Path(tempfile.mkdtemp(prefix="hpcjobs-bench-"))
    plain = LocalRunner()
    submitted: list[str] = []
    try:
        # 1. Sweeps. Every array task counts toward MaxJobCount (10,000 by default) until
        # MinJobAge after it ends, so few runs and a cancel after each.
        held = len(plain.run(["squeue", "-h", "-t", "all", "-r", "-o", "%i"]).stdout.split())
        if held > 4000:
            sys.exit(f"the controller holds {held} job records; wait 5 minutes and run again")
        for tasks, runs in ((1000, min(args.runs, 3)), (2500, 1)):
            counting = Counting(LocalRunner())
            times, calls, chunks = [], 0, 0
            for _ in range(runs):
                client = SlurmClient(counting)  # fresh: asks the version and MaxArraySize
                rendered = job(tmp, f"sweep{tasks}", f"--array=0-{tasks - 1}")
                counting.counts.clear()
                start = time.perf_counter()
                ids = submit_rendered(rendered, client=client, index_dir=tmp / "index").job_ids
                times.append(time.perf_counter() - start)
                calls, chunks = counting.total(), len(ids)
                plain.run(["scancel", *ids], check=False)
            print(
                f"submit {tasks:>5}-task sweep : {fmt(times)}  "
                f"{chunks} array job(s), {calls} Slurm calls"
            )

        # 2. Status over 200 jobs.
        ids200 = [
            plain.run(
                [
                    "sbatch",
                    "--parsable",
                    "--hold",
                    "-J",
                    "bench",
                    "-o",
                    "/dev/null",
                    "--wrap",
                    "true",
                ]
            ).stdout.strip()
            for _ in range(200)
        ]
        submitted.extend(ids200)
        counting = Counting(LocalRunner())
        client = SlurmClient(counting)
        times, report = timed(lambda: query_status(client, ids200), args.runs)
        calls = counting.total() // args.runs
        print(
            f"status of 200 jobs      : {fmt(times)}  {calls} Slurm call(s) per refresh, "
            f"{len(report.jobs)} jobs"  # type: ignore[attr-defined]
        )
        exe = shutil.which("hpcjobs", path=str(Path(sys.executable).parent)) or "hpcjobs"
        argv = [exe, "status", "--json", *ids200]
        times, _ = timed(lambda: subprocess.run(argv, check=True, capture_output=True), args.runs)
        print(f"hpcjobs status (process): {fmt(times)}")

        # 3. Permanent error.
        counting = Counting(LocalRunner())
        client = SlurmClient(counting)
        client.version()

        def bad() -> None:
            try:
                submit_rendered(
                    job(tmp, "bad", "-p", "no-such-partition"),
                    client=client,
                    index_dir=tmp / "index",
                )
            except SlurmError:
                return
            raise AssertionError("the unknown partition was accepted")

        counting.counts.clear()
        times, _ = timed(bad, args.runs)
        print(
            f"permanent error (-p x)  : {fmt(times)}  "
            f"{counting.counts['sbatch'] // args.runs} sbatch call(s) each"
        )
    finally:
        if submitted:
            plain.run(["scancel", *submitted], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
