"""Cancel means stop, whatever the timing: a job cancelled at any point of its start (pending,
while its script submits the standby, after it) never runs its program again, through its
standby or otherwise, and leaves nothing in the queue."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from hpcjobs.jobs.chain import read_chain
from tests.live.cluster import HPCJOBS, Cluster
from tests.live.waiting import wait_for

#: Seconds between the submission's answer and the cancel: from "still pending" through "the
#: script is submitting its standby" to "the program runs" (the two ways interleave).
DELAYS = {"hpcjobs cancel": (0.0, 0.3, 0.6, 1.0, 2.0), "scancel": (0.15, 0.45, 0.8, 1.5)}
#: How long a standby released by mistake would take to show up after the chain left the queue
#: (the scheduler runs on every submission and job end; this is well above that).
SETTLE_S = 3.0


def _queue(cluster: Cluster, name: str) -> list[str]:
    return cluster.slurm("squeue", "-h", "-n", name, "-o", "%i", check=False).split()


def _explain(cluster: Cluster, name: str, chain_file: Path) -> None:
    """Print what is left in the queue and what the chain logged (shown when a test fails)."""
    print(f"event log {chain_file}:\n{chain_file.read_text() if chain_file.exists() else '-'}")
    print(cluster.explain(_queue(cluster, name)))


@pytest.mark.parametrize("how", ["hpcjobs cancel", "scancel"])
def test_a_cancelled_job_never_runs_again(cluster: Cluster, how: str) -> None:
    env = {**os.environ, **cluster.env}
    for delay in DELAYS[how]:
        name = f"cancel-{how.split()[0]}-{int(delay * 1000)}"
        out = cluster.folder / name
        out.mkdir(mode=0o755)
        starts = out / "starts"
        program = f'echo "$SLURM_JOB_ID" >> {starts}; exec sleep 300'
        argv = [HPCJOBS, "--site", "sandbox", "submit", "-J", name, "--output-dir", str(out)]
        argv += ["-t", "5:00", "--", "bash", "-c", program]
        proc = subprocess.run(argv, env=env, cwd=out, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        root = proc.stdout.split()[-1]
        cluster.jobs.append(root)
        time.sleep(delay)
        if how == "scancel":
            cluster.slurm("scancel", root)
        else:
            done = subprocess.run(
                [HPCJOBS, "cancel", root], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
        try:
            wait_for(f"chain {root} to leave the queue", lambda n=name: not _queue(cluster, n), 60)
        except BaseException:
            _explain(cluster, name, out / f"chain-{root}.jsonl")
            raise
        time.sleep(SETTLE_S)
        chain_file = out / f"chain-{root}.jsonl"
        chain = read_chain(chain_file) if chain_file.exists() else None
        cluster.jobs.extend(chain.standby_ids if chain else [])
        # One line per rank that started, with the job it ran in.
        ran = sorted(set(starts.read_text().split())) if starts.exists() else []
        log = chain_file.read_text() if chain_file.exists() else ""
        assert not _queue(cluster, name), f"after a cancel {delay} s in: {log}"
        assert ran in ([], [root]), f"after a cancel {delay} s in the program ran in {ran}: {log}"
        if chain is not None and chain.final is not None:
            assert (chain.final.event, chain.final.cause) == ("end", "fail"), log
            assert "cancelled" in chain.final.detail, log


def test_a_cancelled_running_job_logs_its_end(cluster: Cluster, shared_tmp: Path) -> None:
    """The ordinary case, for the record: the run logs ``end fail cancelled`` itself and its
    standby goes with it."""
    out = shared_tmp / "cancel-running"
    out.mkdir(mode=0o755)
    env = {**os.environ, **cluster.env}
    argv = [HPCJOBS, "--site", "sandbox", "submit", "-J", "cancel-running"]
    argv += ["--output-dir", str(out), "-t", "5:00", "--", "sleep", "300"]
    proc = subprocess.run(argv, env=env, cwd=out, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    root = proc.stdout.split()[-1]
    cluster.jobs.append(root)
    chain_file = out / f"chain-{root}.jsonl"
    wait_for(
        f"job {root} to start its program",
        lambda: chain_file.exists() and read_chain(chain_file).job_ids == [root],
        60,
    )
    done = subprocess.run(
        [HPCJOBS, "cancel", root], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    chain = wait_for(
        f"chain {root} to log its end",
        lambda: (c := read_chain(chain_file)).final is not None and c,
        60,
    )
    assert chain.final is not None and chain.final.detail == "cancelled"
    standby = chain.standby_for(root)
    assert standby is not None
    cluster.jobs.append(standby)
    wait_for(f"standby {standby} to leave the queue", lambda: cluster.gone(standby), 60)
    assert chain.job_ids == [root]
