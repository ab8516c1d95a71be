"""Growing back on a busy cluster, with and without Slurm's job expansion (docs/requeue.md,
"Growing back"). Every job runs ``requeue_workload.py``, one rank per node, on whole nodes (8
CPUs, no GPU: Slurm merges no allocation that holds GRES).

With expansion: a sandbox of 5 nodes of its own that permits it (``sandbox up
--job-expansion``), its second user holding n4 and n5. ``-N 2-3`` runs on n1-n3; n2 is lost, the
chain runs on 2 nodes inside the job and asks Slurm for the one node it misses; once the other
user's job on n4 ends, n4 joins the job and the chain runs on 3 nodes again.

Without: the test sandbox (3 nodes; its Slurm does not permit expansion). The grower asks for a
whole run of 3 nodes beside the 2 the chain holds, which never come free while it runs; the
chain finishes on 2 nodes, never in the queue, and ``status`` said why.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcjobs.jobs.chain import Event
from tests.conftest import TEST_PORT_BASE, TEST_SANDBOX_DIR
from tests.live.cluster import HPCJOBS, Cluster, Job
from tests.live.test_faults import events, finished, node_down, resumed, run_nodes
from tests.live.waiting import wait_for

#: Whole nodes without GPUs (the sandbox's nodes have 8 CPUs).
WHOLE_CPU_NODES = ("-N", "2-3", "--gpus-per-node", "0", "--cpus-per-task", "8", "-t", "5:00")
#: The acceptance bounds: running on 2 nodes after the loss, on 3 after a node frees.
SHRINK_S = 10
GROW_S = 30
#: How long the grower is seen to wait on the busy cluster.
BUSY_WAIT_S = 6


@pytest.fixture(scope="module")
def expanding(sandbox: object) -> Iterator[tuple[Cluster, Path]]:
    """A 5-node sandbox that permits job expansion, beside the test sandbox; and its site."""
    from hpcjobs.sandbox.cluster import Sandbox
    from hpcjobs.sandbox.layout import Settings
    from hpcjobs.slurm.parse import version_tuple

    box = Sandbox(Path(f"{TEST_SANDBOX_DIR}-expand"))
    box.up(Settings(port_base=TEST_PORT_BASE + 300, nodes=5, grace_time=15, job_expansion=True))
    folder = Path(f"/tmp/hpcjobs-test-expand-runs-{os.getpid()}")
    folder.mkdir(mode=0o755)
    env = box.layout.client_env()
    version = subprocess.run(
        ["sinfo", "--version"], env={**os.environ, **env}, capture_output=True, text=True
    ).stdout.split()[-1]
    cluster = Cluster(env=env, folder=folder, slurm_major=version_tuple(version))
    try:
        yield cluster, box.layout.site_file
    finally:
        cluster.cancel_all([])
        box.down(purge=True)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _status(cluster: Cluster, job_id: str) -> dict[str, object]:
    proc = subprocess.run(
        [HPCJOBS, "status", "--json", job_id], env={**os.environ, **cluster.env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["jobs"]
    assert isinstance(row, dict)
    return row


def _grower(job: Job) -> Event:
    try:
        (grower,) = wait_for(
            f"the grower of job {job.root}", lambda: events(job.chain, "grower") or None, 30
        )
    except BaseException:
        print(f"event log:\n{job.chain_file.read_text()}\nlog:\n{job.log[-3000:]}")
        raise
    return grower


def test_an_elastic_job_grows_in_place_with_the_node_that_freed(
    expanding: tuple[Cluster, Path],
) -> None:
    cluster, site = expanding
    busy = cluster.fill_as_other_user(["n4", "n5"], 0, cpus=8)
    try:
        job = cluster.submit("grow-in-place", *WHOLE_CPU_NODES, steps=1000, site=str(site))
        job.progress_at_least(20)
        assert run_nodes(cluster, events(job.chain, "start")[0]) == ["n1", "n2", "n3"]
        with node_down(cluster, "n2", stay_out=True) as lost_at:
            _stop, shrunk = resumed(job)
            print(f"running on 2 nodes {shrunk.time - lost_at:.2f} s after the node was lost")
            assert run_nodes(cluster, shrunk) == ["n1", "n3"]
            assert shrunk.time - lost_at <= SHRINK_S, job.chain_file.read_text()
            grower = _grower(job)
            helper = grower.text("grower")
            assert grower.data.get("joins") is True and grower.text("size") == "1", grower
            time.sleep(BUSY_WAIT_S)
            assert cluster.state(helper).startswith("PENDING"), job.chain_file.read_text()
            waits = _status(cluster, job.root)["grower"]
            assert isinstance(waits, dict)
            assert (waits["job_id"], waits["joins"]) == (helper, True), waits
            freed_at = time.time()
            cluster.cancel(busy[0])  # the other user's job on n4 ends

            def grown() -> Event | None:
                starts = events(job.chain, "start")
                return starts[2] if len(starts) > 2 else None

            start = wait_for(f"chain {job.root} to grow", grown, 60, every=0.1)
        took = start.time - freed_at
        print(f"running on 3 nodes again {took:.2f} s after n4 was free")
        assert run_nodes(cluster, start) == ["n1", "n3", "n4"], job.chain_file.read_text()
        assert took <= GROW_S, job.chain_file.read_text()
        # The other user's job on n5 is untouched.
        assert cluster.state(busy[1]).startswith("RUNNING")
        chain = job.ended(timeout=240)
    finally:
        cluster.cancel(*busy)
    # One job all along: the node joined it.
    grow = [e for e in events(chain, "requeue") if e.cause == "grow"]
    assert len(grow) == 1 and grow[0].names("joined") == ["n4"], job.chain_file.read_text()
    assert grow[0].text("how") == "in_job" and chain.job_ids == [job.root]
    assert start.number("checkpoint") == grow[0].number("checkpoint") >= 0
    finished(job, chain)  # the same result as an uninterrupted run
    proc = subprocess.run(
        [HPCJOBS, "history", "--json", job.root], env={**os.environ, **cluster.env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stops = json.loads(proc.stdout)["interruptions"]
    assert [(s["cause"], s["job_id"], s["resumed_job_id"]) for s in stops] == [
        ("node_failure", job.root, job.root),
        ("grow", job.root, job.root),
    ], stops


def test_without_expansion_the_chain_runs_small_and_status_says_why(cluster: Cluster) -> None:
    job = cluster.submit("grow-no-expansion", *WHOLE_CPU_NODES, steps=400)
    job.progress_at_least(20)
    with node_down(cluster, "n2", stay_out=True):
        _stop, shrunk = resumed(job)
        assert len(run_nodes(cluster, shrunk)) == 2
        grower = _grower(job)
    assert grower.data.get("joins") is False and grower.text("size") == "3", grower
    # n2 is back, but a run of 3 whole nodes cannot start beside the 2 the chain holds.
    time.sleep(BUSY_WAIT_S)
    mover = grower.text("grower")
    assert cluster.state(mover).startswith("PENDING"), job.chain_file.read_text()
    waits = _status(cluster, job.root)["grower"]
    assert isinstance(waits, dict)
    assert (waits["job_id"], waits["joins"], waits["state"]) == (mover, False, "PENDING"), waits
    chain = job.ended(timeout=180)
    # The chain never waited in the queue: it finished in its first job, on 2 nodes.
    assert chain.job_ids == [job.root], job.chain_file.read_text()
    assert "does not permit job expansion" in job.log, job.log[-3000:]
    finished(job, chain)
