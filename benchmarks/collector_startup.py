"""What the ``hpcjobs`` command's collector settings do to a 16-node render, A/B.

Runs the same render (``--site dgx-h100-ib render -N 16``) in a fresh process per run, in
turns: once entering through ``hpcjobs.cli.main`` with Python's collector settings, once through
``hpcjobs.__main__.main``, which raises the young-generation threshold first
(``GC_YOUNG_THRESHOLD``) and freezes its objects as it ends, so that the interpreter's last
collection at exit skips them. Prints each side's median and fastest whole-process wall time
and how many collections it ran before exit.

``cli_startup.py`` sees the same difference, but on a shared host the spread between its runs
can be larger than it; many interleaved rounds here separate it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from cli_startup import ENV, RENDER_ARGS

ARGV = ["hpcjobs", *RENDER_ARGS]
ENTRIES = {
    "Python's collector settings (hpcjobs.cli.main)": "from hpcjobs.cli import main",
    "the command's (hpcjobs.__main__.main)": "from hpcjobs.__main__ import main",
}
_PROGRAM = """\
import atexit, gc, os, sys
runs = [0]
gc.callbacks.append(lambda phase, info: runs.__setitem__(0, runs[0] + (phase == "stop")))
atexit.register(lambda: os.write(2, f"@@ {{runs[0]}}\\n".encode()))
sys.argv = {argv!r}
{entry}
main()
"""


def run_once(entry: str) -> tuple[float, int]:
    """Milliseconds from start to exit of one render's process, and the collections it ran."""
    code = _PROGRAM.format(argv=ARGV, entry=entry)
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV
    )
    elapsed = (time.perf_counter() - start) * 1000
    line = next(x for x in reversed(out.stderr.splitlines()) if x.startswith("@@ "))
    return elapsed, int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    for entry in ENTRIES.values():  # warm the page cache and write the bytecode
        run_once(entry)
    times: dict[str, list[float]] = {label: [] for label in ENTRIES}
    runs: dict[str, int] = {}
    for _ in range(args.runs):
        for label, entry in ENTRIES.items():
            ms, runs[label] = run_once(entry)
            times[label].append(ms)
    head = "16-node render, entering with"
    print(f"{head:<50} {'median ms':>10} {'min ms':>8} {'collections':>12}")
    for label, t in times.items():
        print(f"{label:<50} {statistics.median(t):>10.1f} {min(t):>8.1f} {runs[label]:>12}")
    print(f"(runs={args.runs}, Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
