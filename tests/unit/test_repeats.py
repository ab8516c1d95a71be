"""Faults that repeat, as pure logic: restart storms and the same failure on another node
(:mod:`hpcjobs.runtime.supervisor.decide`), the chain's run ends
(:meth:`hpcjobs.contract.eventlog.Chain.run_ends`), the user's suspects file and its repeat
offenders (:mod:`hpcjobs.contract.suspects`), and what a submission leaves out
(:mod:`hpcjobs.jobs.keptout`). The live tests are tests/live/test_repeats.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hpcjobs.contract import suspects
from hpcjobs.contract.eventlog import Chain, RunEnd, parse
from hpcjobs.jobs.keptout import Exclusion, plan_exclusion, with_exclusion
from hpcjobs.runtime.supervisor.decide import (
    advanced,
    points_at_program,
    same_failure,
    signature,
    storm,
    storm_detail,
    storm_reason,
)
from tests.eventlines import line

NCCL = "gpu017:2291:2374 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion"


def end(cause: str = "infrastructure", ckpt: int | None = 20, step: int | None = 25,
        node: str = "n1", evidence: str = NCCL) -> RunEnd:  # fmt: skip
    return RunEnd(cause, ckpt, step, node, evidence)


# ---- advanced, same failure ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        (end(), end(), False),  # same checkpoint, same step
        (end(), end(ckpt=30, step=25), True),  # a newer checkpoint
        (end(), end(step=26), True),  # a later step
        (end(), end(step=24), False),  # not as far
        (end(step=-1), end(step=-1), None),  # no progress reported
        (end(step=None), end(step=25), None),
        (end(ckpt=None, step=-1), end(ckpt=None, step=-1), None),
        (end(ckpt=-1, step=-1), end(ckpt=10, step=-1), True),  # a first checkpoint
    ],
)
def test_advanced(before: RunEnd, after: RunEnd, moved: bool | None) -> None:
    assert advanced(before, after) is moved


def test_signature_leaves_out_every_number() -> None:
    assert signature("gpu017:2291 rank 3 at 10.0.0.1") == signature("gpu002:77 rank 12 at 10.1.2.3")
    assert signature("rank 1 at step 20 for 9 s") != signature("NCCL WARN")


def test_same_failure_without_progress_needs_the_same_evidence() -> None:
    quiet = end(step=-1)
    assert same_failure(quiet, quiet._replace(node="n2", evidence=NCCL.replace("017", "003")))
    assert not same_failure(quiet, quiet._replace(evidence="Bus error"))
    assert not same_failure(quiet, quiet._replace(evidence=""))
    assert not same_failure(end(), end(cause="stall"))


# ---- storms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ends", "runs", "is_storm"),
    [
        ([end(), end(node="n2"), end()], 3, True),
        ([end(), end()], 3, False),  # only two runs
        ([end(), end(), end()], 0, False),  # the rule is off
        ([end(), end(), end()], 2, True),
        ([end(), end(step=30), end(step=30)], 3, False),  # the second run got further
        ([end(), end(cause="preemption"), end()], 3, False),  # a preemption breaks the series
        ([end("preemption"), end("preemption"), end("preemption")], 3, False),
        ([end("timeout"), end("timeout"), end("timeout")], 3, False),
        ([end("application", node="")] * 3, 3, True),
        ([end("node_failure", evidence="")] * 3, 3, True),
        ([end(ckpt=10, step=15), end(), end(), end()], 3, True),  # the newest three count
        ([end(step=-1), end(step=-1), end(step=-1, evidence="other")], 3, False),
    ],
)
def test_storm(ends: list[RunEnd], runs: int, is_storm: bool) -> None:
    assert storm(ends, runs) is is_storm


def test_storm_detail_and_reason() -> None:
    ends = [end(node="n1"), end(node="n2"), end(node="n1")]
    repeated = storm_detail(ends, 3)
    assert repeated == {
        "cause": "infrastructure",
        "runs": 3,
        "checkpoint": 20,
        "progress": 25,
        "nodes": ["n1", "n2"],
        "evidence": NCCL,
    }
    assert storm_reason(repeated) == (
        "restart storm: 3 runs in a row ended with infrastructure on n1,n2 (at step 25, "
        "checkpoint 20) and none got further"
    )
    quiet = storm_detail([end("application", ckpt=-1, step=-1, node="")] * 2, 2)
    assert storm_reason(quiet) == (
        "restart storm: 2 runs in a row ended with application (no checkpoint) and none got further"
    )


@pytest.mark.parametrize(
    ("before", "after", "program"),
    [
        (end(node="n1"), end(node="n2"), True),
        (end(node="n1"), end(node="n1"), False),  # the same node: it may be the node
        (end(node="n1"), end(node="n2", step=40), False),  # it got further
        (end(node=""), end(node="n2"), False),
        (None, end(), False),
        (end("node_failure"), end("node_failure", node="n2"), False),  # Slurm saw the node go
        (end("stall"), end("stall", node="n2"), True),
    ],
)
def test_the_same_failure_on_another_node_points_at_the_program(
    before: RunEnd | None, after: RunEnd, program: bool
) -> None:
    assert points_at_program(before, after) is program


def test_run_ends_pair_each_requeue_with_its_fault() -> None:
    text = "".join(
        [
            line("1", "start", checkpoint=-1),
            line("1", "fault", "infrastructure", node="n1", evidence=NCCL),
            line("1", "exclude", "infrastructure", nodes=["n1"]),
            line("1", "requeue", "infrastructure", how="continued", checkpoint=20, progress=25),
            line("2", "start", checkpoint=20),
            line("2", "requeue", "preemption", how="continued", checkpoint=30, progress=33),
            line("3", "start", checkpoint=30),
            line("3", "fault", "stall", node="n2", evidence="rank 1 at step 40 for 31 s"),
            line("3", "requeue", "stall", how="in_job", checkpoint=40),
        ]
    )
    ends = Chain(parse(text)).run_ends()
    assert ends == [
        RunEnd("infrastructure", 20, 25, "n1", NCCL),
        RunEnd("preemption", 30, 33, "", ""),
        RunEnd("stall", 40, None, "n2", "rank 1 at step 40 for 31 s"),
    ]


# ---- the suspects file -----------------------------------------------------------------------

DAY = 24 * 3600.0


def blame(node: str, at: float, chain: str = "10", cause: str = "infrastructure") -> suspects.Entry:
    return suspects.Entry(at, suspects.BLAME, node, cause, chain, chain, NCCL)


def test_the_file_is_private_appended_and_read_back(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "hpcjobs" / "suspects.jsonl")
    suspects.append(path, [blame("n1", 100.0)])
    suspects.append(path, [blame("n2", 200.0, chain="11")])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    with open(path, "a") as handle:
        handle.write('{"torn": \n["a list"]\n')
    assert suspects.read(path) == [blame("n1", 100.0), blame("n2", 200.0, chain="11")]
    assert suspects.read(str(tmp_path / "none.jsonl")) == []


def test_default_path_follows_xdg_state_home() -> None:
    assert suspects.default_path({"XDG_STATE_HOME": "/s"}) == "/s/hpcjobs/suspects.jsonl"
    assert suspects.default_path({"HOME": "/h"}) == "/h/.local/state/hpcjobs/suspects.jsonl"


def test_kept_out_counts_only_blames_within_the_ttl() -> None:
    now = 10 * DAY
    old = [blame("n1", now - 2 * DAY), blame("n1", now - 3600)]
    assert suspects.kept_out(old, now) == []
    recent = [blame("n1", now - 7200, chain="10"), blame("n1", now - 3600, chain="11")]
    (kept,) = suspects.kept_out(recent, now)
    assert kept.node == "n1" and [b.chain for b in kept.blames] == ["11", "10"]
    assert kept.until == now - 7200 + DAY
    assert suspects.kept_out(recent, now, faults=3) == []
    assert suspects.kept_out(recent, now, faults=0) == []
    assert suspects.kept_out(recent, now, ttl_s=3000) == []


def test_a_clear_withdraws_the_chains_earlier_blames_only() -> None:
    now = 10 * DAY
    entries = [
        blame("n1", now - 300, chain="10"),
        blame("n1", now - 200, chain="11"),
        suspects.Entry(now - 100, suspects.CLEAR, "n1", "infrastructure", "12", "10", "same"),
    ]
    assert suspects.kept_out(entries, now) == []
    later = [*entries, blame("n1", now - 50, chain="10")]
    (kept,) = suspects.kept_out(later, now)
    assert [b.chain for b in kept.blames] == ["10", "11"]


def test_the_most_blamed_come_first() -> None:
    now = 10 * DAY
    entries = [blame("n2", now - 9), blame("n2", now - 8)] + [
        blame("n1", now - i) for i in range(3)
    ]
    assert [k.node for k in suspects.kept_out(entries, now)] == ["n1", "n2"]


def test_drain_command_is_an_argv() -> None:
    assert suspects.drain_command("n1", "hpcjobs: 2 faults") == [
        "scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=hpcjobs: 2 faults",
    ]  # fmt: skip


# ---- a submission ----------------------------------------------------------------------------


def kept(*nodes: str) -> list[suspects.KeptOut]:
    return [suspects.KeptOut(n, [blame(n, 1.0), blame(n, 2.0)], DAY) for n in nodes]


FULL = "the partition has 3 node(s) and the job needs {}"
NAMED = "the job names its nodes (--nodelist)"


@pytest.mark.parametrize(
    ("offenders", "partition", "needed", "args", "plan"),
    [
        (kept("n2"), ["n1", "n2", "n3"], 2, [], Exclusion(["n2"], [])),
        (kept("n2"), ["n1", "n2", "n3"], 3, [], Exclusion([], ["n2"], FULL.format(3))),
        (kept("n1", "n2"), ["n1", "n2", "n3"], 2, [], Exclusion(["n1"], ["n2"], FULL.format(2))),
        (kept("n9"), ["n1", "n2"], 1, [], Exclusion([], [])),  # not in the partition
        (kept("n2"), [], 1, [], Exclusion(["n2"], [])),  # the partition's nodes unknown
        (kept("n2"), ["n1", "n2", "n3"], 1, ["-w", "n2"], Exclusion([], ["n2"], NAMED)),
        ([], ["n1"], 1, [], Exclusion([], [])),
    ],
)  # fmt: skip
def test_plan_exclusion(
    offenders: list[suspects.KeptOut],
    partition: list[str],
    needed: int,
    args: list[str],
    plan: Exclusion,
) -> None:
    assert plan_exclusion(offenders, partition, needed, args) == plan


def test_with_exclusion_merges_the_users_own() -> None:
    assert with_exclusion(["-N", "2"], ["n2"]) == ["-N", "2", "--exclude=n2"]
    assert with_exclusion(["--exclude=n[5-6]", "-N", "2"], ["n2"]) == [
        "-N", "2", "--exclude=n[5-6],n2",
    ]  # fmt: skip
    assert with_exclusion(["-x", "n5"], []) == ["-x", "n5"]


# ---- hpcjobs suspects ------------------------------------------------------------------------


def test_the_suspects_command_lists_kept_out_nodes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json
    import time

    from click.testing import CliRunner

    from hpcjobs.cli import cli

    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    path = suspects.default_path({"XDG_STATE_HOME": str(state)})
    now = time.time()
    suspects.append(path, [blame("n2", now - 600, "10"), blame("n2", now - 60, "11")])
    suspects.append(path, [blame("n3", now - 30, "11", cause="stall")])

    result = CliRunner().invoke(cli, ["--site", "sandbox", "suspects", "--json", "--all"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["file"] == path and data["rule"] == {"faults": 2, "hours": 24}
    (kept,) = data["kept_out"]
    assert kept["node"] == "n2" and kept["faults"] == 2
    assert kept["until"] == pytest.approx(now - 600 + DAY)
    assert [b["chain"] for b in kept["blames"]] == ["11", "10"]
    assert kept["drain"] == (
        "scontrol update NodeName=n2 State=DRAIN 'Reason=hpcjobs: 2 faults in 24h, last "
        "infrastructure'"
    )
    assert [s["node"] for s in data["suspects"]] == ["n2", "n3"]

    text = CliRunner().invoke(cli, ["--site", "sandbox", "suspects", "--all"]).output
    assert "Kept out:" in text and "n2" in text and "An admin can drain them" in text
    assert "Blamed, not kept out:" in text and "n3" in text

    empty = tmp_path / "empty"
    monkeypatch.setenv("XDG_STATE_HOME", str(empty))
    out = CliRunner().invoke(cli, ["--site", "sandbox", "suspects"]).output
    assert "No node is kept out of your jobs." in out


# ---- the supervisor, with stand-ins for Slurm's commands -------------------------------------


def _chain_so_far(tmp_path: Path, runs: int) -> tuple[dict[str, str], Path]:
    """A job's environment whose chain (root 300) had ``runs`` runs end with the same NCCL
    error at step 25 (checkpoint 19), on n1, n2, n1, ...; the first suspect excluded."""
    from tests.unit.test_requeue import _job_env

    env = _job_env(tmp_path, HPCJOBS_CHAIN_ROOT="300", SLURM_JOB_PARTITION="batch")
    stub = Path(env["PATH"].split(":")[0]) / "scontrol"
    stub.write_text("#!/bin/bash\necho 'PartitionName=batch TotalNodes=3 State=UP'\n")
    log = tmp_path / "run" / "chain-300.jsonl"
    text = []
    for run in range(runs):
        node = f"n{run % 2 + 1}"
        job = str(300 + run)
        text.append(line(job, "start", checkpoint=19 if run else -1))
        text.append(line(job, "fault", "infrastructure", node=node, evidence=NCCL))
        if run == 0:
            text.append(line(job, "exclude", "infrastructure", nodes=[node]))
        text.append(
            line(job, "requeue", "infrastructure", how="continued", checkpoint=19, progress=25)
        )
    log.write_text("".join(text))
    return env, log


def test_the_third_same_failure_ends_the_chain_and_clears_its_nodes(tmp_path: Path) -> None:
    from tests.eventlines import events_in
    from tests.unit.test_requeue import _supervisor

    env, log = _chain_so_far(tmp_path, 2)
    sup = _supervisor(env, budgets={"infrastructure": 10})
    assert sup.repeats.storm_stop(RunEnd("infrastructure", 19, 25, "n1", NCCL), 1) == 1
    final = events_in(log)[-1]
    assert (final.event, final.cause) == ("end", "fail")
    assert final.detail.startswith("restart storm: 3 runs in a row ended with infrastructure")
    assert final.data["repeated"] == {
        "cause": "infrastructure",
        "runs": 3,
        "checkpoint": 19,
        "progress": 25,
        "nodes": ["n1", "n2"],
        "evidence": NCCL,
    }
    assert sup.ctx.chain.excluded() == []  # n1's exclusion lifted
    entries = suspects.read(suspects.default_path(env))
    assert {(e.what, e.node) for e in entries} == {("clear", "n1"), ("clear", "n2")}


def test_no_storm_before_the_third_run_or_after_progress(tmp_path: Path) -> None:
    from tests.unit.test_requeue import _supervisor

    env, _log = _chain_so_far(tmp_path, 1)
    sup = _supervisor(env, budgets={"infrastructure": 10})
    assert sup.repeats.storm_stop(RunEnd("infrastructure", 19, 25, "n2", NCCL), 1) is None
    (tmp_path / "b").mkdir()
    env, _log = _chain_so_far(tmp_path / "b", 2)
    sup = _supervisor(env, budgets={"infrastructure": 10})
    assert sup.repeats.storm_stop(RunEnd("infrastructure", 29, 35, "n1", NCCL), 1) is None
    sup = _supervisor(env, budgets={"infrastructure": 10}, storm_runs=0)
    assert sup.repeats.storm_stop(RunEnd("infrastructure", 19, 25, "n1", NCCL), 1) is None


def test_the_same_failure_on_another_node_blames_neither(tmp_path: Path) -> None:
    from tests.unit.test_requeue import _supervisor

    env, _log = _chain_so_far(tmp_path, 1)
    sup = _supervisor(env, budgets={"infrastructure": 10})
    assert sup.ctx.chain.excluded() == ["n1"]
    assert sup.repeats.blame_suspect(RunEnd("infrastructure", 19, 25, "n2", NCCL)) is False
    assert sup.ctx.chain.excluded() == []
    (cleared,) = suspects.read(suspects.default_path(env))
    assert (cleared.what, cleared.node, cleared.chain) == ("clear", "n1", "300")


def test_a_blamed_node_goes_to_the_suspects_file_and_offenders_stay_out(tmp_path: Path) -> None:
    import time

    from tests.unit.test_requeue import _supervisor

    env, _log = _chain_so_far(tmp_path, 1)
    env["SLURM_JOB_NUM_NODES"] = "1"
    sup = _supervisor(env, budgets={"infrastructure": 10})
    # Not the same failure (it got further): n2 is blamed.
    assert sup.repeats.blame_suspect(RunEnd("infrastructure", 29, 35, "n2", NCCL)) is True
    assert sup.ctx.chain.excluded() == ["n1", "n2"]
    (entry,) = suspects.read(suspects.default_path(env))
    assert (entry.what, entry.node, entry.cause, entry.chain) == (
        "blame",
        "n2",
        "infrastructure",
        "300",
    )
    # Other chains blamed n3 twice: a repeat offender. A continuation leaves it out only
    # while the job still fits: 3 nodes, a 1-node job, n1 and n2 excluded already: it stays in.
    now = time.time()
    suspects.append(suspects.default_path(env), [blame("n3", now - 9, "7"), blame("n3", now, "8")])
    assert sup.repeats.kept_out() == ["n3"]
    assert sup.nodes.later_exclusions() == ["n1", "n2"]
    stub = Path(env["PATH"].split(":")[0]) / "scontrol"
    stub.write_text("#!/bin/bash\necho 'PartitionName=batch TotalNodes=8 State=UP'\n")
    assert sup.nodes.later_exclusions() == ["n1", "n2", "n3"]
