"""Whole-process start-up of the CLI, side by side with bare Python.

Median wall time of ``hpcjobs --help``, ``hpcjobs sandbox --help`` and a 16-node ``render`` for
``dgx-h100-ib`` (which loads and validates the site config and renders the script), each as a
multiple of ``python -c pass``. The goals (benchmarks/README.md): ``--help`` at most 6 times bare
Python, and the 16-node render at most 1.5 times the first floor below. (That replaced an
earlier goal of 12 times bare Python, which the floor alone all but reaches on a 2-core host.)

Two reference rows show what no change inside hpcjobs can remove: importing click alone (what
any ``--help`` needs) and importing the four libraries a render needs (click, Jinja2, PyYAML and
pydantic's ``BaseModel``), before a single model is built or a file read. pydantic loads most of
itself only when the first model class is built (its schema machinery, and ``importlib.metadata``
to look for plugins), so a third reference row builds one one-field model: what any validation at
all costs. The render's ratio to both rows is printed; the goal (``benchmarks/README.md``) is 1.5
times the first.

The ``hpcjobs`` command raises the collector's young-generation threshold before it imports
the command line, and freezes its objects as it ends (``hpcjobs/__main__.py``); the plain floor
rows run with Python's defaults. A fourth reference row imports the four libraries with the
command's settings, and the render's ratio to it is printed too: the like-for-like figure.

Every command runs with bytecode written and read (``PYTHONDONTWRITEBYTECODE`` is dropped), as an
installed package runs: a checkout run under that variable compiles every module on every start.
The commands take turns (one run of each per round), so that a busy moment of the machine falls on
all of them alike instead of on whichever was being measured then.

On a shared host the wall times of one command move by a fifth between runs. ``--instructions``
counts the instructions each command executes instead (valgrind's callgrind, one run each),
which do not move with the load; the ratios are given the same way.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from hpcjobs.__main__ import GC_YOUNG_THRESHOLD

GOALS = {"hpcjobs --help": 6.0}


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
RENDER = "hpcjobs render (16 nodes, dgx-h100-ib)"
#: The render measured: its ``hpcjobs`` arguments.
RENDER_ARGS = ["--site", "dgx-h100-ib", "render", "-N", "16", "--", "python", "train.py"]
FLOOR = "floor: import click, jinja2, yaml, pydantic"
FLOOR_MODEL = "floor, and pydantic builds one model"
FLOOR_GC = "floor, collector set as the command sets it"
RATIO_GOAL = 1.5


def run_once(argv: list[str]) -> float:
    """Milliseconds from start to exit of one run of ``argv``."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=ENV)
    return (time.perf_counter() - start) * 1000


def measure(cases: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """``runs`` rounds, each running every case once, in turn."""
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, argv in cases.items():
            times[label].append(run_once(argv))
    return times


def instructions(argv: list[str]) -> int:
    """Instructions one run of ``argv`` executes, counted by valgrind's callgrind."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
        env=ENV,
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def print_instructions(cases: dict[str, list[str]]) -> None:
    """One count per command: unlike wall time, it does not move with the host's load."""
    counts = {label: instructions(argv) for label, argv in cases.items()}
    print(f"{'command':<46} {'instructions (M)':>17}")
    for label, count in counts.items():
        print(f"{label:<46} {count / 1e6:>17.1f}")
    for floor in (FLOOR, FLOOR_MODEL, FLOOR_GC):
        print(f"render / {floor!r}: {counts[RENDER] / counts[floor]:.2f} (instructions)")
    print(f"(goal: render <= {RATIO_GOAL:g} x the first floor; Python {sys.version.split()[0]})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count instructions with valgrind (one run each) instead of timing",
    )
    args = parser.parse_args()
    hpcjobs = [sys.executable, "-m", "hpcjobs"]
    render = [*hpcjobs, *RENDER_ARGS]
    for _ in range(3):  # warm the page cache and write the bytecode
        run_once(render)
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "floor: import click": [sys.executable, "-c", "import click"],
        "hpcjobs --help": [*hpcjobs, "--help"],
        "hpcjobs sandbox --help": [*hpcjobs, "sandbox", "--help"],
        FLOOR: [
            sys.executable, "-c", "import click, jinja2, yaml; from pydantic import BaseModel",
        ],
        FLOOR_MODEL: [
            sys.executable, "-c", "import click, jinja2, yaml; from pydantic import BaseModel\n"
            "class A(BaseModel):\n    x: int",
        ],
        FLOOR_GC: [
            sys.executable, "-c", "import gc\n"
            f"gc.set_threshold({GC_YOUNG_THRESHOLD}, *gc.get_threshold()[1:])\n"
            "import click, jinja2, yaml; from pydantic import BaseModel\ngc.freeze()",
        ],
        RENDER: render,
    }  # fmt: skip
    if args.instructions:
        print_instructions(cases)
        return
    print(f"{'command':<46} {'median ms':>10} {'min ms':>8} {'x bare':>7} {'goal':>6}")
    bare = None
    medians: dict[str, float] = {}
    for label, t in measure(cases, args.runs).items():
        median = medians[label] = statistics.median(t)
        bare = bare or median
        goal = GOALS.get(label)
        goal_text = f"<={goal:g}" if goal else ""
        print(f"{label:<46} {median:>10.1f} {min(t):>8.1f} {median / bare:>7.1f} {goal_text:>6}")
    for floor in (FLOOR, FLOOR_MODEL, FLOOR_GC):
        print(f"render / {floor!r}: {medians[RENDER] / medians[floor]:.2f}")
    print(f"(goal: render <= {RATIO_GOAL:g} x the first floor; runs={args.runs}, ", end="")
    print(f"Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
