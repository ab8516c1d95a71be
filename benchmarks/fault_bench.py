"""Resume latency after faults Slurm does not announce, on the sandbox: hpcjobs vs Slurm's default.

For a 2-node ``hpcjobs submit`` job (one rank per node) it injects, one job each:

  * node failure: the node that is not the batch host is set DOWN;
  * batch host failure: the batch host's slurmd and slurmstepd are frozen and the job's
    processes there killed (nothing of that run can act), then it is set DOWN;
  * infrastructure crash: rank 1 prints a real NCCL InfiniBand error and exits 1;
  * stall: rank 1 stops progressing (``--stall-timeout 10``, the site's 10 s grace).

and prints the time from the fault (the DOWN, the crashing rank's last progress report, the hung
rank's last report) to the chain running again, and whether the next run avoided the node (for
"grow back": whether it runs on 3 nodes).

Slurm's default path, for comparison: a plain ``sbatch --requeue`` 2-node job whose second node
is set DOWN comes back after Slurm's requeue hold (``--skip-default`` leaves it out: it takes
about two and a half minutes); a crashed job is FAILED and stays so; a hung one burns its time
limit. Times come from the event log and the progress reports (no sacct rounding).

With ``--elastic`` every job asks for ``-N 2-3`` (the whole 3-node sandbox): a node failure
makes it run on the 2 nodes left inside the job, and a second row, "grow back", measures the
time from the node's return to the chain running on 3 nodes again (its grower takes over at the
next checkpoint, docs/requeue.md "Growing back").

With ``--spare-nodes 1`` every job holds a third node (``-N 2 --spare-nodes 1``: the whole
3-node sandbox, so no standby could start) and recovers inside itself; put its table beside the
one without (the batch host's failure is left out there: it goes through the standby as before).

Run: SLURM_CONF=<state>/etc/slurm.conf .venv/bin/python benchmarks/fault_bench.py
Without SLURM_CONF it starts (and afterwards stops) a sandbox of its own, like requeue_bench.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from requeue_bench import (
    HPCJOBS,
    PYTHON,
    ROOT,
    WORKLOAD,
    Slurm,
    cluster,
    sandbox_options,
    scratch,
    wait_for,
)

sys.path.insert(0, str(ROOT))

from hpcjobs.jobs.chain import Chain, chain_file, read_chain
from hpcjobs.report.progressfiles import read_progress
from hpcjobs.runner import LocalRunner
from tests.live.test_faults import NCCL_IB_ERROR, node_processes

PLAIN_JOB = """#!/bin/bash
date +%s.%N >> {starts}
srun -N 2 --ntasks-per-node=1 sleep 600
"""


#: Options every job of this run is submitted with (``--spare-nodes K``).
SUBMIT_OPTIONS: list[str] = []


def submit(
    slurm: Slurm, folder: Path, name: str, *extra: str, options: tuple[str, ...] = ()
) -> str:
    out = folder / name
    out.mkdir(mode=0o755)
    argv = [HPCJOBS, "--site", "sandbox", "submit", "-J", name, "--output-dir", str(out)]
    argv += ["-N", "2", "--gpus-per-node", "1", "-t", "10:00", *SUBMIT_OPTIONS, *options]
    argv += ["--", PYTHON, WORKLOAD]
    argv += ["--steps", "400", "--result", str(out / "result.json"), *extra]
    root = slurm.run(*argv, cwd=out).split()[-1]
    slurm.jobs.append(root)
    return root


def chain_of(folder: Path, name: str, root: str) -> Chain:
    return read_chain(chain_file(folder / name, root))


def cancel_chain(slurm: Slurm, folder: Path, name: str, root: str) -> None:
    """Cancel every job of the chain: its runs, standbys and growers."""
    chain = chain_of(folder, name, root)
    slurm.run("scancel", root, *chain.job_ids, *chain.standby_ids, *chain.grower_ids, check=False)


def next_start(folder: Path, name: str, root: str, timeout: float = 120) -> tuple[float, str]:
    """When the chain's second run began, and its nodes."""

    def probe() -> tuple[float, str] | None:
        starts = [e for e in chain_of(folder, name, root).events if e.event == "start"]
        if len(starts) < 2:
            return None
        return starts[1].time, starts[1].detail.split("nodes=")[1].split()[0]

    return wait_for(f"{name} to run again", probe, timeout)


def first_run(folder: Path, name: str, root: str) -> tuple[list[str], str]:
    start = wait_for(
        f"{name} to start",
        lambda: next((e for e in chain_of(folder, name, root).events if e.event == "start"), None),
        120,
    )
    nodes = start.detail.split("nodes=")[1].split()[0]
    return [nodes], start.detail.split("batch=")[1]


def report_time(folder: Path, name: str, rank: int, step: int) -> float:
    """When ``rank`` reported ``step`` (the agents' history, as ``hpcjobs report`` reads it)."""
    (progress,) = (folder / name).glob("progress-*")
    root = progress.name.split("-", 1)[1]
    reports = read_progress(LocalRunner(), str(folder / name), root).get(rank, [])
    return [r.time for r in reports if r.step == step][-1]


def progressed(folder: Path, name: str, step: int) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            text = (folder / name / "checkpoints" / "PROGRESS").read_text().strip()
        except OSError:
            return False
        return text.isdigit() and int(text) >= step

    return probe


def hostnames(slurm: Slurm, hostlist: str) -> list[str]:
    return slurm.run("scontrol", "show", "hostnames", hostlist).split()


def node_down(slurm: Slurm, node: str) -> float:
    when = time.time()
    slurm.run("scontrol", "update", f"nodename={node}", "state=down", "reason=bench")
    return when


def node_back(slurm: Slurm, node: str) -> None:
    slurm.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    time.sleep(2)


def ctld_log(slurm: Slurm) -> Path:
    for line in slurm.run("scontrol", "show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SlurmctldLogFile":
            return Path(value.strip())
    raise SystemExit("scontrol show config names no SlurmctldLogFile")


def ctld_time(log: Path, pattern: str) -> float | None:
    """When slurmctld last logged ``pattern`` (its log needs LogTimeFormat=iso8601_ms, as
    the sandbox's has); None when it did not, or logs whole seconds only."""
    found = None
    with log.open(errors="replace") as handle:
        for line in handle:
            if pattern in line and line.startswith("[") and "." in line[:25]:
                found = line[1 : line.index("]")]
    return datetime.fromisoformat(found).timestamp() if found else None


def phases(
    slurm: Slurm, folder: Path, name: str, root: str, fault: float, start: float
) -> dict[str, object]:
    """Where the time between the fault and the next run went: hpcjobs until the job ended,
    Slurm until it allocated the next job (a batch job waits for the next scheduling pass,
    at most SchedulerParameters' batch_sched_delay, 3 s by default, later), then hpcjobs
    again until the program started."""
    chain = chain_of(folder, name, root)
    first = chain.job_ids[0]
    others = [e.job_id for e in chain.events if e.event == "start" and e.job_id != first]
    if not others:  # it ran again inside its job: no job ended, nothing was scheduled
        return {"latency": start - fault}
    second = others[0]
    log = ctld_log(slurm)
    ended = ctld_time(log, f"_job_complete: JobId={first} done")
    allocated = ctld_time(log, f"Allocate JobId={second} ") or ctld_time(
        log, f"Started JobId={second} "
    )
    row: dict[str, object] = {"latency": start - fault}
    if ended is not None and allocated is not None and fault <= ended <= allocated <= start:
        row.update(until_end=ended - fault, scheduling=allocated - ended, startup=start - allocated)
    return row


def bench_node(slurm: Slurm, folder: Path, batch_host: bool, trial: int) -> dict[str, object]:
    name = f"{'batch-host' if batch_host else 'node'}-{trial}"
    root = submit(slurm, folder, name)
    wait_for("progress", progressed(folder, name, 20 + 6 * trial), 120)
    nodes_text, batch = first_run(folder, name, root)
    nodes = hostnames(slurm, nodes_text[0])
    victim = batch if batch_host else next(n for n in nodes if n != batch)
    frozen: list[int] = []
    if batch_host:
        job_pids, frozen = node_processes(slurm.env["SLURM_CONF"], root, victim)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        for pid in job_pids:
            os.kill(pid, signal.SIGKILL)
    try:
        down = node_down(slurm, victim)
        start, new_nodes = next_start(folder, name, root)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        node_back(slurm, victim)
    cancel_chain(slurm, folder, name, root)
    return {"latency": start - down, "avoided": victim not in hostnames(slurm, new_nodes)}


def bench_crash(slurm: Slurm, folder: Path, trial: int) -> dict[str, object]:
    name = f"crash-{trial}"
    step = 25 + 6 * trial  # 0.6 s apart: the trials meet Slurm's scheduling passes at all phases
    root = submit(slurm, folder, name, "--fault", "crash", "--fault-at", str(step), "--fault-text",
                  NCCL_IB_ERROR)  # fmt: skip
    start, new_nodes = next_start(folder, name, root)
    nodes, _batch = first_run(folder, name, root)
    suspect = hostnames(slurm, nodes[0])[1]
    row = phases(slurm, folder, name, root, report_time(folder, name, 1, step), start)
    cancel_chain(slurm, folder, name, root)
    return {**row, "avoided": suspect not in hostnames(slurm, new_nodes)}


def bench_stall(slurm: Slurm, folder: Path, timeout: int, trial: int) -> dict[str, object]:
    name = f"stall-{trial}"
    step = 20 + 6 * trial
    root = submit(slurm, folder, name, "--fault", "hang", "--fault-at", str(step),
                  options=("--stall-timeout", str(timeout)))  # fmt: skip
    start, new_nodes = next_start(folder, name, root, timeout=180)
    nodes, _batch = first_run(folder, name, root)
    suspect = hostnames(slurm, nodes[0])[1]
    row = phases(slurm, folder, name, root, report_time(folder, name, 1, step), start)
    cancel_chain(slurm, folder, name, root)
    return {**row, "avoided": suspect not in hostnames(slurm, new_nodes)}


def bench_grow(slurm: Slurm, folder: Path, trial: int) -> dict[str, object]:
    """An elastic job (``--elastic``) loses a node, runs on two, and grows back once the node
    returns: the time from its return to the grower's run."""
    name = f"grow-{trial}"
    root = submit(slurm, folder, name)
    wait_for("progress", progressed(folder, name, 20 + 6 * trial), 120)
    nodes_text, batch = first_run(folder, name, root)
    victim = next(n for n in hostnames(slurm, nodes_text[0]) if n != batch)
    try:
        node_down(slurm, victim)
        next_start(folder, name, root)
        grower = wait_for(
            "the grower",
            lambda: next(
                (e.text("grower") for e in chain_of(folder, name, root).events
                 if e.event == "grower"),
                None,
            ),
            60,
        )  # fmt: skip
    finally:
        back = time.time()
        node_back(slurm, victim)
    start = wait_for(
        f"{name} to grow back",
        lambda: next(
            (e for e in chain_of(folder, name, root).events
             if e.event == "start" and e.job_id == grower),
            None,
        ),
        120,
    )  # fmt: skip
    grown = hostnames(slurm, start.detail.split("nodes=")[1].split()[0])
    cancel_chain(slurm, folder, name, root)
    return {"latency": start.time - back, "avoided": len(grown) == 3}


def summary(trials: list[dict[str, object]]) -> dict[str, object]:
    """The trials of one fault: median latency (and range), median phases, all avoided."""

    def median(key: str) -> float | None:
        values = [float(t[key]) for t in trials if key in t]  # type: ignore[arg-type]
        return statistics.median(values) if len(values) == len(trials) else None

    latencies = [float(t["latency"]) for t in trials]  # type: ignore[arg-type]
    return {
        "latency": statistics.median(latencies),
        "low": min(latencies),
        "high": max(latencies),
        "until_end": median("until_end"),
        "scheduling": median("scheduling"),
        "startup": median("startup"),
        "avoided": all(t["avoided"] for t in trials),
    }


def default_node_failure(slurm: Slurm, folder: Path) -> dict[str, object]:
    out = folder / "plain"
    out.mkdir(mode=0o755)
    starts = out / "starts"
    script = out / "job.sh"
    script.write_text(PLAIN_JOB.format(starts=starts))
    job_id = slurm.run(
        "sbatch", "--parsable", "--requeue", "-p", "batch", "-N", "2", "-J", "bench-plain",
        "-o", "/dev/null", str(script),
    ).strip().split(";")[0]  # fmt: skip
    slurm.jobs.append(job_id)
    wait_for("the plain job to start", starts.exists, 60)
    time.sleep(2)
    nodes = hostnames(slurm, slurm.run("squeue", "-h", "-j", job_id, "-o", "%N").strip())
    down = node_down(slurm, nodes[-1])
    try:
        lines = wait_for(
            "the plain job to run again (Slurm's requeue hold is ~2 minutes)",
            lambda: (lambda x: x if len(x) >= 2 else None)(starts.read_text().split()),
            300,
            0.2,
        )
        again = hostnames(slurm, slurm.run("squeue", "-h", "-j", job_id, "-o", "%N").strip())
    finally:
        node_back(slurm, nodes[-1])
        slurm.run("scancel", job_id, check=False)
    return {"latency": float(lines[1]) - down, "avoided": nodes[-1] not in again}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-default", action="store_true", help="skip the ~2.5 min default")
    parser.add_argument("--stall-timeout", type=int, default=10)
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="trials per fault, the fault 0.6 s later each time (default 3); medians are shown",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=("node", "batch-host", "crash", "stall", "grow"),
        help="run only these faults (repeatable)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the jobs' output folders and print where"
    )
    parser.add_argument(
        "--submit-with",
        type=Path,
        metavar="CHECKOUT",
        help="submit with another checkout's hpcjobs (an earlier commit, to compare with)",
    )
    parser.add_argument(
        "--spare-nodes",
        type=int,
        default=0,
        metavar="K",
        help="submit every job with K spare nodes (recovery inside the job; no batch host fault)",
    )
    parser.add_argument(
        "--elastic",
        action="store_true",
        help="submit every job with -N 2-3 (a node failure: run on 2; then grow back to 3)",
    )
    sandbox_options(parser)
    args = parser.parse_args()
    if args.elastic:
        SUBMIT_OPTIONS.extend(["-N", "2-3"])
        args.only = args.only or ["node", "grow"]
        args.skip_default = True
    if args.spare_nodes:
        SUBMIT_OPTIONS.extend(["--spare-nodes", str(args.spare_nodes)])
        args.only = [k for k in args.only or ("node", "crash", "stall") if k != "batch-host"]
        args.skip_default = True

    benches: dict[str, tuple[str, str, Callable[[Slurm, Path, int], dict[str, object]]]] = {
        "node": ("node failure", "from DOWN", lambda s, f, t: bench_node(s, f, False, t)),
        "batch-host": (
            "batch host failure",
            "from DOWN",
            lambda s, f, t: bench_node(s, f, True, t),
        ),
        "crash": ("NCCL/IB crash", "from the last report", bench_crash),
        "grow": ("grow back (3 nodes)", "from its return", bench_grow),
        "stall": (
            f"stall ({args.stall_timeout} s)",
            "from the last report",
            lambda s, f, t: bench_stall(s, f, args.stall_timeout, t),
        ),
    }
    with cluster(args) as env:
        if args.submit_with:
            env = {**env, "PYTHONPATH": str(args.submit_with.resolve())}
        slurm = Slurm(env)
        folder = scratch("hpcjobs-fault-bench-")
        rows: list[tuple[str, dict[str, object], str]] = []
        plain = None
        try:
            for key, (fault, since, bench) in benches.items():
                if args.only and key not in args.only:
                    continue
                if key == "grow" and not args.elastic:
                    continue  # growing back needs an elastic size (-N 2-3)
                trials = [bench(slurm, folder, trial) for trial in range(args.repeat)]
                rows.append((fault, summary(trials), since))
            if not args.skip_default and not args.only:
                plain = default_node_failure(slurm, folder)
        finally:
            slurm.cancel_all()
            subprocess.run(["sleep", "1"], check=False)
            if args.keep:
                print(f"the jobs' output folders: {folder}")
            else:
                shutil.rmtree(folder, ignore_errors=True)

    defaults = {
        "node failure": (
            "skipped (~121 s hold; 133 s measured)"
            if plain is None
            else f"{plain['latency']:.1f} s, {'avoided' if plain['avoided'] else 'same node'}"
        ),
        "batch host failure": "the same requeue hold",
        "NCCL/IB crash": "never: the job is FAILED",
        "grow back (3 nodes)": "never: a job keeps its size",
    }
    spares = f"; -N 2 --spare-nodes {args.spare_nodes}" if args.spare_nodes else ""
    spares += "; -N 2-3" if args.elastic else ""
    print(f"{args.repeat} trial(s) per fault; median (lowest-highest){spares}")
    print("fault                  hpcjobs: running again            avoided   Slurm's default path")
    for fault, row, since in rows:
        default = defaults.get(fault, "never: it hangs until the time limit")
        spread = f"{row['latency']:.1f} s ({row['low']:.1f}-{row['high']:.1f})"
        print(
            f"{fault:22} {spread:17} {since:20} {'yes' if row['avoided'] else 'NO':>3}"
            f"       {default}"
        )
    split = [(fault, row) for fault, row, _ in rows if row["until_end"] is not None]
    if split:
        print()
        print("where the time went (medians)  until the job ended  Slurm scheduling  program start")
        for fault, row in split:
            print(
                f"{fault:30} {row['until_end']:12.2f} s {row['scheduling']:15.2f} s"
                f" {row['startup']:12.2f} s"
            )
        print("(Slurm starts a pending batch job at its next scheduling pass: at most")
        print(" SchedulerParameters' batch_sched_delay, 3 s by default, after the job ended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
