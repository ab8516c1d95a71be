"""Metadata operations on the shared output folder per node and second, from progress reports.

One node is simulated on this machine: R rank processes step every 0.1 s for T seconds and
report each step, and what reads the reports runs beside them. ``strace -f`` records every
file system call of all of them; a call counts when its path lies in the shared folder
(``openat``, ``rename*``, ``unlink*``, ``mkdir*``, ``*stat*``, ``access``). Two contracts:

- **before**: each rank replaces ``rank-<RANK>`` (create a temporary file, rename it) and
  appends to ``rank-<RANK>.log`` in the shared folder every step; the batch shell reads every
  rank's file once a second;
- **now**: each rank replaces ``rank-<RANK>`` and appends to ``rank-<RANK>.log`` in a
  node-local folder; the node agent
  (:mod:`hpcjobs.runtime.supervisor.agent`, every 2 s, the interval for a 8 s stall timeout)
  writes one summary and appends to one history in the shared folder; the stall watch reads
  the summaries once per agent cycle.

Usage: ``.venv/bin/python benchmarks/progress_load.py [--seconds 6] [--ranks 4,16,64]``.
Needs ``strace``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

STEP_S = 0.1
AGENT_EVERY = 2.0

_RANK = textwrap.dedent(
    """
    import os, sys, time
    folder, rank, seconds, log = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    end, step = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        step += 1
        tmp = os.path.join(folder, ".rank-%d.tmp" % rank)
        with open(tmp, "w") as f:
            f.write("%d\\n" % step)
        os.replace(tmp, os.path.join(folder, "rank-%d" % rank))
        if log == "1":
            with open(os.path.join(folder, "rank-%d.log" % rank), "a") as f:
                f.write("%.3f %d\\n" % (time.time(), step))
        time.sleep(%(step)s)
    """
).replace("%(step)s", str(STEP_S))

_OLD_WATCH = textwrap.dedent(
    """
    import glob, os, sys, time
    folder, seconds = sys.argv[1], float(sys.argv[2])
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for path in glob.glob(os.path.join(folder, "rank-*")):
            if path.endswith(".log"):
                continue
            try:
                os.stat(path)
                with open(path) as f:
                    f.readline()
            except OSError:
                pass
        time.sleep(1)
    """
)

_NEW_SIDE = textwrap.dedent(
    """
    import glob, os, sys, time
    from hpcjobs.runtime.supervisor.agent import Agent, read_summary
    local, shared, seconds, every = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
    os.environ.setdefault("SLURM_JOB_ID", "1")
    agent = Agent(local, shared, every)
    # The agent's cycles and the stall watch's reads, in turn (Agent.run would loop forever).
    end = time.monotonic() + seconds
    os.makedirs(local, exist_ok=True)
    while time.monotonic() < end:
        agent.cycle()
        for path in glob.glob(os.path.join(shared, "node-*")):
            if not path.endswith(".log"):
                with open(path) as f:
                    read_summary(f.read(), time.time())
        time.sleep(every)
    """
)

_CALL = re.compile(r"^\d+\s+(\w+)\((.*)$")
_COUNTED = re.compile(
    r"^(openat|open|rename|renameat2?|unlink|unlinkat|mkdir|mkdirat|"
    r"stat|lstat|newfstatat|statx|access|faccessat2?)$"
)


def count(trace: Path, shared: str, seconds: float) -> float:
    """Counted calls on paths in ``shared``, per second."""
    hits = 0
    with trace.open(errors="replace") as handle:
        for line in handle:
            match = _CALL.match(line)
            if match and _COUNTED.match(match.group(1)) and shared in match.group(2):
                hits += 1
    return hits / seconds


def run(ranks: int, seconds: float, contract: str, root: Path) -> float:
    shared = root / f"shared-{contract}-{ranks}"
    local = root / f"local-{contract}-{ranks}"
    shared.mkdir()
    local.mkdir()
    folder = shared if contract == "before" else local
    script = root / "rank.py"
    script.write_text(_RANK)
    watch = root / "watch.py"
    watch.write_text(_OLD_WATCH if contract == "before" else _NEW_SIDE)
    log = "1"  # as ProgressWriter does: the log goes where the reports go
    procs = [f"{sys.executable} {script} {folder} {r} {seconds} {log}" for r in range(ranks)]
    side = (
        f"{sys.executable} {watch} {shared} {seconds}"
        if contract == "before"
        else f"{sys.executable} {watch} {local} {shared} {seconds} {AGENT_EVERY}"
    )
    driver = " & ".join([*procs, side]) + " & wait"
    trace = root / f"trace-{contract}-{ranks}.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=%file", "-o", str(trace), "bash", "-c", driver],
        check=True,
        env=env,
    )
    return count(trace, str(shared), seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--ranks", default="4,16,64")
    args = parser.parse_args()
    if shutil.which("strace") is None:
        print("progress_load: needs strace", file=sys.stderr)
        return 2
    counts = [int(x) for x in args.ranks.split(",")]
    print(
        f"metadata operations on the shared folder per node and second ({STEP_S} s steps, "
        f"{args.seconds:.0f} s each)"
    )
    print(f"{'ranks per node':>15} {'before':>10} {'now':>10}")
    with tempfile.TemporaryDirectory(prefix="progress-load-") as tmp:
        for ranks in counts:
            before = run(ranks, args.seconds, "before", Path(tmp))
            now = run(ranks, args.seconds, "now", Path(tmp))
            print(f"{ranks:>15} {before:>10.1f} {now:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
