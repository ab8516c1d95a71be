"""Automatic requeue on the sandbox, end to end through ``hpcjobs submit``.

Every job runs ``requeue_workload.py``, a deterministic counter that checkpoints with
hpcjobs.runtime.checkpoint and stops on the warning signal with hpcjobs.runtime.stopflag. Each
test interrupts it one way (preemption, time limit, node failure, budget, application error, a
kill in the middle of a checkpoint) and then checks the chain's event log, ``sacct -D``, the
job's output and the final result, which must equal that of an uninterrupted run.

Preemptions come from an ``urgent`` job that takes every node (``--exclusive``). Where the
test goes through Slurm's own requeue (node failure, a kill after the grace time), it clears
Slurm's ~2 minute requeue hold with ``scontrol update jobid=X StartTime=now`` once the job is
PENDING with reason BeginTime, as the job's owner may; hpcjobs' own fast path (a continuation
job) is what the preemption and timeout tests measure.

Accounting differs between releases (docs/requeue.md, "Slurm 22.05 and 24.11"): 22.05 records a
run that ended during a preemption's grace time by how it exited (COMPLETED, FAILED 1:0),
24.11 records it PREEMPTED (exit code 0:0), and also the run after Slurm requeued a preempted
job. :meth:`Cluster.preempted_run` names what this cluster's Slurm records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import pytest

from hpcjobs.jobs.chain import Chain, read_chain
from hpcjobs.runner import LocalRunner
from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.slurm.parse import version_tuple
from tests.live.waiting import wait_for

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")
WORKLOAD = str(Path(__file__).with_name("requeue_workload.py"))


@dataclass
class Cluster:
    """The test sandbox seen from the login node: submit, watch, interrupt, clean up."""

    env: dict[str, str]
    folder: Path
    slurm_major: tuple[int, int]
    jobs: list[str] = field(default_factory=list)

    def preempted_run(self, state: str, exit_code: str = "0:0") -> tuple[str, str]:
        """``(state, exit code)`` in sacct of a run that ended during a preemption's grace time
        (or of the run after Slurm requeued a preempted job) and would otherwise be recorded
        ``state``: Slurm >= 24.05 records ``PREEMPTED`` whatever the exit (measured on 24.11)."""
        return ("PREEMPTED", "0:0") if self.slurm_major >= (24, 5) else (state, exit_code)

    @property
    def runner(self) -> LocalRunner:
        return LocalRunner(env=self.env)

    def slurm(self, *argv: str, check: bool = True) -> str:
        return self.runner.run(list(argv), check=check, timeout=60).stdout

    # ---- submitting --------------------------------------------------------------------------

    def submit(self, name: str, *options: str, steps: int, extra: tuple[str, ...] = ()) -> Job:
        """``hpcjobs --site sandbox submit`` the workload; returns the job and its folders.

        Waits first until no preemptor of an earlier test is left in the queue: one still
        pending would preempt this job too."""
        wait_for("earlier preemptors to leave the queue", self._no_preemptor, 120)
        out = self.folder / name
        out.mkdir(mode=0o755)
        result = out / "result.json"
        argv = [HPCJOBS, "--site", "sandbox", "submit", "-J", name, "--output-dir", str(out)]
        argv += [*options, "--", PYTHON, WORKLOAD, "--steps", str(steps)]
        argv += ["--result", str(result), *extra]
        proc = subprocess.run(
            argv,
            env={**os.environ, **self.env},
            cwd=out,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split()[-1]
        self.jobs.append(job_id)
        return Job(self, job_id, out, steps)

    def preempt(self) -> str:
        """Submit an ``urgent`` job that needs every node: it preempts whatever runs in batch."""
        out = self.slurm(
            "sbatch", "--parsable", "-p", "urgent", "-N", "3", "--exclusive",
            "-J", "preemptor", "-o", "/dev/null", "--wrap", "sleep 5",
        )  # fmt: skip
        job_id = out.strip().split(";")[0]
        self.jobs.append(job_id)
        return job_id

    def _no_preemptor(self) -> bool:
        return not self.slurm("squeue", "-h", "-n", "preemptor", "-o", "%i").strip()

    # ---- watching ----------------------------------------------------------------------------

    def state(self, job_id: str) -> str:
        """``STATE REASON`` from squeue, or "" once the job has left the queue."""
        return self.slurm("squeue", "-h", "-j", job_id, "-o", "%T %r", check=False).strip()

    def gone(self, job_id: str) -> bool:
        return self.state(job_id) == ""

    def runs(self, job_id: str) -> list[dict[str, str]]:
        """Every run of a job (``sacct -D``: one row per requeue), oldest first."""
        text = self.slurm(
            "sacct", "-n", "-X", "-D", "-P", "-j", job_id,
            "-o", "JobID,State,ExitCode,Start,End,NodeList",
        )  # fmt: skip
        keys = ("job_id", "state", "exit_code", "start", "end", "nodes")
        return [
            dict(zip(keys, line.split("|"), strict=False)) for line in text.splitlines() if line
        ]

    def settled_runs(self, job_id: str, count: int) -> list[dict[str, str]]:
        """The job's ``count`` runs once accounting has recorded how each ended."""

        def probe() -> list[dict[str, str]] | None:
            rows = self.runs(job_id)
            done = len(rows) == count and all(r["end"] not in ("", "Unknown") for r in rows)
            return rows if done else None

        return wait_for(f"sacct to record {count} run(s) of job {job_id}", probe, 30)

    def clear_requeue_hold(self, job_id: str, timeout: float = 90) -> None:
        """Slurm holds a requeued job ~2 min (PENDING, BeginTime); its owner may lift that."""
        wait_for(
            f"job {job_id} to be requeued (PENDING BeginTime)",
            lambda: self.state(job_id) == "PENDING BeginTime",
            timeout,
        )
        self.slurm("scontrol", "update", f"jobid={job_id}", "StartTime=now")

    def node_up(self, node: str) -> bool:
        """The node takes jobs again (sinfo prints one line per partition)."""
        states = self.slurm("sinfo", "-h", "-n", node, "-o", "%T", check=False).split()
        return bool(states) and all(s in ("idle", "mixed", "allocated") for s in states)

    def cancel_all(self, extra: list[str]) -> None:
        ids = sorted(set(self.jobs + extra))
        if ids:
            self.slurm("scancel", *ids, check=False)


@dataclass
class Job:
    """One submitted chain: its first job id, output folder and workload size."""

    cluster: Cluster
    root: str
    folder: Path
    steps: int

    @property
    def chain_file(self) -> Path:
        return self.folder / f"chain-{self.root}.tsv"

    @property
    def chain(self) -> Chain:
        return read_chain(self.chain_file)

    @property
    def log(self) -> str:
        path = self.folder / f"slurm-{self.root}.out"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    @property
    def checkpoints(self) -> CheckpointDir:
        return CheckpointDir(self.folder / "checkpoints")

    @property
    def result(self) -> dict[str, object] | None:
        path = self.folder / "result.json"
        return json.loads(path.read_text()) if path.exists() else None

    def events(self) -> list[tuple[str, str]]:
        return [(e.event, e.cause) for e in self.chain.events]

    def progress_at_least(self, step: int, timeout: float = 60) -> int:
        """Wait until the workload has reached ``step`` (its PROGRESS note)."""

        def probe() -> int | None:
            reached = self.checkpoints.progress()
            return reached if reached is not None and reached >= step else None

        return wait_for(f"job {self.root} to reach step {step}", probe, timeout, every=0.1)

    def running(self, job_id: str, timeout: float = 60) -> None:
        wait_for(
            f"job {job_id} to run",
            lambda: self.cluster.state(job_id).startswith("RUNNING"),
            timeout,
            every=0.1,
        )

    def ended(self, timeout: float = 120) -> Chain:
        """Wait for the chain's final event and for every job of the chain to leave the queue."""

        def probe() -> Chain | None:
            chain = self.chain
            return chain if chain.final is not None else None

        chain = wait_for(f"chain {self.root} to end", probe, timeout)
        for job_id in chain.job_ids:
            wait_for(f"job {job_id} to leave the queue", partial(self.cluster.gone, job_id), 60)
        self.cluster.jobs.extend(chain.job_ids)
        return self.chain

    def continuation(self, after: int) -> str:
        """The job id the chain continued in after its ``after``-th requeue (1-based)."""

        def probe() -> str | None:
            stops = self.chain.interruptions()
            if len(stops) < after:
                return None
            how = stops[after - 1].how
            return how.split()[3] if how.startswith("continued as job") else None

        new = wait_for(f"requeue {after} of chain {self.root}", probe, 60, every=0.1)
        self.cluster.jobs.append(new)
        return new


_REFERENCE: dict[int, dict[str, object]] = {}


def reference(steps: int, folder: Path) -> dict[str, object]:
    """The result of an uninterrupted run of the workload, computed here without Slurm."""
    if steps not in _REFERENCE:
        work = folder / f"reference-{steps}"
        work.mkdir()
        env = {**os.environ, "HPCJOBS_CHECKPOINT_DIR": str(work / "checkpoints")}
        argv = [PYTHON, WORKLOAD, "--steps", str(steps), "--step-time", "0"]
        argv += ["--checkpoint-every", str(steps + 1), "--result", str(work / "result.json")]
        subprocess.run(argv, env=env, check=True, timeout=60, capture_output=True)
        _REFERENCE[steps] = json.loads((work / "result.json").read_text())
    return _REFERENCE[steps]


def seconds(stamp: str) -> float:
    """An sacct time stamp (local time, 1 s resolution) as epoch seconds."""
    return datetime.fromisoformat(stamp).timestamp()


@pytest.fixture
def cluster(slurm_env: dict[str, str], shared_tmp: Path, slurm_version: str) -> Iterator[Cluster]:
    box = Cluster(env=dict(slurm_env), folder=shared_tmp, slurm_major=version_tuple(slurm_version))
    yield box
    # Nothing a test started may outlive it: continuations included.
    chains = [read_chain(p) for p in shared_tmp.glob("*/chain-*.tsv")]
    box.cancel_all([job for chain in chains for job in chain.job_ids])


def assert_resumed_without_loss(job: Job, chain: Chain, count: int, cause: str) -> None:
    """``count`` interruptions for ``cause``, each resumed from the step it stopped at."""
    stops = chain.interruptions()
    assert [s.cause for s in stops] == [cause] * count, job.chain_file.read_text()
    for stop in stops:
        assert stop.how.startswith("continued as job"), stop.how
        assert stop.resumed_job_id == stop.how.split()[3]
        assert stop.resumed_from == stop.checkpoint_at_stop
        # The workload checkpoints the step it finished when the signal came: nothing is redone.
        assert stop.steps_lost == 0, stop
    assert chain.final is not None and (chain.final.event, chain.final.cause) == ("end", "finish")
    assert len(set(chain.job_ids)) == count + 1


# ---- 1, 2: preemption -----------------------------------------------------------------------


def test_preempted_two_node_job_resumes_from_its_checkpoint(cluster: Cluster) -> None:
    job = cluster.submit("preempt-once", "-N", "2", "--gpus-per-node", "1", "-t", "5:00", steps=150)
    job.progress_at_least(20)
    preemptor = cluster.preempt()
    new = job.continuation(1)
    chain = job.ended()

    assert_resumed_without_loss(job, chain, 1, "preemption")
    assert job.result == reference(150, cluster.folder)
    stop = chain.interruptions()[0]
    assert stop.resumed_from is not None and 0 < stop.resumed_from < 150
    # The log of the whole chain is the first job's file.
    log = job.log
    assert "SIGUSR2 received, forwarding it to the launcher" in log
    assert f"preemption: continuing as job {new}" in log
    assert f"hpcjobs: run 1 of job {job.root}" in log
    assert f"resumed from checkpoint step {stop.resumed_from} (restart 1)" in log
    assert not (job.folder / f"slurm-{new}.out").exists()
    # Accounting: neither job was requeued by Slurm; the continuation started once the
    # preemptor's nodes were free, without Slurm's requeue hold.
    first = cluster.settled_runs(job.root, 1)
    second = cluster.settled_runs(new, 1)
    urgent = cluster.settled_runs(preemptor, 1)
    assert [r["state"] for r in first + second] == [
        cluster.preempted_run("COMPLETED")[0],
        "COMPLETED",
    ]
    assert first[0]["nodes"] == second[0]["nodes"] == "n[1-2]"
    gap = seconds(second[0]["start"]) - seconds(urgent[0]["end"])
    assert -1 <= gap <= 10, (urgent, second)


def test_preempted_twice_resumes_twice(cluster: Cluster) -> None:
    job = cluster.submit(
        "preempt-twice", "-N", "2", "--gpus-per-node", "1", "-t", "5:00", steps=200
    )
    job.progress_at_least(20)
    cluster.preempt()
    second = job.continuation(1)
    job.running(second)
    reached = job.progress_at_least((job.chain.interruptions()[0].progress_at_stop or 0) + 30)
    assert reached < 200
    cluster.preempt()
    third = job.continuation(2)
    chain = job.ended()

    assert_resumed_without_loss(job, chain, 2, "preemption")
    assert chain.job_ids == [job.root, second, third]
    assert job.result == reference(200, cluster.folder)
    assert job.log.count("resumed from checkpoint step") == 2
    states = [cluster.settled_runs(job_id, 1)[0]["state"] for job_id in chain.job_ids]
    preempted = cluster.preempted_run("COMPLETED")[0]
    assert states == [preempted, preempted, "COMPLETED"]


# ---- 3: time limit --------------------------------------------------------------------------


def test_time_limit_warning_continues_the_job(cluster: Cluster) -> None:
    # --time 2:00 with the signal 60 s ahead: Slurm sends it when 60 s are left, or up to 60 s
    # earlier. 130 steps of 0.5 s outlast the first run's warning, whenever it comes.
    job = cluster.submit(
        "timeout", "-N", "1", "--gpus-per-node", "1", "-t", "2:00", "--signal", "USR2@60",
        steps=130, extra=("--step-time", "0.5"),
    )  # fmt: skip
    chain = job.ended(timeout=170)

    stops = chain.interruptions()
    assert stops, job.chain_file.read_text()
    assert_resumed_without_loss(job, chain, len(stops), "timeout")
    assert job.result == reference(130, cluster.folder)
    assert "timeout: continuing as job" in job.log
    # Each run stopped on the warning, before Slurm's own time limit killed it.
    for job_id in chain.job_ids:
        assert [r["state"] for r in cluster.settled_runs(job_id, 1)] == ["COMPLETED"]


# ---- 4: node failure ------------------------------------------------------------------------


def test_node_down_requeues_and_resumes(cluster: Cluster) -> None:
    job = cluster.submit("node-down", "-N", "2", "--gpus-per-node", "1", "-t", "5:00", steps=100)
    job.progress_at_least(15)
    nodes = cluster.slurm("squeue", "-h", "-j", job.root, "-o", "%N").strip()
    victim = cluster.slurm("scontrol", "show", "hostnames", nodes).split()[-1]
    try:
        cluster.slurm(
            "scontrol", "update", f"nodename={victim}", "state=down", "reason=requeue-test"
        )
        cluster.clear_requeue_hold(job.root)
    finally:
        cluster.slurm("scontrol", "update", f"nodename={victim}", "state=resume", check=False)
        wait_for(f"node {victim} to be back", lambda: cluster.node_up(victim), 60)
    chain = job.ended()

    stops = chain.interruptions()
    assert [s.cause for s in stops] == ["node_failure"], job.chain_file.read_text()
    stop = stops[0]
    assert stop.how.startswith("requeued by Slurm (restart 1)")
    # Same job id, second run: Slurm's requeue, not a continuation.
    assert chain.job_ids == [job.root]
    assert [(e.event, e.restart) for e in chain.events if e.event == "start"] == [
        ("start", 0),
        ("start", 1),
    ]
    assert stop.resumed_from == stop.checkpoint_at_stop and stop.resumed_from is not None
    assert stop.steps_lost == 0
    assert chain.final is not None and chain.final.cause == "finish"
    assert job.result == reference(100, cluster.folder)
    assert f"resumed from checkpoint step {stop.resumed_from} (restart 1)" in job.log
    runs = cluster.settled_runs(job.root, 2)
    assert [r["state"] for r in runs] == ["NODE_FAIL", "COMPLETED"]


# ---- 5, 6: the chain ends -------------------------------------------------------------------


def test_exhausted_budget_ends_the_chain(cluster: Cluster) -> None:
    job = cluster.submit(
        "budget", "-N", "1", "--gpus-per-node", "1", "-t", "5:00",
        "--max-requeues", "preemption=0", steps=300,
    )  # fmt: skip
    job.progress_at_least(10)
    cluster.preempt()
    chain = job.ended()

    assert job.events()[-1] == ("end", "fail")
    assert chain.final is not None
    assert chain.final.detail == "requeue budget for preemption exhausted: 0/0"
    assert chain.job_ids == [job.root]
    assert not any(e.event == "requeue" for e in chain.events)
    assert "not requeued (0/0 requeues used)" in job.log
    assert job.result is None
    # The checkpoint taken on the signal is there for a manual restart.
    assert job.checkpoints.latest() is not None
    # Slurm does not requeue it either: one run, and it stays out of the queue.
    time.sleep(3)
    assert cluster.gone(job.root)
    runs = cluster.settled_runs(job.root, 1)
    assert [(r["state"], r["exit_code"]) for r in runs] == [cluster.preempted_run("FAILED", "1:0")]


def test_application_error_is_not_requeued(cluster: Cluster) -> None:
    job = cluster.submit(
        "app-error", "-N", "1", "--gpus-per-node", "1", "-t", "5:00",
        steps=100, extra=("--fail-at", "12", "--fail-code", "3"),
    )  # fmt: skip
    chain = job.ended(timeout=60)

    assert job.events() == [("start", "-"), ("end", "fail")]
    assert chain.final is not None
    assert chain.final.detail == "application failed with exit code 3 (not requeued)"
    assert "failing on purpose after step 12 (exit 3)" in job.log
    assert job.result is None
    assert not (job.folder / "checkpoints" / "DONE").exists()
    assert not (job.folder / f"DONE-{job.root}").exists()
    runs = cluster.settled_runs(job.root, 1)
    assert [(r["state"], r["exit_code"]) for r in runs] == [("FAILED", "3:0")]


# ---- 7: a kill in the middle of a checkpoint ------------------------------------------------


def test_kill_during_checkpoint_resumes_from_the_previous_one(cluster: Cluster) -> None:
    # The checkpoint of step 19 hangs half written; a preemption comes and the grace time runs
    # out, so Slurm kills the job and requeues it itself. The step-9 checkpoint must be used.
    marker = cluster.folder / "saving"
    job = cluster.submit(
        "kill-in-save", "-N", "1", "--gpus-per-node", "1", "-t", "5:00", steps=60,
        extra=("--slow-save-at", "19", "--slow-save-marker", str(marker)),
    )  # fmt: skip
    wait_for("the slow checkpoint to start", marker.exists, 60, every=0.1)
    partial = Path(marker.read_text())
    cluster.preempt()
    cluster.clear_requeue_hold(job.root, timeout=120)
    chain = job.ended()

    stops = chain.interruptions()
    assert [s.cause for s in stops] == ["preemption"], job.chain_file.read_text()
    stop = stops[0]
    assert stop.how.startswith("requeued by Slurm (restart 1)")
    assert stop.progress_at_stop == 19
    assert stop.resumed_from == 9
    assert stop.steps_lost == 10
    assert chain.job_ids == [job.root]
    assert "resumed from checkpoint step 9 (restart 1)" in job.log
    assert job.result == reference(60, cluster.folder)
    # The half-written folder is still there (too young to prune) and was never used.
    assert partial.is_dir() and not (partial / "COMPLETE").exists()
    assert [c.step for c in job.checkpoints.checkpoints()][-1] == 59
    # Two runs only: on 24.11 the second one is not requeued again (hpcjobs_chain_ends).
    runs = cluster.settled_runs(job.root, 2)
    assert [r["state"] for r in runs] == ["PREEMPTED", cluster.preempted_run("COMPLETED")[0]]
    time.sleep(3)
    assert cluster.gone(job.root)
    assert len(cluster.runs(job.root)) == 2


# ---- the same chain through the commands people use -----------------------------------------


def test_cli_follows_the_chain(cluster: Cluster) -> None:
    """`submit --wait` follows the job into its continuation and exits 0; `status`, `logs` and
    `history` given the first job id report the chain: cause, steps lost, resume latency."""
    out = cluster.folder / "cli-chain"
    out.mkdir(mode=0o755)
    env = {**os.environ, **cluster.env}
    argv = [HPCJOBS, "--site", "sandbox", "submit", "--wait", "--json", "-J", "cli-chain"]
    argv += ["--output-dir", str(out), "-N", "2", "--gpus-per-node", "1", "-t", "5:00", "--"]
    argv += [PYTHON, WORKLOAD, "--steps", "120", "--result", str(out / "result.json")]
    proc = subprocess.Popen(
        argv, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    ckpt = CheckpointDir(out / "checkpoints")
    wait_for("the workload to make progress", lambda: (ckpt.progress() or 0) >= 20, 90, 0.1)
    cluster.preempt()
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr
    root = json.loads(stdout)["job_id"]
    assert f"job {root} continues as job" in stderr
    assert "chain of job" in stderr and "finish" in stderr

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HPCJOBS, *args], env=env, capture_output=True, text=True, timeout=120, check=False
        )

    status = cli("status", root)
    assert status.returncode == 0, status.stderr
    assert f"job {root} continues as job" in status.stderr
    logs = cli("logs", root)
    assert f"hpcjobs: run 1 of job {root}" in logs.stdout
    data: dict[str, object] = {}
    for _ in range(60):  # slurmdbd records the continuation a moment after it ends
        history = cli("history", "--json", root)
        data = json.loads(history.stdout) if history.returncode == 0 else {}
        if data and len(data["jobs"]) == 2:  # type: ignore[arg-type]
            break
        time.sleep(1)
    assert data["final"] == {"result": "finish", "detail": "done marker present"}
    (stop,) = data["interruptions"]  # type: ignore[misc]
    assert stop["cause"] == "preemption"
    assert stop["steps_lost"] == 0
    assert stop["resume_latency_s"] is not None and stop["resume_latency_s"] < 30
    assert json.loads((out / "result.json").read_text()) == reference(120, cluster.folder)
