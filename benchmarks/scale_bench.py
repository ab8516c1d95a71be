"""Growth figures: the scale scenario (tests/scale/scenario.py) at 2, 16 and 128 nodes × 8
light ranks, each figure side by side with its growth from the smallest size.

A second table splits each recovery into its phases (detect, decide, relaunch, first step,
all ranks), with hpcjobs' own CPU seconds in each beside the wall time.

Each size gets a sandbox of its own (the nodes plus 3 spares) that goes down afterwards.
Beside hpcjobs's launch, a bare ``srun`` of the same light ranks (one step) gives what Slurm
and this host take to start that many processes: the baseline of the launch figures.

Usage (root, where the sandbox runs)::

    .venv/bin/python benchmarks/scale_bench.py [--nodes 2,16,128] [--json FILE]

What each figure would mean on a real cluster, and the limits found, are in docs/scale.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.scale.phases import PARTS, PHASES
from tests.scale.scenario import (
    GPUS,
    LIGHT_RANK,
    PYTHON,
    SPARES,
    BigCluster,
    Scenario,
)

#: Clear of the test sandboxes (17810 to 20810) and of the scale test's (23810): the benchmark
#: may run beside a test run. Below Linux's ephemeral ports (32768 and up): at 33810 the
#: sandbox's own client connections could take the controller's port before it started.
PORT_BASE = 28810

#: (figure, what it is), in the table's order.
ROWS = (
    ("render_s", "hpcjobs render, wall s"),
    ("submit_s", "hpcjobs submit, wall s"),
    ("srun_launch_s", "bare srun of the ranks (1 step), wall s"),
    ("launch_s", "submit to every rank reporting, s"),
    ("srun_teardown_s", "bare srun: a rank's crash to srun's exit, s"),
    ("fs_ops_per_node_s", "shared-folder metadata ops per node and s"),
    ("fs_ops_supervisor_per_s", "  of which the supervisor's reads, per s"),
    ("node_lost_s", "node DOWN to running again, s"),
    ("node_lost_hpcjobs_s", "  of which fault logged to running again, s"),
    ("stall_found_s", "hung rank's last step to the stall found, s"),
    ("stall_s", "hung rank's last step to running again, s"),
    ("stall_hpcjobs_s", "  of which fault logged to running again, s"),
    ("crash_s", "crashed rank's last step to running again, s"),
    ("crash_hpcjobs_s", "  of which fault logged to running again, s"),
    ("status_s", "hpcjobs status, wall s"),
    ("history_s", "hpcjobs history, wall s"),
    ("report_cpu_s", "hpcjobs report, CPU s"),
    ("report_json_cpu_s", "hpcjobs report --json, CPU s"),
    ("report_html_cpu_s", "hpcjobs report --html, CPU s"),
    ("html_kb", "report page, KB"),
    ("slurm_calls", "Slurm calls of status+history+3 reports"),
)


def bare_srun(cluster: BigCluster, nodes: int, folder: Path) -> float:
    """Seconds for ``srun`` alone to run every light rank once (one step, no wait)."""
    started = time.monotonic()
    cluster.slurm(
        "srun", "-N", str(nodes), f"--ntasks-per-node={GPUS}", "-t", "5",
        "--export", f"ALL,HPCJOBS_CHECKPOINT_DIR={folder}",
        PYTHON, LIGHT_RANK, "--steps", "1", "--step-time", "0", timeout=300,
    )  # fmt: skip
    return time.monotonic() - started


def bare_crash(cluster: BigCluster, nodes: int, folder: Path) -> float:
    """Seconds from a rank's crash (its error line on srun's stderr) to ``srun`` exiting, for
    a bare ``srun --kill-on-bad-exit`` of the same light ranks: what Slurm and this host take to
    tear down that many processes, the floor under a crash's ``detect`` phase."""
    crash = f"0:{GPUS * nodes // 2 + 3}:3"
    argv = [
        "srun", "-N", str(nodes), f"--ntasks-per-node={GPUS}", "-t", "5", "--kill-on-bad-exit=1",
        "--export", f"ALL,HPCJOBS_CHECKPOINT_DIR={folder},HPCJOBS_RESTART_COUNT=0",
        PYTHON, LIGHT_RANK, "--steps", "1000", "--step-time", "1", "--crash", crash,
        "--crash-text", "hpcjobs-bench: crashed",
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, env={**os.environ, **cluster.env}, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    crashed = None
    for line in proc.stderr:
        if crashed is None and "hpcjobs-bench: crashed" in line:
            crashed = time.monotonic()
    proc.wait(timeout=300)
    ended = time.monotonic()
    return ended - crashed if crashed is not None else float("nan")


def measure(nodes: int, folder: Path) -> dict[str, float]:
    with BigCluster.up(folder / "sandbox", nodes + SPARES, PORT_BASE) as cluster:
        figures: dict[str, float] = {}
        bare = folder / "bare"
        bare.mkdir(mode=0o755)
        figures["srun_launch_s"] = bare_srun(cluster, nodes, bare)
        crash = folder / "bare-crash"
        crash.mkdir(mode=0o755)
        figures["srun_teardown_s"] = bare_crash(cluster, nodes, crash)
        scenario = Scenario(cluster, folder / "scenario", sample_cpu=True)
        html = folder / "report.html"
        commands = scenario.run(html)
        figures.update(scenario.figures.values)
        figures["status_s"] = commands["status"][0]
        figures["history_s"] = commands["history"][0]
        figures["report_cpu_s"] = commands["report"][1]
        figures["report_json_cpu_s"] = commands["report --json"][1]
        figures["report_html_cpu_s"] = commands["report --html"][1]
        figures["html_kb"] = html.stat().st_size / 1024
        figures["slurm_calls"] = sum(len(calls) for _, _, calls in commands.values())
        return figures


#: The faults whose recovery is split into phases (tests/scale/phases.py).
FAULTS = (("node_lost", "node lost"), ("stall", "stall"), ("crash", "crash"))

#: The phase table's rows: each fault's phases, wall seconds and hpcjobs' CPU seconds.
PHASE_ROWS = tuple(
    row
    for fault, label in FAULTS
    for phase in PHASES
    for row in (
        (f"{fault}_{phase}_s", f"{label}: {phase}, wall s"),
        (f"{fault}_{phase}_cpu_s", f"{label}: {phase}, hpcjobs CPU s"),
    )
)


#: The split of each fault's detect and decide phases (tests/scale/phases.py, ``parts``); a
#: stall's detection is the stall watch's (the timeout, the warning, its grace), not Slurm's
#: teardown, so it is not split.
PART_ROWS = tuple(
    (f"{fault}_{part}_s", f"{label}: {part}, wall s")
    for fault, label in FAULTS
    for part in PARTS
    if fault != "stall" or part not in ("teardown", "classify")
)


def table(results: dict[int, dict[str, float]], rows: tuple[tuple[str, str], ...] = ROWS) -> str:
    sizes = sorted(results)
    head = f"{'figure':<46}" + "".join(f"{f'{n} x {GPUS}':>10}" for n in sizes)
    head += f"{'growth':>9}"
    lines = [head, "-" * len(head)]
    for name, label in rows:
        values = [results[n].get(name) for n in sizes]
        cells = "".join(f"{v:>10.2f}" if v is not None else f"{'-':>10}" for v in values)
        first, last = values[0], values[-1]
        growth = f"{last / first:>8.1f}x" if first and last is not None else f"{'-':>9}"
        lines.append(f"{label:<46}{cells}{growth}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="2,16,128", help="sizes, comma-separated")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = {}
    for nodes in (int(n) for n in args.nodes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"hpcjobs-scale-{nodes}-", dir="/tmp") as tmp:
            folder = Path(tmp)
            folder.chmod(0o755)
            started = time.monotonic()
            results[nodes] = measure(nodes, folder)
            print(f"{nodes} nodes: scenario in {time.monotonic() - started:.0f} s", flush=True)
    print(table(results))
    print("\nWhere each recovery's seconds go (tests/scale/phases.py):")
    print(table(results, PHASE_ROWS))
    print("\nDetect and decide, split (the fault event's 'exited', the requeue's 'took'):")
    print(table(results, PART_ROWS))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
