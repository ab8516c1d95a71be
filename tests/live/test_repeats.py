"""Faults that repeat, on the sandbox (docs/faults.md): a restart storm stops the chain with its
budget left and blames no node; a node blamed by two chains is kept out of the next submission.

The program is ``requeue_workload.py``, which knows nothing of these rules. Each test has a
suspects file of its own: the autouse fixture gives every test its own ``$XDG_STATE_HOME``,
which the jobs inherit.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from tests.live.cluster import HPCJOBS, PYTHON, WORKLOAD, Cluster, Job
from tests.live.test_faults import NCCL_IB_ERROR, events, nodes_of, run_nodes


def hpcjobs(cluster: Cluster, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HPCJOBS, "--site", "sandbox", *argv],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_a_crash_that_follows_the_program_stops_as_a_restart_storm(cluster: Cluster) -> None:
    """The same NCCL error at the same step after every resume, on a busy cluster (another
    user holds n3): the chain stops after 3 runs with 8 of its 10 requeues unused, blames no
    node, and a job can then use every node."""
    busy = cluster.fill_as_other_user(["n3"], 1)
    job = cluster.submit(
        "storm", "-N", "1", "--gpus-per-node", "1", "-t", "5:00",
        "--max-requeues", "infrastructure=10", steps=60,
        extra=("--fault", "crash", "--fault-at", "25", "--fault-rank", "0",
               "--fault-every-run", "--fault-text", NCCL_IB_ERROR),
    )  # fmt: skip
    chain = job.ended(timeout=240)

    assert chain.final is not None and chain.final.cause == "fail", job.chain_file.read_text()
    detail = chain.final.detail
    assert detail.startswith("restart storm: 3 runs in a row ended with infrastructure"), detail
    assert "at step 25" in detail and "checkpoint 19" in detail, detail
    repeated = chain.final.data["repeated"]
    assert isinstance(repeated, dict)
    assert repeated["runs"] == 3 and repeated["cause"] == "infrastructure"
    assert "NET/IB : Got completion from peer" in str(repeated["evidence"])
    assert len(events(chain, "requeue")) == 2  # 3 runs: 2 requeues of the 10 allowed
    assert len(events(chain, "start")) == 3
    # The first run's node was blamed; the same failure on another node cleared it, and
    # nobody is excluded at the end.
    starts = events(chain, "start")
    first, second = run_nodes(cluster, starts[0]), run_nodes(cluster, starts[1])
    assert first != second, job.chain_file.read_text()
    assert chain.excluded() == []
    assert "the program's failure, not a node's; no node blamed" in job.log
    assert "8 of 10 infrastructure requeue(s) unused" in job.log

    history = hpcjobs(cluster, "history", "--json", job.root)
    assert history.returncode == 0, history.stderr
    final = json.loads(history.stdout)["final"]
    assert final["result"] == "fail" and final["repeated"]["runs"] == 3
    text = hpcjobs(cluster, "history", job.root).stdout
    assert "Result: fail (restart storm: 3 runs in a row" in text
    listing = json.loads(hpcjobs(cluster, "suspects", "--json", "--all").stdout)
    assert listing["kept_out"] == [] and listing["suspects"] == [], listing

    cluster.cancel(*busy)
    after = cluster.submit("after-storm", "-N", "3", "--gpus-per-node", "1", steps=5)
    done = after.ended(timeout=120)
    assert done.final is not None and done.final.cause == "finish", after.chain_file.read_text()
    assert len(run_nodes(cluster, events(done, "start")[0])) == 3


def crash_chain(cluster: Cluster, name: str, extra: tuple[str, ...]) -> tuple[Job, str]:
    """A 2-node chain whose rank crashes with an NCCL error in its first run; it finishes on
    other nodes. The job, and the node it blamed."""
    job = cluster.submit(
        name, "-N", "2", "--gpus-per-node", "1", "-t", "5:00",
        "--max-requeues", "infrastructure=2", steps=40,
        extra=("--fault", "crash", "--fault-at", "10", "--fault-text", NCCL_IB_ERROR, *extra),
    )  # fmt: skip
    chain = job.ended(timeout=180)
    assert chain.final is not None and chain.final.cause == "finish", job.chain_file.read_text()
    (fault,) = events(chain, "fault")
    return job, fault.text("node")


def test_a_node_blamed_by_two_chains_is_kept_out_of_the_next_submission(
    cluster: Cluster,
) -> None:
    first, blamed = crash_chain(cluster, "offender-1", ())
    assert blamed, first.chain_file.read_text()
    # The second chain crashes on whichever rank runs on that node: on an idle cluster Slurm
    # gives it the same first nodes.
    second, again = crash_chain(cluster, "offender-2", ("--fault-node", blamed))
    assert again == blamed, (blamed, second.chain_file.read_text())

    listing = hpcjobs(cluster, "suspects", "--json")
    assert listing.returncode == 0, listing.stderr
    data = json.loads(listing.stdout)
    (kept,) = data["kept_out"]
    assert kept["node"] == blamed and kept["faults"] == 2
    assert {b["chain"] for b in kept["blames"]} == {first.root, second.root}
    assert abs(kept["until"] - (time.time() + 24 * 3600)) < 600
    assert kept["drain"].startswith(f"scontrol update NodeName={blamed} State=DRAIN")
    text = hpcjobs(cluster, "suspects").stdout
    assert f"{blamed} " in text and "An admin can drain them" in text

    # The next 2-node submission leaves it out, and says so.
    out = cluster.folder / "after"
    out.mkdir(mode=0o755)
    proc = subprocess.run(
        [HPCJOBS, "--site", "sandbox", "submit", "-J", "after", "--output-dir", str(out),
         "-N", "2", "--gpus-per-node", "1", "-t", "5:00", "--",
         PYTHON, WORKLOAD, "--steps", "300", "--result", str(out / "result.json")],
        env={**os.environ, **cluster.env}, cwd=out, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"leaving out repeat offender(s) {blamed} until" in proc.stderr
    job_id = proc.stdout.split()[-1]
    cluster.jobs.append(job_id)
    after = Job(cluster, job_id, out, 300)
    after.running(job_id, timeout=60)
    assert blamed not in nodes_of(cluster, job_id)
    assert blamed in cluster.slurm("scontrol", "show", "job", job_id).split("ExcNodeList=")[1]
    cluster.cancel(job_id)

    # A job that needs every node is not refused: the offender stays in, with a note.
    folder = cluster.folder / "whole"
    folder.mkdir(mode=0o755)
    whole = hpcjobs(cluster, "submit", "-N", "3", "--gpus-per-node", "1", "--output-dir",
                    str(folder), "--", "hostname")  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    assert f"not leaving out repeat offender(s) {blamed}: the partition has 3 node(s)" in (
        whole.stderr
    )
    cluster.jobs.append(whole.stdout.split()[-1])
