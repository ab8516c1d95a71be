"""Median whole-process wall time of `hpcjobs --help` (and, for scale, of bare Python)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


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
    measure([sys.executable, "-m", "hpcjobs", "--help"], 3)  # warm the page cache
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "hpcjobs --help": [sys.executable, "-m", "hpcjobs", "--help"],
        "hpcjobs sandbox --help": [sys.executable, "-m", "hpcjobs", "sandbox", "--help"],
    }
    print(f"{'command':<26} {'median ms':>10} {'min ms':>8} {'max ms':>8}  (runs={args.runs})")
    for label, argv in cases.items():
        t = measure(argv, args.runs)
        print(f"{label:<26} {statistics.median(t):>10.1f} {min(t):>8.1f} {max(t):>8.1f}")
    print("goal: hpcjobs --help median <= 150 ms")


if __name__ == "__main__":
    main()
