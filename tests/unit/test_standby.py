"""The standby, the takeover and the hand-off, with a fake Slurm and a fake clock: every wait of
the supervisor for Slurm is exercised in full without a second passing (the live tests in
tests/live/test_faults.py and test_cancel.py run the same paths on a real Slurm)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hpcjobs.contract.eventlog import Event
from hpcjobs.contract.slurmcmd import Result
from hpcjobs.jobs.chain import Chain
from hpcjobs.runtime.supervisor.policy import Policy
from hpcjobs.runtime.supervisor.program import TERM_WAIT_S
from hpcjobs.runtime.supervisor.state import RUN
from hpcjobs.runtime.supervisor.supervise import Supervisor
from tests.eventlines import events_in, kinds, line
from tests.unit.test_windup import launcher_ignoring


class FakeClock:
    """A clock that only moves when the supervisor sleeps; ``on_sleep`` may change the world."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept = 0.0
        self.on_sleep: Callable[[float], None] = lambda now: None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        self.on_sleep(self.now)


class FakeSlurm:
    """What the supervisor asks Slurm in these paths, answered from plain attributes."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, str]] = {}  #: job -> scontrol show job fields
        self.accounting: dict[str, str] = {}  #: job -> final state in sacct
        self.nodes: dict[str, str] = {}  #: node -> sinfo state
        self.calls: list[str] = []
        self.next_id = 77

    def show_job(self, job: str) -> str:
        fields = self.jobs.get(job)
        return " ".join(f"{k}={v}" for k, v in fields.items()) if fields else ""

    def acct_state(self, job: str) -> str:
        return self.accounting.get(job, "")

    def acct_last(self, job: str) -> tuple[str, str, str]:
        return self.accounting.get(job, ""), "", ""

    def hostnames(self, hostlist: str) -> list[str]:
        if hostlist in ("", "(null)"):
            return []
        if "[" not in hostlist:
            return hostlist.split(",")
        prefix, span = hostlist.rstrip("]").split("[")
        low, high = span.split("-")
        return [f"{prefix}{i}" for i in range(int(low), int(high) + 1)]

    def node_states(self, nodes: str) -> list[tuple[str, str]]:
        return [(n, self.nodes.get(n, "idle")) for n in self.hostnames(nodes)]

    def partition_nodes(self, partition: str) -> int | None:
        return 8

    def queue_value(self, job: str, fmt: str, steps: bool = False) -> list[str]:
        return ["hpcjobs:token"] if fmt == "%k" else [self.jobs.get(job, {}).get("JobState", "")]

    def cancel(self, job: str, signal_name: str = "") -> bool:
        self.calls.append(f"cancel {job}")
        return True

    def update(self, job: str, setting: str) -> bool:
        self.calls.append(f"update {job} {setting}")
        return True

    def submit(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Result:
        self.calls.append("sbatch " + " ".join(argv[:1]))
        self.next_id += 1
        return Result(0, f"{self.next_id}\n", "")

    def config(self) -> str:
        """``scontrol show config``: no job expansion unless a test says so."""
        return "SchedulerParameters     = (null)\n"

    def partition_hosts(self, partition: str) -> list[str]:
        return self.hostnames("n[1-3]")


def _supervisor(
    tmp_path: Path, slurm: FakeSlurm, clock: FakeClock, job: str = "301", **env: str
) -> Supervisor:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    environ = {
        "SLURM_JOB_ID": job,
        "HPCJOBS_JOB_OUTPUT_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "HPCJOBS_CHAIN_ROOT": "300",
        "SLURM_JOB_PARTITION": "batch",
        "SLURM_JOB_NUM_NODES": "2",
        **env,
    }
    sup = Supervisor(
        Policy(budgets={"node_failure": 3, "infrastructure": 3, "stall": 3}, max_total=9),
        "/o/job.sh",
        ["true"],
        slurm=slurm,  # type: ignore[arg-type]
        env=environ,
        clock=clock,
        sleep=clock.sleep,
    )
    sup.ctx.root = "300"
    return sup


def _standby_of_300(tmp_path: Path, slurm: FakeSlurm, clock: FakeClock) -> Supervisor:
    """Job 301, the standby job 300's run submitted, released by Slurm."""
    (tmp_path / "run").mkdir(exist_ok=True)
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "start", checkpoint=-1, nodelist="n[1-2]", batch="n1")
        + line("300", "standby", standby="301", standby_for="300")
    )
    return _supervisor(tmp_path, slurm, clock, HPCJOBS_STANDBY_FOR="300")


def _log(tmp_path: Path) -> list[Event]:
    return events_in(tmp_path / "run" / "chain-300.jsonl")


def test_the_standby_waits_for_the_final_state_then_takes_over(tmp_path: Path) -> None:
    """Slurm released the standby while its run still shows COMPLETING; 3 s later the run is
    NODE_FAIL: the standby logs the fault on the dead batch host, excludes it, takes over."""
    slurm, clock = FakeSlurm(), FakeClock()
    slurm.jobs["300"] = {
        "JobState": "COMPLETING",
        "EndTime": "2026-01-01T00:00:00",
        "NodeList": "n[1-2]",
        "BatchHost": "n1",
    }
    slurm.nodes["n1"] = "down*"

    def later(now: float) -> None:
        if now >= 1003.0:
            slurm.jobs["300"]["JobState"] = "NODE_FAIL"

    clock.on_sleep = later
    sup = _standby_of_300(tmp_path, slurm, clock)
    sup.standby.take_over()
    assert clock.slept == pytest.approx(3.0)
    fault, exclude, requeue = _log(tmp_path)[2:]
    assert (fault.event, fault.cause, fault.text("node"), fault.stopped_job) == (
        "fault",
        "node_failure",
        "n1",
        "300",
    )
    assert exclude.names("nodes") == ["n1"]
    assert (requeue.text("how"), requeue.text("next"), requeue.stopped_job) == (
        "took_over",
        "301",
        "300",
    )
    assert requeue.text("slurm_state") == "NODE_FAIL"
    chain = Chain(_log(tmp_path))
    assert chain.job_ids == ["300", "301"] and chain.excluded() == ["n1"]


def test_without_a_final_state_the_standby_takes_over_after_the_whole_wait(tmp_path: Path) -> None:
    slurm, clock = FakeSlurm(), FakeClock()
    slurm.jobs["300"] = {"JobState": "COMPLETING", "NodeList": "n[1-2]", "BatchHost": "n1"}
    sup = _standby_of_300(tmp_path, slurm, clock)
    sup.standby.take_over()
    assert clock.slept == pytest.approx(60.0)  # HPCJOBS_FINAL_STATE_WAIT's default
    requeue = _log(tmp_path)[-1]
    assert (requeue.cause, requeue.detail) == (
        "infrastructure",
        "standby job 301 took over from job 300 (?)",
    )


@pytest.mark.parametrize("state", ["CANCELLED", "COMPLETING"])
def test_the_standby_of_a_cancelled_run_ends_the_chain(tmp_path: Path, state: str) -> None:
    """Cancelled, or COMPLETING in the controller and CANCELLED in accounting: never run."""
    slurm, clock = FakeSlurm(), FakeClock()
    slurm.jobs["300"] = {"JobState": state, "NodeList": "n[1-2]", "BatchHost": "n1"}
    slurm.accounting["300"] = "CANCELLED"
    sup = _standby_of_300(tmp_path, slurm, clock)
    assert sup.standby.take_over() == 0
    final = Chain(_log(tmp_path)).final
    assert final is not None
    assert (final.cause, final.detail) == ("fail", "cancelled: job 300 was cancelled")


def test_the_standby_waits_while_its_run_logs_how_it_ended(tmp_path: Path) -> None:
    """The run lived on and claimed the takeover: the standby waits (fake seconds) until the
    run has logged that the chain continues as the standby, and logs nothing itself."""
    slurm, clock = FakeSlurm(), FakeClock()
    sup = _standby_of_300(tmp_path, slurm, clock)
    (tmp_path / "run" / ".takeover-301").mkdir()

    def run_logs(now: float) -> None:
        if now >= 1002.0 and not Chain(_log(tmp_path)).continued_as("301"):
            with (tmp_path / "run" / "chain-300.jsonl").open("a") as handle:
                handle.write(line("300", "requeue", "timeout", how="continued", next="301"))

    clock.on_sleep = run_logs
    sup.standby.take_over()
    assert clock.slept == pytest.approx(2.0)
    assert [e.event for e in _log(tmp_path)] == ["start", "standby", "requeue"]
    assert slurm.calls == []


def test_a_run_that_ended_retargets_its_standby(tmp_path: Path) -> None:
    """A run that lives to decide makes its standby the continuation: without the excluded
    nodes, afterany this job, and Slurm does not requeue the job as well."""
    slurm, clock = FakeSlurm(), FakeClock()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "exclude", "stall", nodes=["n2"], released=[], limit=4)
    )
    sup = _supervisor(tmp_path, slurm, clock, job="300")
    sup.standby.job = "301"
    sup.continuation.continue_chain("stall")
    assert slurm.calls == [
        "update 301 ExcNodeList=n2",
        "update 301 Dependency=afterany:300",
        "update 300 Requeue=0",
    ]
    requeue = _log(tmp_path)[-1]
    assert (requeue.text("how"), requeue.text("next"), requeue.detail) == (
        "continued",
        "301",
        "continued as job 301 (the standby)",
    )


def test_a_run_on_an_excluded_node_hands_over_at_once(tmp_path: Path) -> None:
    slurm, clock = FakeSlurm(), FakeClock()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "exclude", "stall", nodes=["n2"], released=[], limit=4)
    )
    sup = _supervisor(tmp_path, slurm, clock, SLURM_JOB_NODELIST="n[2-3]")
    assert sup.nodes.handoff_if_excluded()
    handoff = _log(tmp_path)[-1]
    assert (handoff.event, handoff.text("next"), handoff.names("nodes")) == (
        "handoff",
        "78",
        ["n2"],
    )
    assert Chain(_log(tmp_path)).job_ids == ["300", "301", "78"]


def test_the_decision_does_not_wait_for_slurm_to_reach_the_agents(tmp_path: Path) -> None:
    """The agents are asked to end as soon as the step ends, from a thread: a slow controller
    (after a node failure, say) must not hold the decision, only the job's last moment."""
    answer = threading.Event()
    agent = subprocess.Popen(["sleep", "60"])

    class SlowSlurm(FakeSlurm):
        def queue_value(self, job: str, fmt: str, steps: bool = False) -> list[str]:
            if steps:
                answer.wait(20)
                return ["300.1 hpcjobs-agent", "300.0 python3"]
            return super().queue_value(job, fmt, steps)

        def cancel(self, job: str, signal_name: str = "") -> bool:
            agent.terminate()
            return super().cancel(f"{job} {signal_name}")

    slurm, clock = SlowSlurm(), FakeClock()
    sup = _supervisor(tmp_path, slurm, clock, job="300")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "DONE").touch()
    sup.agents.process, sup.agents.in_step = agent, True
    finished = threading.Thread(target=sup.finish, args=(0,))
    try:
        finished.start()
        deadline = time.monotonic() + 20
        log = tmp_path / "run" / "chain-300.jsonl"
        ended = ("end", "finish")
        while not (log.exists() and ended in kinds(log)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [e.cause for e in _log(tmp_path) if e.event == "end"] == ["finish"]
        assert finished.is_alive() and agent.poll() is None  # it waits for the agents last
        answer.set()
        finished.join(timeout=20)
        assert not finished.is_alive() and agent.poll() is not None
        assert slurm.calls == ["cancel 300.1 HUP"]
    finally:
        answer.set()
        agent.kill()


def test_the_decision_does_not_wait_for_a_launcher_still_ending_after_sigterm(
    tmp_path: Path,
) -> None:
    """Slurm kills the job KillWait after its SIGTERM; a step of many nodes can take longer to
    end. The supervisor stops waiting TERM_WAIT_S after the SIGTERM, so its decision is logged."""
    sup = _supervisor(tmp_path, FakeSlurm(), FakeClock())
    sup.program.child = launcher_ignoring(tmp_path, "TERM")
    try:
        sup.state.term_at = time.monotonic() - TERM_WAIT_S + 0.5
        started = time.monotonic()
        assert sup.program.wait() == 143
        assert time.monotonic() - started < 2.5 and sup.program.child.poll() is None
        # Without a SIGTERM, the wait is the launcher's.
        sup.state.term_at = 0.0
        sup.program.child.kill()
        assert sup.program.wait() == 137
    finally:
        sup.program.child.kill()


def test_a_site_that_warns_with_sigterm_keeps_its_whole_lead(tmp_path: Path) -> None:
    """Where the warning signal is TERM, a SIGTERM is the warning: the program gets its lead
    time to checkpoint, and the supervisor waits for it."""
    sup = _supervisor(tmp_path, FakeSlurm(), FakeClock())
    sup.ctx.policy = Policy(signal="TERM")
    sup.on_signal(signal.SIGTERM, None)
    assert sup.state.term_at == 0.0 and sup.state.signal == "warning"
    plain = _supervisor(tmp_path, FakeSlurm(), FakeClock())
    plain.on_signal(signal.SIGTERM, None)
    assert plain.state.term_at > 0 and plain.state.signal == "term"


class _StderrInUse:
    """Standard error while the main thread is inside its ``write``: Python runs a signal
    handler right there, and its buffered writer refuses a second write from it."""

    def __init__(self, handler: Callable[[], None]) -> None:
        self.handler = handler
        self.inside = False

    def write(self, text: str) -> int:
        if self.inside:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")
        self.inside = True
        try:
            self.handler()  # the signal arrives mid-write
        finally:
            self.inside = False
        return len(text)

    def flush(self) -> None:
        pass


def test_a_signal_in_the_middle_of_a_log_line_does_not_end_supervision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A cancel's SIGTERM that came while the supervisor was writing a line to standard error
    made the handler's own line fail ("reentrant call"), and the supervisor logged its own
    error instead of the cancel. The handler only records the signal; the main thread logs it
    and forwards it."""
    sup = _supervisor(tmp_path, FakeSlurm(), FakeClock())
    sup.program.child = subprocess.Popen(["sleep", "30"])
    sup.state.phase = RUN
    try:
        monkeypatch.setattr("sys.stderr", _StderrInUse(lambda: sup.on_signal(signal.SIGTERM, None)))
        sup.ctx.log("standby job 301 for job 300")  # the main thread's line
        sys.stderr.write("a line of the main thread\n")
        monkeypatch.undo()
        sup.program.act_on_signals()
        assert sup.program.child.wait(timeout=10) == -signal.SIGTERM
    finally:
        sup.program.child.kill()
    assert "SIGTERM received, forwarding it to the launcher" in capfd.readouterr().err
    assert [e.detail for e in sup.ctx.chain.events if e.event == "signal"] == ["SIGTERM"]


def test_the_job_ends_only_with_its_launcher(tmp_path: Path) -> None:
    """After an early decision the supervisor still waits for the launcher: the job (and the
    dependency of its successor) ends with it."""
    sup = _supervisor(tmp_path, FakeSlurm(), FakeClock())
    sup.program.child = subprocess.Popen(["sleep", "1"])
    started = time.monotonic()
    sup.program.launcher_ended()
    assert sup.program.child.poll() == 0 and time.monotonic() - started >= 0.5
