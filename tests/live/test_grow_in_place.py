"""Growing back on a busy cluster, with and without Slurm's job expansion (docs/requeue.md,
"Growing back"). Each test starts a sandbox of 5 nodes of its own beside the test sandbox,
whose second user holds n4 and n5. Every job runs ``requeue_workload.py``, one rank per node, on
whole nodes (8 CPUs, no GPU: Slurm merges no allocation that holds GRES). ``-N 2-3`` runs on
n1-n3; n2 is lost and the chain runs on 2 nodes inside the job; then the other user's job on n4
ends.

With expansion (``sandbox up --job-expansion``): the chain asked Slurm for the one node it
misses; n4 joins the job and the chain runs on 3 nodes again.

Without: the grower asks for a whole run of 3 nodes beside the 2 the chain holds, which never
come free while it runs; the chain finishes on 2 nodes, never in the queue, and ``status`` said
why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def busy_five_nodes(expansion: bool) -> Iterator[tuple[Cluster, Path, list[str]]]:
    """A 5-node sandbox (with or without job expansion), its site, and the jobs of its second
    user on n4 and n5."""
    from hpcjobs.sandbox.cluster import Sandbox
    from hpcjobs.sandbox.layout import Settings
    from hpcjobs.slurm.parse import version_tuple

    box = Sandbox(Path(f"{TEST_SANDBOX_DIR}-five"))
    box.up(
        Settings(port_base=TEST_PORT_BASE + 300, nodes=5, grace_time=15, job_expansion=expansion)
    )
    folder = Path(f"/tmp/hpcjobs-test-five-runs-{os.getpid()}")
    folder.mkdir(mode=0o755)
    env = box.layout.client_env()
    version = subprocess.run(
        ["sinfo", "--version"], env={**os.environ, **env}, capture_output=True, text=True
    ).stdout.split()[-1]
    cluster = Cluster(env=env, folder=folder, slurm_major=version_tuple(version))
    try:
        busy = cluster.fill_as_other_user(["n4", "n5"], 0, cpus=8)
        yield cluster, box.layout.site_file, busy
    finally:
        cluster.cancel_all([])
        box.down(purge=True)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def expanding(sandbox: object) -> Iterator[tuple[Cluster, Path, list[str]]]:
    with busy_five_nodes(expansion=True) as five:
        yield five


@pytest.fixture
def not_expanding(sandbox: object) -> Iterator[tuple[Cluster, Path, list[str]]]:
    with busy_five_nodes(expansion=False) as five:
        yield five


def _shrunk(cluster: Cluster, site: Path, name: str, steps: int) -> Job:
    """The chain on n1-n3, then on n1 and n3 once n2 is lost (n2 stays out meanwhile)."""
    job = cluster.submit(name, *WHOLE_CPU_NODES, steps=steps, site=str(site))
    job.progress_at_least(20)
    assert run_nodes(cluster, events(job.chain, "start")[0]) == ["n1", "n2", "n3"]
    return job


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
    expanding: tuple[Cluster, Path, list[str]],
) -> None:
    cluster, site, busy = expanding
    job = _shrunk(cluster, site, "grow-in-place", 1000)
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


def test_without_expansion_the_chain_runs_small_and_status_says_why(
    not_expanding: tuple[Cluster, Path, list[str]],
) -> None:
    cluster, site, busy = not_expanding
    job = _shrunk(cluster, site, "grow-no-expansion", 500)
    with node_down(cluster, "n2", stay_out=True):
        _stop, shrunk = resumed(job)
        assert run_nodes(cluster, shrunk) == ["n1", "n3"]
        grower = _grower(job)
        assert grower.data.get("joins") is False and grower.text("size") == "3", grower
        cluster.cancel(busy[0])  # n4 frees: one node, where a move needs three
        time.sleep(BUSY_WAIT_S)
        mover = grower.text("grower")
        assert cluster.state(mover).startswith("PENDING"), job.chain_file.read_text()
        waits = _status(cluster, job.root)["grower"]
        assert isinstance(waits, dict)
        assert (waits["job_id"], waits["joins"], waits["state"]) == (mover, False, "PENDING")
        chain = job.ended(timeout=180)
    # The chain never waited in the queue: it finished in its first job, on 2 nodes.
    assert chain.job_ids == [job.root], job.chain_file.read_text()
    assert not [e for e in events(chain, "requeue") if e.cause == "grow"]
    assert "does not permit job expansion" in job.log, job.log[-3000:]
    finished(job, chain)
