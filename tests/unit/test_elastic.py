"""Elastic size: ``-N MIN-MAX`` asks Slurm for a range, and after a fault of a node the chain
runs again inside the job on the nodes left while they are at least MIN, with a fake Slurm
(tests/live/test_spares.py runs the same path on a real one)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.errors import BadInputError
from hpcjobs.runtime.supervisor import decide
from hpcjobs.runtime.supervisor.policy import Policy, dump, parse
from hpcjobs.runtime.supervisor.supervise import Supervisor
from hpcjobs.script.jobspec import JobSpec
from hpcjobs.script.render import render_job
from tests.eventlines import events_in
from tests.unit.test_spares import JobSlurm, _sandbox_render
from tests.unit.test_spares import _supervisor as spare_supervisor


@pytest.mark.parametrize(
    ("usable", "nodes", "minimum", "size"),
    [(3, 3, 0, 3), (4, 3, 0, 3), (2, 3, 0, 0), (2, 3, 2, 2), (1, 3, 2, 0), (3, 3, 2, 3)],
    ids=["fixed", "spare-left", "fixed-too-few", "shrunk", "below-min", "full"],
)
def test_run_size(usable: int, nodes: int, minimum: int, size: int) -> None:
    assert decide.run_size(usable, nodes, minimum) == size


@pytest.mark.parametrize(
    ("argv", "sized"),
    [
        (["srun", "--nodes=3", "prog", "--nodes=3"], ["srun", "--nodes=2", "prog", "--nodes=3"]),
        (
            ["srun", "--nodes=3", "bash", "-c", "x", "hpcjobs-node", "torchrun", "--nnodes=3",
             "bash", "-c", "y", "hpcjobs-rank", "prog", "--nnodes=3"],
            ["srun", "--nodes=2", "bash", "-c", "x", "hpcjobs-node", "torchrun", "--nnodes=2",
             "bash", "-c", "y", "hpcjobs-rank", "prog", "--nnodes=3"],
        ),
        (["srun", "-l", "--nodes=3", "prog"], ["srun", "-l", "--nodes=2", "prog"]),
        (["srun", "-N", "3", "prog", "--nodes=3"], None),
        (["srun", "--nodes=1", "--ntasks=1", "prog"], None),
        (["bash", "-c", "x", "hpcjobs-task", "prog"], None),
    ],
    ids=["srun", "torchrun", "not-first", "other-form", "other-count", "no-srun"],
)  # fmt: skip
def test_the_launch_says_how_many_nodes_the_run_takes(
    argv: list[str], sized: list[str] | None
) -> None:
    assert decide.sized_launch(argv, 3, 2) == sized


@pytest.mark.parametrize(
    ("fields", "in_job"),
    [
        ({"nodes": 3, "min_nodes": 2}, True),
        ({"nodes": 3}, False),
        ({"nodes": 3, "min_nodes": 3}, False),
        ({"nodes": 2, "spare_nodes": 1}, True),
    ],
)
def test_an_elastic_size_or_spares_keep_the_chain_in_the_job(
    fields: dict[str, int], in_job: bool
) -> None:
    policy = Policy(**fields)
    assert policy.in_job is in_job
    assert parse(dump(policy)) == policy


# ---- the supervisor ---------------------------------------------------------------------------


def _elastic(tmp_path: Path, slurm: JobSlurm) -> Supervisor:
    """A job 300 asked for -N 2-3 (no spare), got n[1-3]."""
    sup = spare_supervisor(tmp_path, slurm, spare=0)
    sup.ctx.policy = Policy(
        budgets={"node_failure": 3, "stall": 3}, nodes=3, min_nodes=2, straggler_ratio=0
    )
    sup.program.argv = ["srun", "--nodes=3", "prog"]
    return sup


def test_a_run_goes_on_with_fewer_nodes_down_to_the_minimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []

    class Popen:
        def __init__(self, argv: list[str], **_: Any) -> None:
            started.append(argv)

    monkeypatch.setattr(subprocess, "Popen", Popen)
    slurm = JobSlurm()
    sup = _elastic(tmp_path, slurm)
    assert sup.nodes.take()
    assert sup.ctx.run_nodes == ["n1", "n2", "n3"]
    # n2 fails: Slurm took it out of the job; the run goes on with 2 nodes.
    slurm.jobs["300"]["NodeList"] = "n1,n3"
    slurm.nodes["n2"] = "down*"
    assert sup.nodes.stays_in_job("node_failure", ["n2"])
    assert sup.ctx.run_nodes == ["n1", "n3"]
    sup.program.launch()
    assert started[-1] == ["srun", "--nodelist=n1,n3", "--nodes=2", "prog"]
    (requeue,) = [
        e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "requeue"
    ]
    assert (requeue.cause, requeue.text("how")) == ("node_failure", "in_job")
    # Its start says the full size, for report's part "shrunk".
    sup.start.announce(1)
    start = [e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "start"][-1]
    assert (start.text("nodelist"), start.number("held"), start.number("full")) == ("n1,n3", 2, 3)
    # n3 fails too: one node is fewer than the minimum, the chain goes on in another job.
    slurm.jobs["300"]["NodeList"] = "n1"
    slurm.nodes["n3"] = "down*"
    assert not sup.nodes.stays_in_job("node_failure", ["n3"])


def test_a_job_slurm_started_smaller_runs_on_what_it_got(tmp_path: Path) -> None:
    slurm = JobSlurm()
    slurm.jobs["300"]["NodeList"] = "n[1-2]"
    sup = _elastic(tmp_path, slurm)
    sup.ctx.env.update(SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2")
    # Its nodes unknown (Slurm did not answer): as many as the job has.
    assert sup.program.sized(["srun", "--nodes=3", "prog"]) == ["srun", "--nodes=2", "prog"]
    assert sup.nodes.take()
    assert sup.ctx.run_nodes == ["n1", "n2"] and slurm.shrunk == []
    assert sup.program.sized(["srun", "--nodes=3", "prog"]) == [
        "srun", "--nodelist=n1,n2", "--nodes=2", "prog"
    ]  # fmt: skip
    # A launch it cannot size runs as written, and the job's log says so.
    assert sup.program.sized(["srun", "-N", "3", "prog"]) == [
        "srun",
        "--nodelist=n1,n2",
        "-N",
        "3",
        "prog",
    ]


def test_exclusions_leave_room_for_the_fewest_nodes_a_later_job_asks_for(
    tmp_path: Path,
) -> None:
    """A later job asks for 2-3 of the partition's 4 nodes: two may be excluded, not three."""
    slurm = JobSlurm()
    slurm.partition_nodes = lambda partition: 4  # type: ignore[method-assign]
    sup = _elastic(tmp_path, slurm)
    for node in ("n2", "n3", "n4"):
        sup.nodes.exclude("stall", [node])
    assert sup.ctx.chain.excluded() == ["n3", "n4"]


# ---- submission -------------------------------------------------------------------------------


def test_an_elastic_size_is_a_range_for_slurm_and_keeps_the_job_on_a_node_failure() -> None:
    rendered = _sandbox_render(nodes=3, min_nodes=2)
    assert "--nodes=2-3" in rendered.sbatch_args and "--no-kill" in rendered.sbatch_args
    assert "srun --nodes=3 --ntasks-per-node=4 --cpus-per-task=2 " in rendered.script
    # One task per node with all its ranks' CPUs: given tasks per node, Slurm would allocate
    # the fewest nodes of the range even on an idle cluster.
    assert not any(a.startswith("--ntasks-per-node") for a in rendered.sbatch_args)
    assert "--cpus-per-task=8" in rendered.sbatch_args
    policy = rendered.script.split("hpcjobs_policy=", 1)[1].split("\n", 1)[0]
    assert '"min_nodes":2' in policy and '"nodes":3' in policy


def test_a_range_of_one_size_is_a_fixed_size() -> None:
    rendered = _sandbox_render(nodes=3, min_nodes=3)
    assert "--nodes=3" in rendered.sbatch_args and "--no-kill" not in rendered.sbatch_args
    assert '"min_nodes":0' in rendered.script


def test_the_minimum_cannot_be_above_the_size() -> None:
    with pytest.raises(BadInputError) as caught:
        _sandbox_render(nodes=2, min_nodes=3)
    assert "min_nodes 3 is above nodes 2" in str(caught.value)
    assert "set nodes to 3 or more" in (caught.value.hint or "")


def test_an_elastic_size_needs_a_launcher_that_runs_on_every_node() -> None:
    with pytest.raises(BadInputError) as caught:
        _sandbox_render(nodes=2, min_nodes=1, launcher="none")
    assert "launcher srun or torchrun" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("2-3", "--nodes=2-3"), ("3", "--nodes=3"), ("3-3", "--nodes=3"), ("3-2", ""), ("0-2", "")],
)
def test_nodes_flag_takes_a_count_or_a_range(tmp_path: Path, value: str, ok: str) -> None:
    result = CliRunner().invoke(
        cli,
        ["--site", "sandbox", "render", "-N", value, "--output-dir", str(tmp_path), "--", "t"],
        catch_exceptions=False,
    )
    if ok:
        assert result.exit_code == 0, result.output
        assert f"#SBATCH {ok}\n" in result.output
    else:
        assert result.exit_code == 2 and "Traceback" not in result.output
        assert "-N" in result.output or "--nodes" in result.output


# ---- node counts in multiples -----------------------------------------------------------------


@pytest.mark.parametrize(("usable", "size"), [(8, 8), (7, 6), (6, 6), (5, 4), (4, 4), (3, 0)])
def test_a_run_takes_a_multiple_of_the_node_multiple(usable: int, size: int) -> None:
    """-N 4-8 --node-multiple 2: 7 usable nodes run 6; 3 are too few."""
    assert decide.run_size(usable, 8, 4, 2) == size


def test_a_grower_asks_for_the_next_multiple() -> None:
    assert decide.grower_size(4, 8, 0, 2) == (6, 8)
    assert decide.grower_size(6, 8, 1, 2) == (8, 9)


def _dgx_render(**fields: Any) -> Any:
    spec = JobSpec(command=["python3", "train.py"], output_dir="/o", **fields)
    return render_job(spec, load_site("dgx-h100-ib"))


def test_the_node_multiple_goes_to_the_supervisor() -> None:
    rendered = _dgx_render(nodes=4, min_nodes=2, node_multiple=2)
    assert "--nodes=2-4" in rendered.sbatch_args
    assert '"node_multiple":2' in rendered.script


@pytest.mark.parametrize(("nodes", "min_nodes"), [(3, 2), (4, 1), (3, None)])
def test_node_counts_must_be_multiples_of_the_node_multiple(
    nodes: int, min_nodes: int | None
) -> None:
    with pytest.raises(BadInputError) as caught:
        _dgx_render(nodes=nodes, min_nodes=min_nodes, node_multiple=2)
    assert "not made of multiples of it" in str(caught.value)
    assert "multiples of 2 nodes" in (caught.value.hint or "")


def test_node_multiple_flag(tmp_path: Path) -> None:
    argv = ["--site", "sandbox", "render", "-N", "2-3", "--node-multiple", "2"]
    result = CliRunner().invoke(cli, [*argv, "--output-dir", str(tmp_path), "--", "t"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "multiples of 2 nodes" in result.output


def _dgx_with(**partition: Any) -> Any:
    """The dgx-h100-ib site with its default partition's fields changed."""
    site = load_site("dgx-h100-ib")
    parts = [
        p.model_copy(update=partition) if p.name == site.default_partition.name else p
        for p in site.partitions
    ]
    return site.model_copy(update={"partitions": parts})


def test_the_partition_gives_an_elastic_job_its_node_multiple() -> None:
    site = _dgx_with(node_multiple=2)
    spec = JobSpec(command=["python3", "train.py"], output_dir="/o", nodes=4, min_nodes=2)
    assert '"node_multiple":2' in render_job(spec, site).script
    # A fixed size has no sizes to choose from: the default does not apply.
    fixed = JobSpec(command=["python3", "train.py"], output_dir="/o", nodes=3)
    assert '"node_multiple":1' in render_job(fixed, site).script
    # The job's own multiple wins; a range that does not fit the default says whose it is.
    odd = JobSpec(command=["python3", "train.py"], output_dir="/o", nodes=3, min_nodes=1)
    assert (
        '"node_multiple":1' in render_job(odd.model_copy(update={"node_multiple": 1}), site).script
    )
    with pytest.raises(BadInputError) as caught:
        render_job(odd, site)
    assert "partition" in str(caught.value) and "--node-multiple 1" in (caught.value.hint or "")


def test_the_partition_gives_a_job_its_spare_nodes() -> None:
    site = _dgx_with(spare_nodes=1)
    spec = JobSpec(command=["python3", "train.py"], output_dir="/o", nodes=2)
    rendered = render_job(spec, site)
    assert "--nodes=3" in rendered.sbatch_args and "--no-kill" in rendered.sbatch_args
    none = render_job(spec.model_copy(update={"spare_nodes": 0}), site)
    assert "--nodes=2" in none.sbatch_args and "--no-kill" not in none.sbatch_args
