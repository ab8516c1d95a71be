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
import time
from pathlib import Path

from hpcjobs.jobs.chain import Chain
from hpcjobs.runtime.checkpoint import CheckpointDir
from tests.live.cluster import HPCJOBS, PYTHON, WORKLOAD, Cluster, Job, reference, seconds
from tests.live.waiting import wait_for


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
    assert "SIGUSR2 received (the warning): delivering it" in log
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
    # Which nodes Slurm picks is its business; how fast the continuation starts is measured in
    # benchmarks/requeue_bench.py. Here: it did not wait for Slurm's ~2 minute requeue hold.
    assert first[0]["nodes"] and second[0]["nodes"], (first, second)
    gap = seconds(second[0]["start"]) - seconds(urgent[0]["end"])
    assert -1 <= gap <= 60, (urgent, second)


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


# A node failure continues through the run's standby: tests/live/test_faults.py.


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

    assert job.events() == [("start", "-"), ("standby", "-"), ("end", "fail")]
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
    # out. The supervisor does not wait for the hung program after Slurm's SIGTERM (TERM_WAIT_S,
    # well inside KillWait): it logs the preemption and hands the chain to its standby, which
    # must use the step-9 checkpoint.
    marker = cluster.folder / "saving"
    job = cluster.submit(
        "kill-in-save", "-N", "1", "--gpus-per-node", "1", "-t", "5:00", steps=60,
        extra=("--slow-save-at", "19", "--slow-save-marker", str(marker)),
    )  # fmt: skip
    wait_for("the slow checkpoint to start", marker.exists, 60, every=0.1)
    partial = Path(marker.read_text())
    cluster.preempt()
    chain = job.ended(timeout=180)

    stops = chain.interruptions()
    assert [s.cause for s in stops] == ["preemption"], job.chain_file.read_text()
    stop = stops[0]
    standby = stop.resumed_job_id
    assert standby is not None and standby != job.root
    assert stop.how == f"continued as job {standby} (the standby)"
    assert stop.job_id == job.root
    assert stop.progress_at_stop == 19
    assert stop.resumed_from == 9
    assert stop.steps_lost == 10
    assert chain.job_ids == [job.root, standby]
    assert "resumed from checkpoint step 9 (restart 1)" in job.log
    assert job.result == reference(60, cluster.folder)
    # The half-written folder is still there (too young to prune) and was never used.
    assert partial.is_dir() and not (partial / "COMPLETE").exists()
    assert [c.step for c in job.checkpoints.checkpoints()][-1] == 59
    # One run each: Slurm did not requeue the killed job (the standby stands in for that).
    assert len(cluster.settled_runs(job.root, 1)) == 1
    assert [r["state"] for r in cluster.settled_runs(standby, 1)] == ["COMPLETED"]
    time.sleep(3)
    assert cluster.gone(job.root) and len(cluster.runs(job.root)) == 1


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
    # A sanity bound only (resume latency is measured in benchmarks/requeue_bench.py): well
    # below Slurm's own ~2 minute requeue hold, which is what hpcjobs avoids.
    assert stop["resume_latency_s"] is not None and stop["resume_latency_s"] < 90
    assert json.loads((out / "result.json").read_text()) == reference(120, cluster.folder)
