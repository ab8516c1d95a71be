"""Spare nodes on the sandbox: a job holds ``-N 2 --spare-nodes 1`` (all three nodes, so no
standby could start while a node is down), and after a fault of a node runs again inside the
same job, on the spare, from its newest complete checkpoint, with the node at fault out of the
job. Every job runs ``requeue_workload.py``, one rank per node, rank 0 on the batch host.

The partition has 3 nodes and the job needs 3, so the chain excludes nothing (a later job of
the chain must still fit): the node at fault leaves the job all the same.

An elastic job (``-N 2-3``) runs on the nodes left after a fault, keeps a grower waiting for
three nodes, and moves to it once the lost node is back.

The recovery times are measured in benchmarks/fault_bench.py; the bounds here are sanity
limits for a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

from hpcjobs.jobs.chain import Chain, Event
from tests.live.cluster import HPCJOBS, Cluster, Job
from tests.live.test_faults import (
    NCCL_IB_ERROR,
    batch_host_dies,
    events,
    finished,
    hung_since,
    node_down,
    resumed,
    run_nodes,
)
from tests.live.waiting import wait_for

WITH_A_SPARE = ("-N", "2", "--spare-nodes", "1", "--gpus-per-node", "1", "-t", "5:00")

#: Sanity bound on "running again after the fault" inside the job (no queue is involved).
SANITY_S = 30
#: A busy cluster: the sandbox's second user holds the other 3 of each node's 4 GPUs (its
#: nodes are shared), so no other job of the chain could start.
BUSY_GPUS = 3
#: How long a grower is seen to wait on the busy cluster (a scheduling pass after the node's
#: return: Slurm schedules on the event).
BUSY_WAIT_S = 6


def job_nodes(cluster: Cluster, job_id: str) -> list[str]:
    """The nodes Slurm shows in the job now."""
    text = cluster.slurm("squeue", "-h", "-j", job_id, "-o", "%N").strip()
    return cluster.slurm("scontrol", "show", "hostnames", text).split() if text else []


def reported_run(cluster: Cluster, root: str) -> dict[str, Any]:
    """The one run ``hpcjobs report --json`` shows for the chain, once accounting has it all."""
    (run,) = reported_runs(cluster, root, 1)
    return run


def reported_runs(cluster: Cluster, root: str, count: int) -> list[dict[str, Any]]:
    """The ``count`` runs ``hpcjobs report --json`` shows for the chain, once accounting has
    them all."""

    def probe() -> list[dict[str, Any]] | None:
        proc = subprocess.run(
            [HPCJOBS, "report", "--json", root],
            env={**os.environ, **cluster.env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        (chain,) = json.loads(proc.stdout)["chains"]
        runs: list[dict[str, Any]] = chain["runs"]
        return runs if len(runs) == count and not any(r["running"] for r in runs) else None

    return wait_for(f"accounting of job {root}", probe, 60)


def in_job(job: Job, chain: Chain) -> tuple[Event, Event]:
    """The chain's one requeue (how=in_job) and the start after it, both in the first job."""
    (requeue,) = events(chain, "requeue")
    starts = events(chain, "start")
    assert requeue.text("how") == "in_job", job.chain_file.read_text()
    assert [s.job_id for s in starts] == [job.root, job.root], job.chain_file.read_text()
    assert chain.job_ids == [job.root]  # no other job ran: the standby never started
    return requeue, starts[1]


def test_a_lost_node_is_replaced_by_the_spare_inside_the_job(cluster: Cluster) -> None:
    """On a busy cluster: the other user's jobs hold every GPU the chain does not."""
    job = cluster.submit("spare-node-down", *WITH_A_SPARE, steps=150)
    job.progress_at_least(20)
    first = run_nodes(cluster, events(job.chain, "start")[0])
    allocated = job_nodes(cluster, job.root)
    (spare,) = [n for n in allocated if n not in first]
    victim = first[1]  # not the batch host: rank 1's node
    busy = dict(zip(allocated, cluster.fill_as_other_user(allocated, BUSY_GPUS), strict=True))
    try:
        with node_down(cluster, victim) as down_at:
            stop, start = resumed(job)
            nodes = run_nodes(cluster, start)
            left = job_nodes(cluster, job.root)
        chain = job.ended()
        # The other user's jobs on the nodes that did not fail ran on, untouched.
        for node, other in busy.items():
            if node != victim:
                assert cluster.state(other).startswith("RUNNING"), (node, cluster.state(other))
    finally:
        cluster.cancel(*busy.values())

    requeue, second = in_job(job, chain)
    assert (stop.cause, stop.suspect, stop.excluded) == ("node_failure", victim, [])
    print(f"running again {start.time - down_at:.2f} s after the node went down")
    assert start.time - down_at <= SANITY_S, (start.time - down_at, job.chain_file.read_text())
    assert nodes == [first[0], spare] and victim not in left and len(left) == 2
    assert second.text("batch") == first[0]
    # From the newest complete checkpoint (the survivor checkpointed on srun's SIGTERM).
    assert stop.resumed_from == stop.checkpoint_at_stop and stop.resumed_from is not None
    assert requeue.detail == f"continued in job {job.root} on {first[0]},{spare}"
    finished(job, chain)
    # Slurm records the job at each size (RESIZING, then the rest): the report shows one run,
    # its GPU time over both sizes, and the spare's idle time as its own badput.
    run = reported_run(cluster, job.root)
    assert run["nodes"] == 2 and run["gpu_seconds"] > run["elapsed_s"] * run["gpus"], run
    assert run["parts_s"]["spare"] > 0, run
    assert sum(run["parts_s"].values()) == pytest.approx(run["elapsed_s"], abs=1e-6)


def test_an_elastic_job_runs_on_the_nodes_left(cluster: Cluster) -> None:
    """-N 2-3, no spare: the job starts on all three nodes; one is lost, and the chain runs on
    the two left inside the same job."""
    job = cluster.submit(
        "elastic-node-down", "-N", "2-3", "--gpus-per-node", "1", "-t", "5:00", steps=150
    )
    job.progress_at_least(20)
    first = run_nodes(cluster, events(job.chain, "start")[0])
    assert len(first) == 3, job.chain_file.read_text()
    victim = first[1]  # not the batch host
    # The node stays out (drained before it goes down): the grower waits until the chain
    # ends, which cancels it.
    with node_down(cluster, victim, stay_out=True) as down_at:
        stop, start = resumed(job)
        nodes = run_nodes(cluster, start)
        left = job_nodes(cluster, job.root)
        chain = job.ended()
    (grower,) = chain.grower_ids
    wait_for(f"grower {grower} to leave the queue", lambda: cluster.gone(grower), 60)

    requeue, _second = in_job(job, chain)
    assert requeue.detail == f"continued in job {job.root} on {first[0]},{first[2]}"
    assert (stop.cause, stop.suspect) == ("node_failure", victim)
    print(
        f"running again on {len(nodes)} nodes {start.time - down_at:.2f} s after the node went down"
    )
    assert start.time - down_at <= SANITY_S, (start.time - down_at, job.chain_file.read_text())
    assert nodes == [first[0], first[2]] and left == nodes
    assert stop.resumed_from == stop.checkpoint_at_stop and stop.resumed_from is not None
    finished(job, chain)
    run = reported_run(cluster, job.root)
    assert run["nodes"] == 2 and run["gpu_seconds"] > run["elapsed_s"] * run["gpus"], run
    # The time on 2 of 3 nodes is its own badput; no spare sat idle.
    assert run["parts_s"]["shrunk"] > 0 and run["parts_s"]["spare"] == 0, run
    assert sum(run["parts_s"].values()) == pytest.approx(run["elapsed_s"], abs=1e-6)


def test_an_elastic_job_grows_back_when_its_nodes_return(cluster: Cluster) -> None:
    """-N 2-3 on a busy cluster: a node lost, the chain runs on two and keeps a grower waiting
    for three. The node comes back, but the other user's jobs hold the rest of the GPUs of the
    chain's two nodes: the grower waits. Once they end, Slurm starts the grower beside the job
    (the sandbox's nodes are shared: each job takes one of a node's four GPUs), the run
    checkpoints and hands over, and the chain goes on on three nodes, from that checkpoint."""
    job = cluster.submit(
        "elastic-grow", "-N", "2-3", "--gpus-per-node", "1", "-t", "5:00", steps=1000
    )
    job.progress_at_least(20)
    first = run_nodes(cluster, events(job.chain, "start")[0])
    assert len(first) == 3, job.chain_file.read_text()
    busy = dict(zip(first, cluster.fill_as_other_user(first, BUSY_GPUS), strict=True))
    try:
        with node_down(cluster, first[1]):
            _stop, shrunk = resumed(job)
            assert len(run_nodes(cluster, shrunk)) == 2
            try:
                (grower,) = wait_for(
                    f"the grower of job {job.root}",
                    lambda: [e.text("grower") for e in events(job.chain, "grower")] or None,
                    30,
                )
            except BaseException:
                print(f"event log:\n{job.chain_file.read_text()}\nlog:\n{job.log[-3000:]}")
                raise
        # The node is back, but not the GPUs on the others: the grower waits.
        print(f"node back {time.time() - shrunk.time:.1f} s after the shrink")
        time.sleep(BUSY_WAIT_S)
        assert cluster.state(grower).startswith("PENDING"), job.chain_file.read_text()
        assert not events(job.chain, "handoff")
        # status says why the chain is on 2 nodes, and what it waits for.
        proc = subprocess.run(
            [HPCJOBS, "status", "--json", job.root],
            env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (row,) = json.loads(proc.stdout)["jobs"]
        assert row["grower"]["job_id"] == grower and row["grower"]["state"] == "PENDING", row
        freed_at = time.time()
        cluster.cancel(busy[first[0]], busy[first[2]])
    finally:
        cluster.cancel(*busy.values())

    def grown() -> Event | None:
        starts = [e for e in events(job.chain, "start") if e.job_id == grower]
        return starts[0] if starts else None

    start = wait_for(f"job {grower} to run", grown, 90, every=0.2)
    chain = job.ended()
    (handoff,) = events(chain, "handoff")
    assert (handoff.cause, handoff.text("next"), handoff.job_id) == ("grow", grower, job.root)
    nodes = run_nodes(cluster, start)
    took = start.time - freed_at
    print(f"running on {len(nodes)} nodes again {took:.2f} s after the GPUs were free")
    assert len(nodes) == 3 and took <= 90, job.chain_file.read_text()
    # From the checkpoint the run wrote when it made way.
    assert start.number("checkpoint") == handoff.number("checkpoint") >= 0
    assert chain.job_ids == [job.root, grower] and chain.count("requeue") == 1
    finished(job, chain)
    # history: the shrink and the growth, each an interruption, in order.
    proc = subprocess.run(
        [HPCJOBS, "history", "--json", job.root],
        env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stops = json.loads(proc.stdout)["interruptions"]
    assert [(s["cause"], s["job_id"], s["resumed_job_id"]) for s in stops] == [
        ("node_failure", job.root, job.root),
        ("grow", job.root, grower),
    ], stops
    # report: the first job's run on 2 of 3 nodes is badput of its own; the grower's is not.
    runs = reported_runs(cluster, job.root, 2)
    print(json.dumps([{k: r[k] for k in ("job_id", "nodes", "parts_s")} for r in runs]))
    assert runs[0]["parts_s"]["shrunk"] > 0 and runs[1]["parts_s"]["shrunk"] == 0, runs
    for run in runs:
        assert sum(run["parts_s"].values()) == pytest.approx(run["elapsed_s"], abs=1e-6)


def test_an_infrastructure_crash_releases_its_node_and_runs_on_the_spare(
    cluster: Cluster,
) -> None:
    job = cluster.submit(
        "spare-nccl", *WITH_A_SPARE, steps=120,
        extra=("--fault", "crash", "--fault-at", "25", "--fault-text", NCCL_IB_ERROR),
    )  # fmt: skip
    stop, start = resumed(job, timeout=90)
    nodes = run_nodes(cluster, start)
    left = job_nodes(cluster, job.root)
    chain = job.ended()

    in_job(job, chain)
    first = run_nodes(cluster, events(chain, "start")[0])
    suspect = first[1]
    assert (stop.cause, stop.suspect, stop.excluded) == ("infrastructure", suspect, [])
    (fault,) = events(chain, "fault")
    print(f"running again {start.time - fault.time:.2f} s after the crash was seen")
    assert start.time - fault.time <= SANITY_S, job.chain_file.read_text()
    # The suspect left the job: the chain no longer pays for it.
    assert suspect not in nodes and suspect not in left and len(left) == 2
    assert stop.resumed_from == stop.checkpoint_at_stop
    finished(job, chain)


def test_a_stalled_rank_is_replaced_by_the_spare(cluster: Cluster) -> None:
    timeout = 8
    job = cluster.submit(
        "spare-stall", *WITH_A_SPARE, "--stall-timeout", str(timeout), steps=300,
        extra=("--fault", "hang", "--fault-at", "20"),
    )  # fmt: skip
    stop, start = resumed(job, timeout=120)
    hung_at = hung_since(job.chain)
    nodes = run_nodes(cluster, start)
    left = job_nodes(cluster, job.root)
    chain = job.ended(timeout=180)

    in_job(job, chain)
    first = run_nodes(cluster, events(chain, "start")[0])
    assert (stop.cause, stop.suspect, stop.excluded) == ("stall", first[1], [])
    print(f"running again {start.time - hung_at:.2f} s after the last step ({timeout} s timeout)")
    assert start.time - hung_at <= timeout + SANITY_S, job.chain_file.read_text()
    assert first[1] not in nodes and first[1] not in left and len(left) == 2
    finished(job, chain)


#: A site health check that fails on the job's last node (never its batch host, the first).
FAILS_ON_THE_LAST_NODE = (
    'last=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | tail -n 1); '
    'if [ "$SLURMD_NODENAME" = "$last" ]; then echo "GPU 0: fell off the bus (test)"; exit 1; fi'
)


def test_a_node_failing_the_preflight_check_is_swapped_for_the_spare(cluster: Cluster) -> None:
    import yaml

    from hpcjobs.resources import site_configs_dir

    config = yaml.safe_load((site_configs_dir() / "sandbox.yaml").read_text())
    config["faults"] = {"health_check": FAILS_ON_THE_LAST_NODE, "health_check_timeout": 30}
    site = cluster.folder / "sandbox-checked.yaml"
    site.write_text(yaml.safe_dump(config))
    job = cluster.submit("spare-preflight", *WITH_A_SPARE, steps=30, site=str(site))
    chain = job.ended()

    (preflight,) = events(chain, "preflight")
    assert (preflight.cause, preflight.number("checked")) == ("fail", 3), preflight.detail
    (bad,) = preflight.names("failed")
    (health,) = events(chain, "health")
    assert (health.cause, health.text("node"), health.number("exit")) == ("fail", bad, 1)
    assert health.text("output") == "GPU 0: fell off the bus (test)"
    print(f"pre-flight check of 3 nodes: {preflight.data.get('seconds')} s")
    # The only run started on the batch host and the spare, in the job itself.
    (start,) = events(chain, "start")
    nodes = run_nodes(cluster, start)
    assert bad not in nodes and len(nodes) == 2 and start.text("batch") == nodes[0]
    assert chain.job_ids == [job.root] and not events(chain, "requeue")
    finished(job, chain)


def test_the_standby_still_takes_over_when_the_batch_host_dies(cluster: Cluster) -> None:
    """The job lives as long as its batch host: with spares too, its standby takes over. One
    node and one spare, so that the standby (two nodes) fits without the dead host."""
    job = cluster.submit(
        "spare-batch-host", "-N", "1", "--spare-nodes", "1", "--gpus-per-node", "1",
        "-t", "5:00", steps=150,
    )  # fmt: skip
    job.progress_at_least(20)
    batch, down_at, stop, start, nodes = batch_host_dies(job)
    chain = job.ended()

    assert stop.cause == "node_failure", job.chain_file.read_text()
    assert start.job_id != job.root and stop.how.startswith(f"standby job {start.job_id}")
    assert stop.suspect == batch and stop.excluded == [batch] and batch not in nodes
    assert start.time - down_at <= 60, (start.time - down_at, job.chain_file.read_text())
    finished(job, chain)
