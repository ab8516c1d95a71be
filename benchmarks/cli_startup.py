"""Whole-process start-up of the CLI, side by side with bare Python.

Median wall time of ``hpcjobs --help``, ``hpcjobs sandbox --help`` and a 16-node ``render`` for
``dgx-h100-ib`` (which loads and validates the site config and renders the script), each as a
multiple of ``python -c pass``. The goals (benchmarks/README.md): ``--help`` at most 6 times bare
Python, the 16-node render at most 12 times.

Two reference rows show what no change inside hpcjobs can remove: importing click alone (what
any ``--help`` needs) and importing the four libraries a render needs (click, Jinja2, PyYAML and
pydantic's ``BaseModel``), before a single model is built or a file read.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

GOALS = {"hpcjobs --help": 6.0, "hpcjobs render (16 nodes, dgx-h100-ib)": 12.0}


def measure(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    hpcjobs = [sys.executable, "-m", "hpcjobs"]
    measure([*hpcjobs, "--help"], 3)  # warm the page cache
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "floor: import click": [sys.executable, "-c", "import click"],
        "hpcjobs --help": [*hpcjobs, "--help"],
        "hpcjobs sandbox --help": [*hpcjobs, "sandbox", "--help"],
        "floor: import click, jinja2, yaml, pydantic": [
            sys.executable, "-c", "import click, jinja2, yaml; from pydantic import BaseModel",
        ],
        "hpcjobs render (16 nodes, dgx-h100-ib)": [
            *hpcjobs, "--site", "dgx-h100-ib", "render", "-N", "16", "--", "python", "train.py",
        ],
    }  # fmt: skip
    print(f"{'command':<46} {'median ms':>10} {'min ms':>8} {'x bare':>7} {'goal':>6}")
    bare = None
    for label, argv in cases.items():
        t = measure(argv, args.runs)
        median = statistics.median(t)
        bare = bare or median
        goal = GOALS.get(label)
        goal_text = f"<={goal:g}" if goal else ""
        print(f"{label:<46} {median:>10.1f} {min(t):>8.1f} {median / bare:>7.1f} {goal_text:>6}")
    print(f"(runs={args.runs}, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
