"""Spare nodes: a job holds N+K nodes, runs on N, and after a fault of a node runs again inside
the job on the nodes left, with a fake Slurm (tests/live/test_spares.py runs the same paths on
a real one)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.contract.slurmcmd import Result, Slurm
from hpcjobs.errors import BadInputError
from hpcjobs.runtime.supervisor import decide
from hpcjobs.runtime.supervisor.nodes import STEPS_END_S, resize_settings
from hpcjobs.runtime.supervisor.policy import Policy, dump, parse
from hpcjobs.runtime.supervisor.supervise import Supervisor
from hpcjobs.script.jobspec import JobSpec
from hpcjobs.script.render import render_job
from tests.eventlines import events_in, line
from tests.unit.test_standby import FakeClock, FakeSlurm
from tests.unit.test_standby import _supervisor as standby_supervisor


@pytest.mark.parametrize(
    ("allocation", "batch", "bad", "size", "chosen"),
    [
        (["n1", "n2", "n3"], "n1", [], 2, ["n1", "n2"]),
        (["n1", "n2", "n3"], "n1", ["n2"], 2, ["n1", "n3"]),
        (["n1", "n2", "n3"], "n2", [], 2, ["n2", "n1"]),
        (["n1", "n2", "n3"], "n1", ["n2", "n3"], 2, []),
        (["n1", "n2", "n3"], "n1", ["n1"], 2, []),
        (["n2", "n3"], "n1", [], 1, []),
        (["n1", "n2", "n3"], "n1", [], 3, ["n1", "n2", "n3"]),
    ],
    ids=["first-n", "skip-bad", "batch-first", "too-few", "batch-bad", "batch-gone", "all"],
)
def test_step_nodes(
    allocation: list[str], batch: str, bad: list[str], size: int, chosen: list[str]
) -> None:
    assert decide.step_nodes(allocation, batch, bad, size) == chosen


def test_the_causes_a_job_recovers_from_itself_are_a_nodes_faults_and_stragglers() -> None:
    assert {"node_failure", "infrastructure", "stall", "straggler"} == decide.IN_JOB_CAUSES


def test_the_policy_carries_nodes_and_spares() -> None:
    policy = Policy(nodes=2, spare_nodes=1)
    assert parse(dump(policy)) == policy


def test_resize_settings_are_read_from_slurms_script(tmp_path: Path) -> None:
    script = tmp_path / "slurm_job_7_resize.sh"
    script.write_text(
        'export SLURM_NODELIST="n[1,3]"\nexport SLURM_JOB_NODELIST="n[1,3]"\n'
        'export SLURM_NNODES=2\nexport SLURM_JOB_CPUS_PER_NODE="4(x2)"\n'
        "unset SLURM_TASKS_PER_NODE\nexport PATH=/evil\n"
    )
    assert resize_settings(str(script)) == {
        "SLURM_NODELIST": "n[1,3]",
        "SLURM_JOB_NODELIST": "n[1,3]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_CPUS_PER_NODE": "4(x2)",
        "SLURM_TASKS_PER_NODE": None,
    }
    assert resize_settings(str(tmp_path / "none")) == {}


# ---- the supervisor ---------------------------------------------------------------------------


class JobSlurm(FakeSlurm):
    """A running job 300 on n[1-3], batch host n1; shrinking it writes Slurm's resize script."""

    def __init__(self) -> None:
        super().__init__()
        self.jobs["300"] = {"JobState": "RUNNING", "NodeList": "n[1-3]"}
        self.shrunk: list[list[str]] = []
        self.time_left = "1:00:00"

        #: The job's steps squeue lists (``300.batch``, ``300.4``).
        self.steps: list[str] = []

    def queue_value(self, job: str, fmt: str, steps: bool = False) -> list[str]:
        if steps and fmt == "%i":
            return list(self.steps)
        return [self.time_left] if fmt == "%L" else super().queue_value(job, fmt, steps)

    def shrink(self, job: str, nodes: Sequence[str], folder: str) -> bool:
        self.shrunk.append(list(nodes))
        self.jobs[job]["NodeList"] = ",".join(nodes)
        Path(folder, f"slurm_job_{job}_resize.sh").write_text(
            f'export SLURM_JOB_NODELIST="{",".join(nodes)}"\nunset SLURM_TASKS_PER_NODE\n'
        )
        return True


def _supervisor(tmp_path: Path, slurm: JobSlurm, spare: int = 1) -> Supervisor:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    env = {
        "SLURM_JOB_ID": "300",
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NTASKS": "3",
        "SLURM_TASKS_PER_NODE": "1(x3)",
        "HPCJOBS_JOB_OUTPUT_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "HPCJOBS_CHAIN_ROOT": "300",
        "SLURM_JOB_PARTITION": "batch",
    }
    (run_dir / "chain-300.jsonl").write_text(
        line("300", "start", checkpoint=-1, nodelist="n1,n2", batch="n1")
    )
    clock = FakeClock()
    sup = Supervisor(
        # No stall watch: these runs' steps are stand-ins (tests/unit/test_stragglers.py).
        Policy(
            budgets={"node_failure": 3, "stall": 3}, nodes=2, spare_nodes=spare, straggler_ratio=0
        ),
        "/o/job.sh",
        ["srun", "--nodes=2", "prog"],
        slurm=slurm,  # type: ignore[arg-type]
        env=env,
        clock=clock,
        sleep=clock.sleep,
    )
    sup.ctx.root = "300"
    return sup


def test_a_failed_node_is_replaced_by_the_spare(tmp_path: Path) -> None:
    slurm = JobSlurm()
    sup = _supervisor(tmp_path, slurm)
    assert sup.nodes.take()
    assert (sup.ctx.allocation, sup.ctx.run_nodes, slurm.shrunk) == (
        ["n1", "n2", "n3"],
        ["n1", "n2"],
        [],
    )
    # n2 fails: Slurm took it out of the job (--no-kill), and shows it down.
    slurm.jobs["300"]["NodeList"] = "n1,n3"
    slurm.nodes["n2"] = "down*"
    assert sup.nodes.stays_in_job("node_failure", ["n2"])
    assert (sup.ctx.allocation, sup.ctx.run_nodes, slurm.shrunk) == (["n1", "n3"], ["n1", "n3"], [])
    # The job's settings follow its nodes: the agents start on the two left.
    assert (sup.ctx.env["SLURM_JOB_NODELIST"], sup.ctx.env["SLURM_JOB_NUM_NODES"]) == ("n1,n3", "2")
    (requeue,) = [
        e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "requeue"
    ]
    assert (requeue.cause, requeue.text("how"), requeue.stopped_run) == (
        "node_failure",
        "in_job",
        0,
    )
    assert requeue.detail == "continued in job 300 on n1,n3"
    # Slurm took the failed node out itself: no steps' end to wait for, no shrink.
    assert list(requeue.data["took"]) == ["agents_end", "nodes"]  # type: ignore[arg-type]


def test_a_suspect_still_in_the_job_is_released_from_it(tmp_path: Path) -> None:
    slurm = JobSlurm()
    sup = _supervisor(tmp_path, slurm)
    (tmp_path / "run" / "chain-300.jsonl").open("a").write(
        line("300", "exclude", cause="stall", nodes=["n2"], released=[], limit=8)
    )
    assert sup.nodes.stays_in_job("stall", [])
    assert slurm.shrunk == [["n1", "n3"]]
    assert sup.ctx.run_nodes == ["n1", "n3"]
    # The job's settings follow Slurm's resize script.
    assert (
        sup.ctx.env["SLURM_JOB_NODELIST"] == "n1,n3" and sup.ctx.env["SLURM_JOB_NUM_NODES"] == "2"
    )
    assert "SLURM_TASKS_PER_NODE" not in sup.ctx.env


@pytest.mark.parametrize("ends_after", [3.0, None], ids=["ends", "never-ends"])
def test_nodes_leave_the_job_only_once_its_steps_have_ended(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], ends_after: float | None
) -> None:
    """A step still ending when the job shrank never finished on Slurm 22.05, and the next
    run's step waited for its nodes until the job ended."""
    slurm = JobSlurm()
    sup = _supervisor(tmp_path, slurm)
    clock: FakeClock = sup.ctx.clock  # type: ignore[assignment]
    slurm.steps = ["300.batch", "300.extern", "300.4"]
    started = clock.now

    def on_sleep(now: float) -> None:
        assert slurm.shrunk == []
        if ends_after is not None and now - started >= ends_after:
            slurm.steps = ["300.batch", "300.extern"]

    clock.on_sleep = on_sleep
    (tmp_path / "run" / "chain-300.jsonl").open("a").write(
        line("300", "exclude", cause="stall", nodes=["n2"], released=[], limit=8)
    )
    assert sup.nodes.stays_in_job("stall", [])
    assert slurm.shrunk == [["n1", "n3"]]
    err = capfd.readouterr().err
    assert "waiting for step(s) 300.4 to end before nodes leave" in err
    # What is left of the steps gets a KILL, once (an agent on a node that hangs, say).
    assert [c for c in slurm.calls if c.startswith("cancel")] == ["cancel 300.4"]
    if ends_after is None:
        assert clock.now - started >= STEPS_END_S
        assert f"step(s) 300.4 still listed {STEPS_END_S} s after the run ended" in err
    else:
        assert ends_after <= clock.now - started < ends_after + 1
        assert "still listed" not in err
    # The decision's parts are in the requeue event: here the steps' end took the time.
    (requeue,) = [
        e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "requeue"
    ]
    took = requeue.data["took"]
    assert isinstance(took, dict) and list(took) == ["agents_end", "nodes", "steps_end", "release"]
    assert took["steps_end"] == pytest.approx(clock.now - started, abs=1.0)


def test_slurms_sigterm_ends_the_wait_for_the_steps(tmp_path: Path) -> None:
    """A cancel during the wait: the decision must be logged before KillWait runs out."""
    slurm = JobSlurm()
    sup = _supervisor(tmp_path, slurm)
    slurm.steps = ["300.4"]
    sup.state.term_at = 1.0
    started = sup.ctx.clock()
    sup.nodes.steps_ended()
    assert sup.ctx.clock() == started


@pytest.mark.parametrize(
    "why",
    ["too few nodes", "no spares", "preemption", "not running", "signal", "time limit near"],
)
def test_otherwise_the_chain_continues_in_another_job(tmp_path: Path, why: str) -> None:
    slurm = JobSlurm()
    sup = _supervisor(tmp_path, slurm, spare=0 if why == "no spares" else 1)
    cause = "preemption" if why == "preemption" else "node_failure"
    if why == "too few nodes":
        slurm.jobs["300"]["NodeList"] = "n1,n3"
        slurm.nodes["n3"] = "drained"
    if why == "not running":
        slurm.jobs["300"]["JobState"] = "COMPLETING"
    if why == "signal":
        sup.state.signal = "warning"
    if why == "time limit near":
        slurm.time_left = "6:59"  # the warning (300 s before the end, at most 120 s late) is near
    assert not sup.nodes.stays_in_job(cause, ["n2"])
    assert sup.ctx.run_nodes == [] and slurm.shrunk == []
    assert [
        e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "requeue"
    ] == []


def test_a_run_in_the_job_takes_its_nodes_and_not_the_jobs_task_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[list[str], dict[str, str]]] = []

    class Popen:
        def __init__(self, argv: list[str], env: dict[str, str], **_: Any) -> None:
            started.append((argv, env))

    monkeypatch.setattr(subprocess, "Popen", Popen)
    sup = _supervisor(tmp_path, JobSlurm())
    assert sup.nodes.take()
    sup.program.launch()
    ((argv, env),) = started
    assert argv == ["srun", "--nodelist=n1,n2", "--nodes=2", "prog"]
    assert "SLURM_NTASKS" not in env and sup.ctx.env["SLURM_NTASKS"] == "3"


# ---- submission -------------------------------------------------------------------------------


def _sandbox_render(**fields: Any) -> Any:
    site = load_site("sandbox")
    spec = JobSpec(command=["python3", "train.py"], output_dir="/o", **fields)
    return render_job(spec, site)


def test_spares_add_to_the_allocation_and_keep_the_job_on_a_node_failure() -> None:
    rendered = _sandbox_render(nodes=2, spare_nodes=1)
    assert "--nodes=3" in rendered.sbatch_args and "--no-kill" in rendered.sbatch_args
    assert "srun --nodes=2 " in rendered.script
    policy = rendered.script.split("hpcjobs_policy=", 1)[1].split("\n", 1)[0]
    assert '"nodes":2' in policy and '"spare_nodes":1' in policy


def test_no_spares_no_no_kill() -> None:
    rendered = _sandbox_render(nodes=2)
    assert "--nodes=2" in rendered.sbatch_args and "--no-kill" not in rendered.sbatch_args


def test_spares_must_fit_the_partition() -> None:
    with pytest.raises(BadInputError) as caught:
        _sandbox_render(nodes=3, spare_nodes=1)
    assert "spare node" in str(caught.value) and "--spare-nodes" in (caught.value.hint or "")


# ---- the batch host lost: the deputy ends the job, the standby takes over ---------------------


def test_the_standby_of_a_job_whose_deputy_saw_the_batch_host_go_takes_over(
    tmp_path: Path,
) -> None:
    """Slurm keeps a --no-kill job without its batch host; the deputy logged the fault and
    cancelled the job. The standby takes over as after a node failure, not as after a cancel."""
    slurm = FakeSlurm()
    slurm.jobs["300"] = {"JobState": "CANCELLED", "NodeList": "n2", "BatchHost": "n1"}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "start", checkpoint=-1, nodelist="n1,n2", batch="n1")
        + line("300", "standby", standby="301", standby_for="300")
        + line(
            "300",
            "fault",
            cause="node_failure",
            node="n1",
            stopped_job="300",
            evidence="batch host n1 left job 300; seen by the agent on n2",
            seen_by="n2",
        )
    )
    sup = standby_supervisor(tmp_path, slurm, FakeClock(), HPCJOBS_STANDBY_FOR="300")
    sup.standby.take_over()
    chain = sup.ctx.chain
    assert chain.batch_host_lost("300") == "n1" and chain.batch_host_lost("301") == ""
    assert [e.event for e in chain.events] == ["start", "standby", "fault", "exclude", "requeue"]
    requeue = chain.events[-1]
    assert (requeue.cause, requeue.text("how"), requeue.text("slurm_state")) == (
        "node_failure",
        "took_over",
        "NODE_FAIL",
    )
    assert chain.excluded() == ["n1"]


def test_exclusions_leave_room_for_the_nodes_and_spares_every_later_job_asks_for(
    tmp_path: Path,
) -> None:
    """The job shrank to 2 nodes; a later job still asks for 3 of the partition's 4: at most
    one node may be excluded, not two."""
    slurm = JobSlurm()
    slurm.partition_nodes = lambda partition: 4  # type: ignore[method-assign]
    sup = _supervisor(tmp_path, slurm)
    sup.ctx.env["SLURM_JOB_NUM_NODES"] = "2"
    sup.nodes.exclude("stall", ["n2"])
    sup.nodes.exclude("stall", ["n3"])
    assert sup.ctx.chain.excluded() == ["n3"]


# ---- the pre-flight health check --------------------------------------------------------------


@pytest.mark.parametrize(
    ("out", "failed"),
    [
        ("hpcjobs-preflight n1 0 \nhpcjobs-preflight n2 0 ok\nhpcjobs-preflight n3 0 \n", {}),
        (
            "hpcjobs-preflight n2 3 GPU 3: ECC errors\nhpcjobs-preflight n1 0 \n"
            "hpcjobs-preflight n3 0 \n",
            {"n2": decide.Failed(3, "GPU 3: ECC errors")},
        ),
        # n3 printed nothing (its task never ran); stray lines and other nodes are ignored.
        (
            "hpcjobs-preflight n1 0 \nhpcjobs-preflight n2 0\nsrun: error\n"
            "hpcjobs-preflight n9 1 x\nhpcjobs-preflight n3 x y\n",
            {"n3": decide.Failed(None, "")},
        ),
        ("", {n: decide.Failed(None, "") for n in ("n1", "n2", "n3")}),
    ],
    ids=["all-pass", "one-fails", "one-silent", "none-answers"],
)
def test_preflight_failures(out: str, failed: dict[str, decide.Failed]) -> None:
    assert decide.preflight_failures(out, ["n1", "n2", "n3"]) == failed


def test_a_check_failing_everywhere_blames_no_node() -> None:
    assert decide.preflight_blames(["n2"], ["n1", "n2", "n3"])
    assert not decide.preflight_blames(["n1", "n2", "n3"], ["n1", "n2", "n3"])
    assert not decide.preflight_blames([], ["n1", "n2", "n3"])


class CheckedSlurm(JobSlurm):
    """Job 300 on n[1-3]; the pre-flight check prints what ``answers`` says per node."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__()
        self.answers = answers
        self.argv: list[str] = []

    def run(self, argv: Sequence[str], timeout: float = 20, **_: Any) -> Result:
        self.argv = list(argv)
        out = "".join(f"hpcjobs-preflight {n} {a}\n" for n, a in self.answers.items())
        return Result(0 if out else 1, out, "" if out else "srun: error: Unable to create step")


def _checked(tmp_path: Path, answers: dict[str, str]) -> tuple[Supervisor, CheckedSlurm]:
    slurm = CheckedSlurm(answers)
    sup = _supervisor(tmp_path, slurm)
    sup.ctx.policy = Policy(nodes=2, spare_nodes=1, health_check="nvidia-smi -q", health_timeout=45)
    return sup, slurm


def test_a_node_that_fails_the_preflight_check_leaves_the_job_and_the_spare_runs(
    tmp_path: Path,
) -> None:
    sup, slurm = _checked(tmp_path, {"n1": "0 ", "n2": "1 GPU 1 fell off the bus", "n3": "0 "})
    assert sup.nodes.take(sup.health.preflight())
    assert (sup.ctx.run_nodes, slurm.shrunk) == (["n1", "n3"], [["n1", "n3"]])
    # One srun, one task per node; the site's check is an argument, never part of a script.
    assert slurm.argv[:6] == [
        "srun", "--overlap", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
        "--nodelist=n1,n2,n3",
    ]  # fmt: skip
    assert slurm.argv[-3:] == ["hpcjobs-preflight", "nvidia-smi -q", "45"]
    kinds = [(e.event, e.cause) for e in sup.ctx.chain.events]
    assert kinds == [
        ("start", "-"), ("health", "fail"), ("preflight", "fail"), ("exclude", "infrastructure"),
    ]  # fmt: skip
    health, preflight = sup.ctx.chain.events[1:3]
    assert (health.text("node"), health.number("exit")) == ("n2", 1)
    assert health.text("output") == "GPU 1 fell off the bus"
    assert (preflight.number("checked"), preflight.names("failed")) == (3, ["n2"])
    assert sup.ctx.chain.excluded() == ["n2"]


def test_a_passing_preflight_check_changes_nothing(tmp_path: Path) -> None:
    sup, slurm = _checked(tmp_path, {"n1": "0 ", "n2": "0 ", "n3": "0 "})
    assert sup.nodes.take(sup.health.preflight())
    assert (sup.ctx.run_nodes, slurm.shrunk) == (["n1", "n2"], [])
    (preflight,) = [e for e in sup.ctx.chain.events if e.event == "preflight"]
    assert (preflight.cause, preflight.names("failed")) == ("pass", [])
    assert preflight.detail.startswith("health check passed on all 3 nodes in ")


def test_a_preflight_check_that_cannot_run_blames_no_node(tmp_path: Path) -> None:
    sup, slurm = _checked(tmp_path, {})
    assert sup.health.preflight() == []
    (preflight,) = [e for e in sup.ctx.chain.events if e.event == "preflight"]
    assert preflight.cause == "skip" and "Unable to create step" in preflight.detail
    assert sup.ctx.chain.excluded() == [] and slurm.shrunk == []


def test_no_health_check_no_preflight(tmp_path: Path) -> None:
    slurm = CheckedSlurm({"n2": "1 x"})
    sup = _supervisor(tmp_path, slurm)
    assert sup.health.preflight() == [] and slurm.argv == []


def test_a_failed_batch_host_the_chain_cannot_exclude_is_said(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The partition has no room to exclude it (3 nodes, the job needs 3): the run starts."""
    sup, slurm = _checked(tmp_path, {"n1": "1 bad", "n2": "0 ", "n3": "0 "})
    slurm.partition_nodes = lambda partition: 3  # type: ignore[method-assign]
    failed = sup.health.preflight()
    assert failed == ["n1"] and not sup.nodes.take(failed)
    sup.health.too_few_healthy(failed)
    assert sup.ctx.chain.excluded() == []
    assert "cannot run without n1, and the chain cannot exclude them" in capfd.readouterr().err


def test_accounting_runs_leave_out_the_records_of_earlier_sizes() -> None:
    class Recorded(Slurm):
        def run(self, argv: Sequence[str], timeout: float = 20, **_: Any) -> Result:
            return Result(0, "RESIZING|2026-12-03T06:11:07\nCOMPLETED|2026-12-03T06:11:21\n", "")

    assert Recorded({}).acct_runs("142") == [("COMPLETED", "2026-12-03T06:11:21")]


def test_a_check_that_outlives_its_srun_still_gives_the_other_nodes_answers() -> None:
    result = Slurm({}).run(
        ["bash", "-c", "echo 'hpcjobs-preflight n1 0 '; sleep 5"], timeout=1, retry=False,
        partial=True,
    )  # fmt: skip
    assert result.rc == 124
    assert decide.preflight_failures(result.out, ["n1", "n2"]) == {"n2": decide.Failed(None, "")}
