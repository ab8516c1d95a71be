"""The node agent and the stall watch that reads its summaries (hpcjobs.runtime.supervisor)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcjobs.report.progressfiles import read_progress
from hpcjobs.runner import LocalRunner
from hpcjobs.runtime.supervisor import agent as agent_module
from hpcjobs.runtime.supervisor.agent import (
    Agent,
    interval,
    local_dir,
    read_summary,
    split_history,
)
from hpcjobs.runtime.supervisor.stall import StallWatch
from hpcjobs.runtime.supervisor.windup import StepControl
from tests.unit.test_windup import launcher_ignoring


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    return "n7"


def _report(folder: Path, rank: int, step: int, log: str = "") -> None:
    (folder / f"rank-{rank}").write_text(f"{step}\n")
    if log:
        with (folder / f"rank-{rank}.log").open("a") as handle:
            handle.write(log)


def test_a_cycle_writes_the_summary_and_one_history_line_per_new_step(
    tmp_path: Path, node: str
) -> None:
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    agent = Agent(str(local), str(shared), every=1.0)
    _report(local, 0, 5)
    _report(local, 1, 5, log="1700000000.000 5\n1700000001.000 save 2.500\n")
    agent.cycle()
    summary = read_summary((shared / "node-n7").read_text(), time.time())
    assert (summary.node, summary.job) == ("n7", "42")
    assert summary.ranks.keys() == {0, 1} and summary.ranks[0][0] == 5
    history = sorted(
        line.split()[:3:2] for line in (shared / "node-n7.log").read_text().splitlines()
    )
    # Rank 1's own log, line by line; rank 0 keeps none: its newest step.
    assert history == [["0", "5"], ["1", "5"], ["1", "save"]]
    agent.cycle()  # nothing new: nothing appended
    assert len((shared / "node-n7.log").read_text().splitlines()) == 3
    _report(local, 0, 6)
    _report(local, 0, 7)  # two steps between cycles: only the newest is kept
    _report(local, 1, 6, log="1700000002.000 6\n")
    agent.cycle()
    last = [line.split() for line in (shared / "node-n7.log").read_text().splitlines()[-2:]]
    assert [(w[0], w[2]) for w in last] == [("1", "6"), ("0", "7")] and last[1][3] == "n7"
    # hpcjobs report reads the history as each rank's own log.
    ranks = split_history((shared / "node-n7.log").read_text())
    assert set(ranks) == {0, 1}


def test_report_reads_node_histories_and_old_rank_logs(tmp_path: Path) -> None:
    folder = tmp_path / "progress-9"
    folder.mkdir()
    (folder / "node-n1.log").write_text("0 100.0 1 n1\n0 105.0 2 n1\n1 101.0 save 3.0\n")
    (folder / "rank-3.log").write_text("99.0 1 n2\n")  # a chain started by an earlier hpcjobs
    progress = read_progress(LocalRunner(), str(tmp_path), "9")
    assert [r.step for r in progress[0]] == [1, 2]
    assert progress[1][0].save_s == 3.0
    assert progress[3][0].host == "n2"


def test_a_step_is_dated_by_its_report_not_by_the_agents_cycle(tmp_path: Path, node: str) -> None:
    """Agents on different nodes cycle out of phase: ranks stopped at the same moment must
    still look tied to the stall watch."""
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    _report(local, 2, 9)
    stamp = time.time() - 30
    os.utime(local / "rank-2", (stamp, stamp))
    Agent(str(local), str(shared), every=1.0, since=stamp - 5).cycle()
    idle = read_summary((shared / "node-n7").read_text(), time.time()).ranks[2][1]
    assert 29 < idle < 40


def test_reports_left_by_an_earlier_run_do_not_count(tmp_path: Path, node: str) -> None:
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    _report(local, 0, 3)
    old = time.time() - 3600
    os.utime(local / "rank-0", (old, old))
    Agent(str(local), str(shared), every=1.0).cycle()
    assert read_summary((shared / "node-n7").read_text(), time.time()).ranks == {}


def test_the_history_is_thinned_past_its_limit(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_module, "LOG_LIMIT", 2000)
    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    agent = Agent(str(local), str(shared), every=1.0)
    for step in range(200):
        _report(local, 0, step)
        agent.cycle()
    lines = (shared / "node-n7.log").read_text().splitlines()
    assert len(lines) < 200 and lines[-1].split()[2] == "199"
    assert (shared / "node-n7.log").stat().st_size <= 2000 + 100


@pytest.mark.parametrize("ending", [signal.SIGHUP, signal.SIGTERM])
def test_the_agent_ends_on_sighup_or_sigterm_and_removes_its_folder(
    tmp_path: Path, ending: signal.Signals
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    base = tmp_path / "tmp"
    env = {
        **os.environ,
        "HPCJOBS_NODE_TMP": str(base),
        "SLURMD_NODENAME": "n3",
        "SLURM_JOB_ID": "8",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    argv = [sys.executable, "-m", "hpcjobs.runtime.supervisor", "agent", "--shared", str(shared)]
    proc = subprocess.Popen([*argv, "--every", "0.2"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not (base / "n3").is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        (base / "n3" / "rank-4").write_text("11\n")
        time.sleep(0.6)
        # The warning signal reaches every process of the job: the agent keeps going while
        # the ranks checkpoint. The supervisor's SIGHUP, or Slurm's SIGTERM, ends it at once.
        proc.send_signal(signal.SIGUSR2)
        time.sleep(0.5)
        assert proc.poll() is None
    finally:
        proc.send_signal(ending)
        assert proc.wait(timeout=20) == 0
    assert not base.exists()
    assert read_summary((shared / "node-n3").read_text(), time.time()).ranks[4][0] == 11


def test_local_dir_and_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCJOBS_NODE_TMP", "/tmp/hpcjobs-5")
    assert local_dir("n2") == "/tmp/hpcjobs-5/n2"
    assert [interval(t) for t in (0, 2, 8, 20, 1800)] == [5.0, 1.0, 2.0, 5.0, 5.0]


def test_summary_age_adds_to_the_idle_time() -> None:
    summary = read_summary("100.0 n1 7\n0 4 1.5\n1 x 2\nbad\n", now=103.0)
    assert summary.age == 3.0 and summary.ranks == {0: (4, 4.5)}
    assert read_summary("", now=1.0).age == float("inf")


def _summary(folder: Path, node: str, job: str, ranks: dict[int, tuple[int, float]]) -> None:
    lines = [f"{time.time():.3f} {node} {job}"] + [f"{r} {s} {i}" for r, (s, i) in ranks.items()]
    (folder / f"node-{node}").write_text("\n".join(lines) + "\n")


def test_the_stall_watch_blames_the_node_of_the_stalled_rank(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    logged: list[str] = []
    killed: list[bool] = []
    # Rank 3 on n2 has been at step 9 for 30 s; rank 0 on n1 advances; another job's summary
    # and a stale one are not judged.
    _summary(tmp_path, "n1", "5", {0: (40, 0.0)})
    _summary(tmp_path, "n2", "5", {3: (9, 30.0)})
    _summary(tmp_path, "n9", "6", {7: (1, 500.0)})
    step = StepControl(child, "USR2", 0, logged.append, lambda: killed.append(True))
    watch = StallWatch(step, str(tmp_path), "5", 10, 0.1)
    watch.start()
    try:
        deadline = time.monotonic() + 20
        while watch.found is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.found is not None
        node, stall = watch.found
        assert (node, stall.rank, stall.step, stall.tied) == ("n2", 3, 9, 0)
        assert child.wait(timeout=20) != 0  # the warning signal ended it
        assert "stall: rank 3 has been at step 9" in logged[0] and "(node n2)" in logged[0]
    finally:
        watch.close()
        child.kill()


def test_ranks_tied_at_the_same_step_blame_no_node(tmp_path: Path) -> None:
    child = subprocess.Popen(["sleep", "60"])
    _summary(tmp_path, "n1", "5", {0: (9, 30.0)})
    _summary(tmp_path, "n2", "5", {1: (9, 30.5)})
    step = StepControl(child, "USR2", 0, lambda _: None, lambda: None)
    watch = StallWatch(step, str(tmp_path), "5", 10, 0.1)
    watch.start()
    try:
        deadline = time.monotonic() + 20
        while watch.found is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.found is not None and watch.found[0] == "" and watch.found[1].tied == 1
    finally:
        watch.close()
        child.kill()


def test_the_watch_looks_again_when_a_rank_would_pass_the_timeout(tmp_path: Path) -> None:
    """A rank 9.5 s into a 10 s timeout is judged just after its 10 s, not a whole cycle later;
    otherwise the watch reads once per cycle."""
    child = subprocess.Popen(["sleep", "60"])
    step = StepControl(child, "USR2", 0, lambda _: None, lambda: None)
    watch = StallWatch(step, str(tmp_path), "5", 10, 5.0)
    try:
        wait = watch._next_wait
        assert wait({0: 4, 1: 3}, {0: 100.0, 1: 90.5}, 100.0) == pytest.approx(0.55)
        assert wait({0: 4}, {0: 100.0}, 100.0) == 5.0  # nothing due within a cycle
        assert wait({0: 4}, {0: 80.0}, 100.0) == 5.0  # past due and not stalled: a cycle
        assert wait({}, {}, 100.0) == 5.0
        # The rank judged is the lowest step's, not the oldest report's (find_stall).
        assert wait({0: 4, 1: 3}, {0: 90.5, 1: 99.0}, 100.0) == 5.0
        _summary(tmp_path, "n2", "5", {3: (9, 3.0)})
        started = time.monotonic()
        watch.start()
        deadline = started + 20
        while watch.found is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.found is not None and watch.found[1].rank == 3
        # Its first look (one 5 s cycle) saw 8 s of 10; the next came 2 s later, not 5.
        assert time.monotonic() - started < 8.5
    finally:
        watch.close()
        child.kill()


def test_closing_the_watch_ends_its_grace_and_kill_waits_at_once(tmp_path: Path) -> None:
    """The decision waits for the watch (close): once the step is gone, neither the grace time
    nor the wait after killing the steps may hold it."""
    child_ignores = launcher_ignoring(tmp_path)  # the warning must find it ignoring it
    _summary(tmp_path, "n2", "5", {3: (9, 30.0)})
    killed: list[bool] = []
    step = StepControl(child_ignores, "USR2", 30, lambda _: None, lambda: killed.append(True))
    watch = StallWatch(step, str(tmp_path), "5", 10, 0.1)
    try:
        watch.start()
        deadline = time.monotonic() + 20
        while watch.found is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watch.found is not None
        started = time.monotonic()
        watch.close()  # 30 s of grace left
        assert time.monotonic() - started < 2 and not killed
        assert child_ignores.poll() is None  # the watch's close, not the step's end, ended it
    finally:
        watch.close()
        child_ignores.kill()


def _agent_process(tmp_path: Path, shared: Path) -> tuple[dict[str, str], list[str]]:
    """The environment and command of a node agent on node n3 of job 8."""
    env = {
        **os.environ,
        "HPCJOBS_NODE_TMP": str(tmp_path / "tmp"),
        "SLURMD_NODENAME": "n3",
        "SLURM_JOB_ID": "8",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    argv = [sys.executable, "-m", "hpcjobs.runtime.supervisor", "agent", "--shared", str(shared)]
    return env, argv


def test_the_supervisor_stops_an_agent_that_was_not_ready_for_its_signal(tmp_path: Path) -> None:
    """A job that inherited SIGHUP ignored (nohup) loses a SIGHUP sent before the agent set its
    handler: the supervisor sends it again until the agent is gone, and never waits it out."""
    from hpcjobs.runtime.supervisor.nodeagents import AGENTS_STOP_S
    from hpcjobs.runtime.supervisor.policy import Policy
    from hpcjobs.runtime.supervisor.supervise import Supervisor

    shared = tmp_path / "shared"
    shared.mkdir()
    env, argv = _agent_process(tmp_path, shared)
    proc = subprocess.Popen(
        [*argv, "--every", "5"],
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    sup = Supervisor(Policy(), "/o/job.sh", ["true"], env={"SLURM_JOB_ID": "8"})
    sup.agents.process, sup.agents.in_step = proc, False
    started = time.monotonic()
    sup.agents.stop()  # at once: the agent has not set its handler yet
    assert proc.poll() == 0  # it ended through its handler, not killed
    assert time.monotonic() - started < AGENTS_STOP_S
    assert (shared / "node-n3").exists()


def test_an_agent_ends_at_once_on_its_signal_mid_cycle(tmp_path: Path) -> None:
    """SIGTERM (or SIGHUP) ends an agent's wait between cycles at once, not at its next
    cycle: the job, and the run that continues the chain, wait for it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    env, argv = _agent_process(tmp_path, shared)
    proc = subprocess.Popen([*argv, "--every", "30"], env=env)
    try:
        deadline = time.monotonic() + 20
        while not (shared / "node-n3").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # its first cycle is written: it now waits 30 s
        first = (shared / "node-n3").read_text()
        time.sleep(0.3)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert time.monotonic() - started < 2  # 30 s before
        assert (shared / "node-n3").read_text() != first  # it wrote once more
        assert not (tmp_path / "tmp" / "n3").exists()
    finally:
        proc.kill()


def test_gpu_samples_keep_their_own_interval_within_a_longer_cycle(tmp_path: Path) -> None:
    """monitoring.gpu_interval holds whatever the agent's cycle (5 s with the default stall
    timeout): a 1 s interval gives a sample a second, not one per cycle."""
    shared, gpus, stub = tmp_path / "shared", tmp_path / "gpu", tmp_path / "bin"
    for folder in (shared, gpus, stub):
        folder.mkdir()
    (stub / "nvidia-smi").write_text("#!/bin/sh\necho 0, 10, 20\n")
    (stub / "nvidia-smi").chmod(0o755)
    env, argv = _agent_process(tmp_path, shared)
    env["PATH"] = f"{stub}:{env['PATH']}"
    argv += ["--every", "30", "--gpu-every", "1", "--gpu-query", "index", "--gpu-dir", str(gpus)]
    proc = subprocess.Popen(argv, env=env)
    try:
        time.sleep(3.5)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        samples = (gpus / "n3.csv").read_text().splitlines()
        assert len(samples) >= 3, samples  # about 0, 1, 2 and 3 s
    finally:
        proc.kill()


def test_a_process_that_listens_late_gets_the_warning_once_it_does(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning came while the program was still starting (its handler not yet in place):
    the agent looks again every RETRY_S, and the process gets it once, when it listens."""
    from hpcjobs.runtime.supervisor import deliver

    local, shared = tmp_path / "local", tmp_path / "shared"
    local.mkdir()
    shared.mkdir()
    go, got = tmp_path / "go", tmp_path / "got"
    late = (
        "import signal, time, pathlib\n"
        f"while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.02)\n"
        f"signal.signal(signal.SIGUSR2, lambda *_: open({str(got)!r}, 'a').write('x'))\n"
        f"pathlib.Path({str(go)!r} + '.ok').touch()\n"
        "time.sleep(30)\n"
    )
    token = f"t{os.getpid()}-late"
    monkeypatch.setenv(deliver.ENV_TOKEN, token)
    program = subprocess.Popen(
        [sys.executable, "-c", late],
        env={**os.environ, deliver.ENV_PROGRAM: token, deliver.ENV_NODE: node},
    )
    agent = Agent(str(local), str(shared), every=1.0, warn=["USR2", "USR1"])
    try:
        time.sleep(0.3)
        agent.warn()  # not listening yet: nothing sent, a retry due
        assert agent.warned == [] and agent.retry_at > 0
        assert (shared / "warned-n7").read_text().startswith("0 1 process(es) listen for none")
        go.touch()
        deadline = time.monotonic() + 10
        while not Path(f"{go}.ok").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        agent.warn()
        agent.warn()  # once is enough: it is not signalled again
        assert agent.warned == [(program.pid, "USR2")] and agent.retry_at == 0
        deadline = time.monotonic() + 10
        while not got.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert got.read_text() == "x"
        assert (shared / "warned-n7").read_text().startswith("1 SIGUSR2 to 1 process(es)")
    finally:
        program.kill()
        program.wait()
