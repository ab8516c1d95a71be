"""Whole-process wall time of `hpcjobs plan` for the built-in sites (median of N runs)."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SHAPE_70B = ["--layers", "80", "--hidden", "8192", "--heads", "64", "--vocab", "32000",
             "--seq-len", "4096", "--tokens", "2T", "--global-batch", "1024"]  # fmt: skip

CASES = {
    "70B, dgx-h100-ib, 64 nodes": ["--site", "dgx-h100-ib", "plan", *SHAPE_70B, "-N", "64"],
    "70B, dgx-h100-ib, 128 nodes": ["--site", "dgx-h100-ib", "plan", *SHAPE_70B, "-N", "128"],
    "175B, a100-roce, 64 nodes": [
        "--site",
        "a100-roce",
        "plan",
        "-p",
        "pretrain",
        "--params",
        "175B",
        "--seq-len",
        "2048",
        "--tokens",
        "300B",
        "--global-batch",
        "1536",
        "-N",
        "64",
    ],
    "1B, sandbox, 3 nodes": [
        "--site",
        "sandbox",
        "plan",
        "--params",
        "1B",
        "--seq-len",
        "1024",
        "--tokens",
        "20B",
        "--global-batch",
        "96",
        "-N",
        "3",
    ],
}


def measure(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    base = [sys.executable, "-m", "hpcjobs"]
    measure(base + CASES["1B, sandbox, 3 nodes"], 2)  # warm the page cache
    print(f"{'case':<30} {'median ms':>10} {'min ms':>8} {'max ms':>8}  (runs={args.runs})")
    for label, argv in CASES.items():
        t = measure(base + argv, args.runs)
        print(f"{label:<30} {statistics.median(t):>10.1f} {min(t):>8.1f} {max(t):>8.1f}")
    print("goal: every case < 1000 ms")


if __name__ == "__main__":
    main()
