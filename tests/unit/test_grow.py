"""Growing back: an elastic run below its full size keeps a grower, a pending job that asks
for more nodes; once the grower holds them it says so, the run checkpoints and hands over.
With a fake Slurm (tests/live/test_spares.py runs the same path on a real one)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hpcjobs.contract import names
from hpcjobs.contract.eventlog import Chain, Event, parse
from hpcjobs.contract.slurmcmd import Result
from hpcjobs.runtime.supervisor import decide, grow
from hpcjobs.runtime.supervisor.policy import Policy
from hpcjobs.runtime.supervisor.state import FINISH
from hpcjobs.runtime.supervisor.successor import successor_args, successor_env
from hpcjobs.runtime.supervisor.supervise import Supervisor
from tests.eventlines import events_in, line
from tests.unit.test_spares import JobSlurm
from tests.unit.test_spares import _supervisor as spare_supervisor


@pytest.mark.parametrize(
    ("run", "full", "spares", "size"),
    [(2, 3, 0, (3, 3)), (1, 3, 0, (2, 3)), (2, 3, 1, (3, 4)), (3, 3, 0, (3, 3))],
)
def test_a_grower_asks_for_any_larger_run(
    run: int, full: int, spares: int, size: tuple[int, int]
) -> None:
    assert decide.grower_size(run, full, spares) == size


def test_a_grower_is_submitted_with_its_own_node_count_and_names_the_run_it_grows() -> None:
    args = ["--nodes=2-3", "--no-kill", "--exclude=n9", "--output=/o/slurm-%j.out"]
    assert successor_args(args, "300", ["n2"], "", "hpcjobs:t", "3") == [
        "--nodes=3", "--no-kill", "--output=/o/slurm-300.out", "--exclude=n2,n9",
        "--comment=hpcjobs:t",
    ]  # fmt: skip
    env = successor_env({"HPCJOBS_GROW_FOR": "1", "SLURM_JOB_ID": "300"}, "300", "", "300")
    assert env == {"HPCJOBS_CHAIN_ROOT": "300", "HPCJOBS_GROW_FOR": "300"}
    assert "HPCJOBS_GROW_FOR" not in successor_env({"HPCJOBS_GROW_FOR": "1"}, "300", "")


def test_the_chain_names_its_growers() -> None:
    chain = Chain(parse(line("300", "grower", grower="310", grower_for="300", size="3")))
    assert chain.grower_for("300") == "310" and chain.grower_ids == ["310"]
    assert chain.names_job("310") and not chain.names_job("311")


# ---- the run below its full size ------------------------------------------------------------


class GrowSlurm(JobSlurm):
    """Job 300 on n1,n3 (n2 failed) of a 3-node partition; sbatch is remembered."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs["300"]["NodeList"] = "n1,n3"
        self.submitted: list[tuple[list[str], dict[str, str]]] = []

    def partition_nodes(self, partition: str) -> int | None:
        return 3

    def submit(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Result:
        self.submitted.append((list(argv), dict(env)))
        return super().submit(argv, cwd, env)


class Child:
    """The launcher, as the grow watch sees it."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)
        self.code = 0  # the program checkpoints and exits

    def kill(self) -> None:  # pragma: no cover - the program exits on the signal
        self.code = -9


def _shrunk(tmp_path: Path, slurm: GrowSlurm) -> Supervisor:
    """Job 300 asked for -N 2-3, lost n2 (excluded), and runs on n1,n3."""
    sup = spare_supervisor(tmp_path, slurm, spare=0)
    sup.ctx.policy = Policy(
        budgets={"node_failure": 3},
        nodes=3,
        min_nodes=2,
        sbatch_args=["--nodes=2-3", "--no-kill"],
    )
    sup.nodes.exclude("node_failure", ["n2"])
    assert sup.nodes.take() and sup.ctx.run_nodes == ["n1", "n3"]
    return sup


def _events(tmp_path: Path, kind: str) -> list[Event]:
    return [e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == kind]


def _watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[GrowSlurm, Supervisor, Child]:
    """A run below its full size, its launcher running, its grower submitted and watched
    (every 10 ms)."""
    monkeypatch.setattr(grow, "POLL_S", 0.01)
    slurm = GrowSlurm()
    sup = _shrunk(tmp_path, slurm)
    child = Child()
    sup.program.child = child  # type: ignore[assignment]
    sup.growth.submit()
    return slurm, sup, child


def _wait(what: Callable[[], object], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not what() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_run_below_its_full_size_makes_way_for_its_grower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm, sup, child = _watched(tmp_path, monkeypatch)
    ((argv, env),) = slurm.submitted
    # Any larger run; n2 no longer excluded, for 3 nodes need all of the partition's 3.
    assert "--nodes=3" in argv and not any(a.startswith("--exclude") for a in argv)
    assert env["HPCJOBS_GROW_FOR"] == "300" and "--dependency" not in " ".join(argv)
    (exclude,) = [e for e in _events(tmp_path, "exclude") if e.cause == "grow"]
    assert (exclude.names("nodes"), exclude.names("released")) == ([], ["n2"])
    (grower_event,) = _events(tmp_path, "grower")
    grower = sup.growth.grower
    assert grower_event.text("grower") == grower and grower_event.text("size") == "3"
    # Pending: the run goes on.
    time.sleep(0.1)
    assert child.signals == [] and not sup.growth.watch.started.is_set()  # type: ignore[union-attr]
    # The grower holds 3 nodes and says so: the run claims the move, and is told to
    # checkpoint and exit.
    slurm.jobs[grower] = {"JobState": "RUNNING"}
    (tmp_path / "run" / names.grow_ready(grower)).mkdir()
    _wait(lambda: sup.state.signal == "warning")
    # Delivered to the program's processes that listen for it (deliver.py), not to the launcher.
    time.sleep(0.1)
    assert child.signals == [] and sup.state.signal == "warning"
    assert (tmp_path / "run" / f".takeover-{grower}").is_dir()
    sup.growth.watch.close()  # type: ignore[union-attr]
    assert sup.growth.hand_over() == "handed"
    (handoff,) = _events(tmp_path, "handoff")
    assert (handoff.cause, handoff.text("next")) == ("grow", grower)
    assert sup.growth.grower == "" and sup.ctx.chain.continued_as(grower)


def test_a_grower_gone_after_the_move_was_claimed_leaves_the_chain_in_the_job(
    tmp_path: Path,
) -> None:
    slurm = GrowSlurm()
    sup = _shrunk(tmp_path, slurm)
    sup.growth.submit()
    grower = sup.growth.grower
    slurm.jobs[grower] = {"JobState": "CANCELLED"}
    assert sup.growth.hand_over() == "again"
    (requeue,) = [e for e in _events(tmp_path, "requeue") if e.cause == "grow"]
    assert requeue.text("how") == "in_job" and sup.ctx.run_nodes == ["n1", "n3"]
    assert not _events(tmp_path, "handoff") and sup.growth.grower == ""


def test_a_grower_that_gave_up_or_left_the_queue_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grow, "CHECK_EVERY", 1)
    slurm, sup, child = _watched(tmp_path, monkeypatch)
    first = sup.growth.grower
    slurm.jobs[first] = {"JobState": "PENDING"}
    # It gave up (claimed the move) just as it said it was ready: the run goes on.
    (tmp_path / "run" / f".takeover-{first}").mkdir()
    (tmp_path / "run" / names.grow_ready(first)).mkdir()
    _wait(lambda: sup.growth.grower not in ("", first))
    second = sup.growth.grower
    assert second not in ("", first) and child.signals == []
    # The next one is cancelled while it waits in the queue: a third.
    slurm.jobs[second] = {"JobState": "CANCELLED"}
    _wait(lambda: sup.growth.grower not in ("", second))
    assert len(slurm.submitted) == 3 and child.signals == []
    sup.growth.close_watch(FINISH)  # a run that ends gets no new grower


# ---- growing in place (job expansion) -----------------------------------------------------


class InPlaceSlurm(GrowSlurm):
    """As :class:`GrowSlurm`, on a site that permits job expansion: salloc is a stand-in that
    says it waits, and is granted once ``grant`` exists; the merge writes the resize script."""

    def __init__(self, grant: Path) -> None:
        super().__init__()
        self.grant = grant
        self.allocated: list[list[str]] = []
        self.joined: list[tuple[str, str]] = []

    def config(self) -> str:
        return "SchedulerParameters     = bf_continue,permit_job_expansion\n"

    def allocate(
        self, argv: Sequence[str], cwd: str, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        self.allocated.append(list(argv))
        script = (
            "import os, sys, time\n"
            "sys.stderr.write('salloc: Pending job allocation 400\\n'); sys.stderr.flush()\n"
            f"while not os.path.exists({str(self.grant)!r}): time.sleep(0.01)\n"
            "sys.stderr.write('salloc: Granted job allocation 400\\n')\n"
        )
        return subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def join(self, helper: str, job: str, folder: str) -> bool:
        self.joined.append((helper, job))
        self.jobs[job]["NodeList"] = "n1,n3,n4"
        Path(folder, f"slurm_job_{job}_resize.sh").write_text(
            'export SLURM_JOB_NODELIST="n[1,3-4]"\nexport SLURM_JOB_CPUS_PER_NODE="8(x3)"\n'
        )
        return True

    def partition_hosts(self, partition: str) -> list[str]:
        return ["n1", "n2", "n3", "n4"]


def test_a_job_that_may_grow_in_place_asks_only_for_the_missing_node_and_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grow, "POLL_S", 0.01)
    slurm = InPlaceSlurm(tmp_path / "granted")
    sup = _shrunk(tmp_path, slurm)
    child = Child()
    sup.program.child = child  # type: ignore[assignment]
    sup.growth.submit()
    # One node, to join job 300; not on the job's own nodes; no sbatch.
    ((argv),) = slurm.allocated
    assert argv[:4] == ["--no-shell", "--dependency=expand:300", "--nodes=1", "--time=60"]
    assert argv[-1] == "--exclude=n1,n3" and not slurm.submitted
    (grower,) = _events(tmp_path, "grower")
    assert (grower.text("grower"), grower.text("size"), grower.data["joins"]) == ("400", "1", True)
    time.sleep(0.1)
    assert sup.state.signal == ""  # it waits: the run goes on
    (tmp_path / "granted").touch()
    _wait(lambda: sup.state.signal == "warning")
    assert sup.state.signal == "warning"
    sup.growth.watch.close()  # type: ignore[union-attr]
    slurm.jobs["400"] = {"JobState": "RUNNING", "NodeList": "n4"}
    # The program checkpointed and exited: n4 joins, and the chain runs again in the job.
    assert sup.growth.hand_over() == "again"
    assert slurm.joined == [("400", "300")] and "cancel 400" in slurm.calls
    (requeue,) = [e for e in _events(tmp_path, "requeue") if e.cause == "grow"]
    assert requeue.text("how") == "in_job" and requeue.names("joined") == ["n4"]
    assert sup.ctx.run_nodes == ["n1", "n3", "n4"]
    assert sup.ctx.env["SLURM_JOB_NUM_NODES"] == "3"
    assert sup.ctx.env["SLURM_JOB_CPUS_PER_NODE"] == "8(x3)"
    assert not _events(tmp_path, "handoff") and sup.growth.grower == ""


def test_a_gpu_job_moves_even_where_expansion_is_permitted(tmp_path: Path) -> None:
    slurm = InPlaceSlurm(tmp_path / "granted")
    slurm.jobs["300"]["TRES"] = "cpu=2,node=2,gres/gpu=2"
    sup = _shrunk(tmp_path, slurm)
    sup.growth.submit()
    assert not slurm.allocated and len(slurm.submitted) == 1
    (grower,) = _events(tmp_path, "grower")
    assert grower.data["joins"] is False and grower.text("size") == "3"
    assert "holds GPUs" in sup.growth.expansion_refused()
    sup.growth.drop()


def test_a_node_ordered_before_the_batch_host_never_joins(tmp_path: Path) -> None:
    """Slurm takes a job's first node for its batch host: the batch host (n3 here) must stay
    first, so the helper leaves out n1 and n2, and a node Slurm still merged ahead of it leaves
    the job again at once."""
    slurm = InPlaceSlurm(tmp_path / "granted")
    sup = _shrunk(tmp_path, slurm)
    sup.ctx.batch = "n3"
    assert sup.nodes.ahead_of_batch_host() == ["n1", "n2"]
    slurm.jobs["300"]["NodeList"] = "n3,n4"
    sup.ctx.allocation = ["n3", "n4"]
    slurm.join = lambda helper, job, folder: True  # type: ignore[method-assign]
    slurm.jobs["300"]["NodeList"] = "n2,n3,n4"  # Slurm merged n2, ahead of n3
    assert sup.nodes.join("400") == []
    assert slurm.shrunk[-1] == ["n3", "n4"]


# ---- the grower ---------------------------------------------------------------------------


def _grower(tmp_path: Path, slurm: GrowSlurm, nodes: str) -> Supervisor:
    """Job 310, the grower of job 300 (which runs on n1,n3), started on ``nodes``."""
    slurm.jobs["310"] = {"JobState": "RUNNING", "NodeList": nodes}
    sup = spare_supervisor(tmp_path, slurm, spare=0)
    sup.ctx.policy = Policy(budgets={"node_failure": 3}, nodes=3, min_nodes=2)
    sup.ctx.job = sup.ctx.self_id = "310"
    sup.ctx.batch = "n4"
    sup.ctx.grow_for = "300"
    sup.ctx.env.update(SLURM_JOB_ID="310", SLURM_JOB_NODELIST=nodes)
    log = tmp_path / "run" / "chain-300.jsonl"
    log.write_text(
        log.read_text()
        + line("300", "start", checkpoint=19, nodelist="n1,n3", batch="n1", held=2, full=3)
        + line("300", "grower", grower="310", grower_for="300", size="3")
    )
    assert sup.nodes.take()
    return sup


def test_a_grower_waits_for_the_handoff(tmp_path: Path) -> None:
    slurm = GrowSlurm()
    sup = _grower(tmp_path, slurm, "n[4-6]")
    marker = tmp_path / "run" / names.grow_ready("310")
    log = tmp_path / "run" / "chain-300.jsonl"

    def hand_over(now: float) -> None:
        if marker.is_dir() and now > 1005:
            log.write_text(log.read_text() + line("300", "handoff", "grow", next="310"))

    sup.ctx.clock.on_sleep = hand_over  # type: ignore[attr-defined]
    slurm.jobs["300"] = {"JobState": "RUNNING"}
    sup.growth.wait_for_handover()
    assert not marker.exists() and sup.ctx.chain.continued_as("310")


def test_a_grower_no_larger_than_the_run_does_not_take_over(tmp_path: Path) -> None:
    slurm = GrowSlurm()
    sup = _grower(tmp_path, slurm, "n4,n5")
    assert sup.growth.wait_for_handover() == 0
    assert not (tmp_path / "run" / names.grow_ready("310")).exists()


def test_a_grower_whose_run_ended_otherwise_does_not_run(tmp_path: Path) -> None:
    slurm = GrowSlurm()
    sup = _grower(tmp_path, slurm, "n[4-6]")
    slurm.jobs["300"] = {"JobState": "TIMEOUT"}
    assert sup.growth.wait_for_handover() == 0
    # It claimed the move: the run it grew can no longer make way for it.
    assert (tmp_path / "run" / ".takeover-310").is_dir()


def test_a_grower_slurm_requeued_before_it_took_over_does_not_run(tmp_path: Path) -> None:
    slurm = GrowSlurm()
    sup = _grower(tmp_path, slurm, "n[4-6]")
    sup.ctx.restart = 1
    assert sup.growth.wait_for_handover() == 0


def test_a_grower_that_fails_before_it_took_over_does_not_end_the_chain(tmp_path: Path) -> None:
    slurm = GrowSlurm()
    sup = _grower(tmp_path, slurm, "n[4-6]")
    assert sup.crashed(RuntimeError("boom")) == 1
    assert sup.ctx.chain.final is None


def test_a_run_being_cancelled_does_not_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm, sup, child = _watched(tmp_path, monkeypatch)
    grower = sup.growth.grower
    sup.state.signal = "term"  # scancel's SIGTERM reached the supervisor
    (tmp_path / "run" / names.grow_ready(grower)).mkdir()
    time.sleep(0.2)
    assert child.signals == [] and not (tmp_path / "run" / f".takeover-{grower}").exists()
    assert sup.growth.grower == grower and len(slurm.submitted) == 1  # no replacement either
    sup.growth.watch.close()  # type: ignore[union-attr]


def test_a_grower_gone_with_too_little_time_left_continues_the_chain_elsewhere(
    tmp_path: Path,
) -> None:
    slurm = GrowSlurm()
    sup = _shrunk(tmp_path, slurm)
    sup.growth.submit()
    grower = sup.growth.grower
    slurm.time_left = "2:00"
    assert sup.growth.hand_over() == "handed"
    (requeue,) = [e for e in _events(tmp_path, "requeue") if e.cause == "grow"]
    assert requeue.text("how") == "continued" and requeue.text("next") not in ("", grower)


def test_history_and_report_count_a_growth_as_an_interruption() -> None:
    from hpcjobs.cli.history import _stops_by_run
    from hpcjobs.jobs.chain import Chain as SubmitChain
    from hpcjobs.jobs.chain import ChainRef

    text = (
        line("300", "start", at=1.0, checkpoint=-1, nodelist="n1,n3", batch="n1", held=2, full=3)
        + line("300", "grower", at=2.0, grower="310", grower_for="300", size="3")
        + line("300", "handoff", "grow", "continued as job 310", at=10.0, next="310",
               nodes=[], checkpoint=66, progress=67)
        + line("310", "start", at=11.5, checkpoint=66, nodelist="n1,n2,n3", batch="n1")
    )  # fmt: skip
    chain = SubmitChain(parse(text))
    (stop,) = chain.interruptions()
    assert (stop.cause, stop.job_id, stop.resumed_job_id) == ("grow", "300", "310")
    assert (stop.resumed_from, stop.steps_lost, stop.resume_latency) == (66, 1, 1.5)
    ref = ChainRef(root="300", output_dir="/o", chain=chain)
    assert _stops_by_run(ref)[("300", 0)] == "grow (continued as job 310)"
