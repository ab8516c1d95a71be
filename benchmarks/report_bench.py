"""``hpcjobs report`` over many chains: how many Slurm calls, and how much CPU.

Builds N synthetic chains (default 200) in a temporary folder, each three runs long (the first
job, preempted, and two continuations), with an event log and two ranks' progress logs of
``--steps`` steps per run, and runs the report's gathering and breakdown
(:func:`hpcjobs.cli.report.gather`) through a counting fake runner that answers ``sacct`` for
whatever ids it is asked about. Prints, side by side: chains, Slurm calls (by program), other
runner calls (reading files), and the CPU seconds of the whole report.

Run: .venv/bin/python benchmarks/report_bench.py [--chains 200] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hpcjobs.jobs.records import remember, write_record
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.usage import FIELDS

SLURM = {"sacct", "squeue", "scontrol", "sbatch", "scancel", "sinfo"}


class CountingRunner(LocalRunner):
    """Answers sacct from the synthetic accounting, ``cat``/``find`` from the files. A local
    runner, so that progress files are read directly, as on a login node."""

    def __init__(self, rows: Mapping[str, str]) -> None:
        super().__init__()
        self.rows = rows
        self.calls: Counter[str] = Counter()

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.calls[argv[0]] += 1
        if argv[0] == "sacct":
            ids = argv[argv.index("-j") + 1].split(",")
            return Result(tuple(argv), 0, "".join(self.rows.get(i, "") for i in ids), "")
        if argv[0] == "cat":
            path = Path(argv[1])
            text = path.read_text() if path.exists() else ""
            return Result(tuple(argv), 0 if path.exists() else 1, text, "")
        if argv[0] == "find":
            folder = Path(argv[1])
            out = []
            for path in sorted(folder.glob(argv[5])) if folder.is_dir() else []:
                out += [f"{path}:{line}\n" for line in path.read_text().splitlines()]
            return Result(tuple(argv), 0, "".join(out), "")
        raise AssertionError(f"unexpected command {argv}")


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S")


def build(root_dir: Path, chains: int, steps: int) -> tuple[list[str], dict[str, str]]:
    """Write the chains' files and index entries; return the roots and the sacct rows."""
    roots, rows = [], {}
    base = 1_790_000_000.0
    for n in range(chains):
        root = str(1000 + 3 * n)
        ids = [root, str(1001 + 3 * n), str(1002 + 3 * n)]
        out = root_dir / f"run-{root}"
        (out / f"progress-{root}").mkdir(parents=True)
        events: list[str] = []
        logs: dict[int, list[str]] = {0: [], 1: []}
        t, step = base + n * 10_000, 0
        for i, job in enumerate(ids):
            start, checkpoint = t + 30, step - 1
            events.append(f"{start + 0.5}\t{job}\t0\tstart\t-\tcheckpoint={checkpoint}\n")
            first = start + 10
            step = max(0, step - 7) if i else 0
            for k in range(steps):
                for rank in (0, 1):
                    logs[rank].append(f"{first + k * 0.5 + rank * 0.01:.3f} {step} n{rank + 1}\n")
                step += 1
            end = first + steps * 0.5 + 5
            if i < 2:
                events.append(f"{end - 4}\t{job}\t0\tsignal\twarning\tSIGUSR2\n")
                how = f"continued as job {ids[i + 1]} checkpoint={step - 8} progress={step - 1}"
                events.append(f"{end - 1}\t{job}\t0\trequeue\tpreemption\t{how}\n")
            else:
                events.append(f"{end - 1}\t{job}\t0\tend\tfinish\tcompleted\n")
            rows[job] = (
                f"{job}|{job}|COMPLETED|{_stamp(t)}|{_stamp(start)}|{_stamp(end)}|"
                f"{int(end) - int(start)}|billing=16,cpu=16,gres/gpu=8,node=2|"
                f"billing=16,cpu=16,gres/gpu=8,node=2|16|00:00:00|||2|n[1-2]|ann|proj|batch|train\n"
            )
            t = end + 3
        (out / f"chain-{root}.tsv").write_text("".join(events))
        for rank, lines in logs.items():
            (out / f"progress-{root}" / f"rank-{rank}.log").write_text("".join(lines))
        record = out / "record.json"
        write_record(record, {"spec": {"nodes": 2, "gpus_per_node": 4}})
        remember([root], record, output_dir=str(out))
        roots.append(root)
    assert all(len(FIELDS) == 19 for _ in [0])
    return roots, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=200)
    parser.add_argument("--steps", type=int, default=300, help="steps per run and rank")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hpcjobs-report-bench-"))
    os.environ["XDG_STATE_HOME"] = str(folder / "state")
    try:
        roots, rows = build(folder, args.chains, args.steps)
        from hpcjobs.cli.report import gather

        runner = CountingRunner(rows)
        begin_cpu, begin_wall = time.process_time(), time.perf_counter()
        reports = gather(runner, SlurmClient(runner), roots, None)
        cpu, wall = time.process_time() - begin_cpu, time.perf_counter() - begin_wall
        slurm = {k: v for k, v in runner.calls.items() if k in SLURM}
        other = {k: v for k, v in runner.calls.items() if k not in SLURM}
        goodput = sum(r.goodput or 0 for r in reports) / len(reports)
        print(f"{'chains':>8} {'runs':>6} {'slurm calls':>12} {'file reads':>11} "
              f"{'CPU s':>7} {'wall s':>7}  mean goodput")  # fmt: skip
        print(f"{len(reports):>8} {sum(len(r.runs) for r in reports):>6} "
              f"{sum(slurm.values()):>12} {sum(other.values()):>11} {cpu:>7.3f} {wall:>7.3f}"
              f"  {goodput * 100:.1f} %")  # fmt: skip
        print(f"slurm calls by program: {dict(slurm)}; file reads by program: {dict(other)}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
