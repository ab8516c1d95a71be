"""Dry-run render time for a 16-node job on the dgx-h100-ib site.

Measures the whole process (``hpcjobs --site dgx-h100-ib render -N 16 -- python train.py``,
the way a researcher runs it) and, separately, one render inside a warm process. The goal is
a whole-process time under 300 ms.

Run: .venv/bin/python benchmarks/render_bench.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 0.300
SITE = "dgx-h100-ib"
ARGS = ["--site", SITE, "render", "-N", "16", "--", "python", "train.py", "--config", "c.yaml"]


def whole_process(runs: int) -> list[float]:
    """Wall time of ``hpcjobs render`` as a fresh process, ``runs`` times (after one warm-up)."""
    exe = Path(sys.executable).parent / "hpcjobs"
    argv = [str(exe), *ARGS] if exe.exists() else [sys.executable, "-m", "hpcjobs", *ARGS]
    subprocess.run(argv, check=True, capture_output=True)  # warm the OS and template caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def in_process(runs: int) -> list[float]:
    """Time of one ``render_job`` call in a process that already loaded the site."""
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import JobSpec
    from hpcjobs.script.render import render_job

    site = load_site(SITE)
    spec = JobSpec(nodes=16, command=["python", "train.py", "--config", "c.yaml"])
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        render_job(spec, site)
        times.append(time.perf_counter() - start)
    return times


def _row(label: str, times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (
        f"{label:<28} min {min(ms):7.1f} ms   median {statistics.median(ms):7.1f} ms   "
        f"max {max(ms):7.1f} ms   ({len(ms)} runs)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per measurement")
    args = parser.parse_args()
    whole = whole_process(args.runs)
    inner = in_process(args.runs)
    print(f"hpcjobs {' '.join(ARGS)}")
    print(_row("whole process (dry run)", whole))
    print(_row("render_job in a warm process", inner))
    median = statistics.median(whole)
    verdict = "meets" if median < GOAL_S else "misses"
    goal = GOAL_S * 1000
    print(f"median whole-process time {median * 1000:.0f} ms {verdict} the {goal:.0f} ms goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
