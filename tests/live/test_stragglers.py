"""Stragglers on the sandbox (docs/faults.md, "Stragglers"): one node's ranks take 1.5 times as
long per step as the others' (``requeue_workload.py --slow-node``, a slow GPU or NIC), on a
busy cluster (the sandbox's second user holds every GPU the chain does not).

With a spare node in the job, the slow node is flagged and swapped for the spare at the
program's next checkpoint: the run ends there and runs again inside the job, spending no
requeue budget; the run after it, all of one pace, flags nobody. Without a spare, the node is
flagged, the run goes on, and the chain leaves the node out of its next run.

The site's window is 20 s here (60 s by default) so that each test takes about a minute; the
rule is the same (hpcjobs/runtime/supervisor/pace.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import yaml

from hpcjobs.resources import site_configs_dir
from tests.live.cluster import HPCJOBS, Cluster, Job
from tests.live.test_faults import events, finished, resumed, run_nodes
from tests.live.test_spares import BUSY_GPUS, WITH_A_SPARE, in_job, job_nodes
from tests.live.waiting import wait_for

#: The acceptance bound: flagged and swapped (running again on the spare) within 2 minutes.
SWAP_BOUND_S = 120
WINDOW_S = 20
SLOW = ("--slow-factor", "1.5")


def site_with_window(cluster: Cluster) -> Path:
    config = yaml.safe_load((site_configs_dir() / "sandbox.yaml").read_text())
    config["faults"] = {"straggler_window_s": WINDOW_S}
    site = cluster.folder / "sandbox-stragglers.yaml"
    if not site.exists():
        site.write_text(yaml.safe_dump(config))
    return site


def slow_rank1(
    cluster: Cluster, name: str, options: tuple[str, ...], steps: int
) -> tuple[Job, str, list[str]]:
    """Submit the workload; once its first run has started, make rank 1's node (not the
    batch host, which a job cannot let go) the slow one. The job, that node, the run's nodes."""
    marker = cluster.folder / f"{name}.slow-node"
    job = cluster.submit(
        name, *options, steps=steps, site=str(site_with_window(cluster)),
        extra=("--slow-node-file", str(marker), *SLOW),
    )  # fmt: skip
    start = wait_for("the first run", lambda: next(iter(events(job.chain, "start")), None), 60)
    first = run_nodes(cluster, start)
    marker.write_text(first[1] + "\n")
    return job, first[1], first


def history(cluster: Cluster, root: str, *options: str) -> str:
    proc = subprocess.run(
        [HPCJOBS, "history", *options, root],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_slow_node_is_swapped_for_the_spare_at_the_next_checkpoint(cluster: Cluster) -> None:
    job, victim, first = slow_rank1(cluster, "straggler-swap", WITH_A_SPARE, steps=700)
    allocated = job_nodes(cluster, job.root)
    (spare,) = [n for n in allocated if n not in first]
    busy = cluster.fill_as_other_user(allocated, BUSY_GPUS)
    try:
        stop, start = resumed(job, timeout=SWAP_BOUND_S + 30)
        chain = job.ended(timeout=240)
    finally:
        cluster.cancel(*busy)

    flags = events(chain, "straggler")  # the run after the swap, one pace: no flag
    assert len(flags) == 1, job.chain_file.read_text()
    flag = flags[0]
    assert (flag.text("node"), flag.text("action")) == (victim, "swap"), flag.detail
    steps, peers = flag.number("steps"), flag.data["peers"]
    assert steps is not None and isinstance(peers, float) and steps <= 0.8 * peers, flag.detail
    began = events(chain, "start")[0].time
    print(
        f"flagged {flag.time - began:.1f} s, running on the spare {start.time - began:.1f} s "
        "after the start"
    )
    assert start.time - began <= SWAP_BOUND_S, job.chain_file.read_text()

    requeue, _second = in_job(job, chain)
    assert requeue.cause == "straggler"
    assert (stop.cause, stop.suspect) == ("straggler", victim)
    assert run_nodes(cluster, start) == [first[0], spare]
    # At a checkpoint: the run after it resumed from the step the program had reached.
    assert stop.resumed_from is not None and stop.resumed_from == stop.checkpoint_at_stop
    assert stop.progress_at_stop is not None and stop.resumed_from >= stop.progress_at_stop - 1
    finished(job, chain)
    text = history(cluster, job.root)
    assert "Slow nodes (stragglers):" in text and f"{victim} at 0." in text, text
    assert "swapped for a spare node at the next checkpoint" in text, text


def test_a_slow_node_without_a_spare_is_kept_out_of_the_next_run(cluster: Cluster) -> None:
    options = ("-N", "2", "--gpus-per-node", "1", "-t", "5:00")
    job, victim, _first = slow_rank1(cluster, "straggler-no-spare", options, steps=400)
    chain = job.ended(timeout=240)

    flags = events(chain, "straggler")
    assert len(flags) == 1, job.chain_file.read_text()
    flag = flags[0]
    assert (flag.text("node"), flag.text("action")) == (victim, "keep_out"), flag.detail
    # The run went on to the end; the chain would leave the node out of a next run.
    assert len(events(chain, "start")) == 1 and not events(chain, "requeue")
    assert chain.excluded() == [victim], job.chain_file.read_text()
    finished(job, chain)
    listed = json.loads(history(cluster, job.root, "--json"))["stragglers"]
    assert [(s["node"], s["action"], s["window_s"]) for s in listed] == [
        (victim, "keep_out", WINDOW_S)
    ], listed
