"""The requeue policy, checked on one table against both implementations: Python's
tests/unit/requeue_reference.py and the job's supervisor (:mod:`hpcjobs.runtime.supervisor`),
which decides on the batch host how a run ended and what becomes of its chain."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpcjobs.config.models import MaxRequeues
from hpcjobs.contract.slurmtime import parse_duration
from hpcjobs.runtime.supervisor.policy import Policy, parse
from hpcjobs.runtime.supervisor.supervise import Supervisor
from tests.eventlines import events_in, kinds, line
from tests.unit.requeue_reference import Action, Budget, Cause, classify, decide

SMALL_BUDGET = Budget(preemption=2, timeout=1, node_failure=1, application=0)


@dataclass(frozen=True)
class Case:
    name: str
    cause: Cause
    exit_code: int
    action: Action
    counts: dict[Cause, int] = field(default_factory=dict)
    done: bool = False
    budget: Budget = SMALL_BUDGET


CASES = [
    Case("completed", Cause.NONE, 0, Action.FINISH),
    Case("preempted", Cause.PREEMPTION, 0, Action.REQUEUE),
    Case("preempted nonzero exit", Cause.PREEMPTION, 143, Action.REQUEUE),
    Case("preempted budget left", Cause.PREEMPTION, 0, Action.REQUEUE, {Cause.PREEMPTION: 1}),
    Case("preempted budget gone", Cause.PREEMPTION, 0, Action.FAIL, {Cause.PREEMPTION: 2}),
    Case("timeout", Cause.TIMEOUT, 0, Action.REQUEUE),
    Case("timeout budget gone", Cause.TIMEOUT, 0, Action.FAIL, {Cause.TIMEOUT: 1}),
    Case("app failure not requeued", Cause.APPLICATION, 3, Action.FAIL),
    Case("app failure opt-in", Cause.APPLICATION, 3, Action.REQUEUE, budget=Budget(application=1)),
    Case("done during grace", Cause.PREEMPTION, 0, Action.FINISH, done=True),
    Case("cancelled", Cause.CANCELLED, 143, Action.FAIL),
    Case(
        "total budget",
        Cause.PREEMPTION,
        0,
        Action.FAIL,
        {Cause.TIMEOUT: 1, Cause.PREEMPTION: 1},
        budget=Budget(preemption=5, timeout=5, total=2),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_python_decide(case: Case) -> None:
    decision = decide(
        case.cause,
        exit_code=case.exit_code,
        done=case.done,
        counts=case.counts,
        budget=case.budget,
    )
    assert decision.action is case.action
    if case.action is Action.FAIL:
        assert decision.exit_code != 0
    if case.action is Action.FINISH:
        assert decision.exit_code == 0


def test_python_decide_slurm_requeued_is_never_finished() -> None:
    decision = decide(
        Cause.NODE_FAILURE,
        exit_code=0,
        done=False,
        counts={},
        budget=Budget(),
        slurm_requeued=True,
    )
    assert decision.action is Action.REQUEUE
    assert decision.reason == "requeued by Slurm"


@pytest.mark.parametrize(
    ("exit_code", "signal", "preempted", "timed_out", "cause"),
    [
        (0, "warning", True, False, Cause.PREEMPTION),
        (0, "warning", False, True, Cause.TIMEOUT),
        (0, "warning", False, False, Cause.PREEMPTION),
        (143, "term", False, False, Cause.CANCELLED),
        (0, None, False, False, Cause.NONE),
        (2, None, False, False, Cause.APPLICATION),
    ],
)
def test_classify(
    exit_code: int, signal: str | None, preempted: bool, timed_out: bool, cause: Cause
) -> None:
    got = classify(exit_code=exit_code, signal=signal, preempted=preempted, timed_out=timed_out)
    assert got is cause


# ---- the supervisor, with stand-ins for scontrol, squeue, sbatch and friends ---------------------

STUBS = {
    "scontrol": """#!/bin/bash
echo "scontrol $*" >> "$STUB_LOG"
if [[ $1 == show ]]; then
  state=${STUB_JOB_STATE:-RUNNING}
  [[ -n ${STUB_STATE_FILE:-} && -f $STUB_STATE_FILE ]] && state=$(cat "$STUB_STATE_FILE")
  echo "JobId=$SLURM_JOB_ID JobState=$state Restarts=${STUB_RESTARTS:-${SLURM_RESTART_COUNT:-0}}"
  echo "   PreemptTime=${STUB_PREEMPT_TIME:-None}"
  if [[ -n ${STUB_STDOUT:-} ]]; then
    echo "   StdErr=${STUB_STDERR:-}"
    echo "   StdOut=$STUB_STDOUT"
  fi
fi
exit 0
""",
    "sacct": """#!/bin/bash
printf '%s\\n' ${STUB_SACCT_RUNS:-}
""",
    "squeue": """#!/bin/bash
if [[ " $* " == *" %k "* ]]; then echo "${STUB_COMMENT:-(null)}"; exit 0; fi
echo "${STUB_TIME_LEFT:-UNLIMITED}"
""",
    "sbatch": """#!/bin/bash
echo "sbatch $*" >> "$STUB_LOG"
# A cancel that arrives while sbatch runs.
[[ -n ${STUB_STATE_AFTER_SBATCH:-} ]] && echo "$STUB_STATE_AFTER_SBATCH" > "$STUB_STATE_FILE"
echo "4242;sandbox"
""",
    "scancel": """#!/bin/bash
echo "scancel $*" >> "$STUB_LOG"
""",
    "sinfo": """#!/bin/bash
printf '%s\\n' ${STUB_SINFO:-}
""",
}

#: The batch script, as the supervisor is told (``--script "$0"``): continuations submit it.
SCRIPT = "job.sbatch"


def _stub_bin(tmp_path: Path) -> Path:
    """A folder with the stand-ins for scontrol, squeue, sbatch, sacct, scancel and sinfo."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return bindir


def _job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a run of job 300, the stand-ins first on its PATH (a real Slurm on
    this machine is never asked)."""
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "ckpt").mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "SLURM_JOB_ID": "300",
        "HPCJOBS_JOB_OUTPUT_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
        "TMPDIR": str(tmp_path),  # the node-local folders
        "XDG_STATE_HOME": str(tmp_path / "state"),  # the user's suspects file
        **extra,
    }


def _policy(**fields: object) -> Policy:
    """A job's policy; a rendered script always sets the budgets: here the site config's
    defaults."""
    fields.setdefault("budgets", MaxRequeues().model_dump())
    return Policy(**fields)  # type: ignore[arg-type]


def _supervisor(env: dict[str, str], policy: Policy | None = None, **fields: object) -> Supervisor:
    """The supervisor of one run, in this process (its own copy of ``env``)."""
    return Supervisor(policy or _policy(**fields), SCRIPT, ["true"], env=dict(env))


def _begin(sup: Supervisor) -> int | None:
    """What the start of a run decides: None when the program starts, else the job's exit
    code (the chain does not run the program in this job)."""
    try:
        return sup.start.begin()
    finally:
        sup.agents.stop()  # no program follows here


def _calls(tmp_path: Path) -> str:
    """What the stand-ins were asked, one line per call."""
    log = tmp_path / "calls.log"
    return log.read_text() if log.exists() else ""


def script_policy(script: str) -> Policy:
    """The policy a rendered script hands its supervisor (the shell variable hpcjobs_policy)."""
    (line,) = [ln for ln in script.split("\n") if ln.startswith("hpcjobs_policy=")]
    (text,) = shlex.split(line.removeprefix("hpcjobs_policy="))
    return parse(text)


@pytest.fixture
def utc() -> Iterator[None]:
    """Slurm's local times read as UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def _finish_case(
    tmp_path: Path, case: Case, *, signal: str, preempt: bool, time_left: str
) -> tuple[int, list[list[str]], str]:
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    ckpt = run_dir / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    if case.done:
        (ckpt / "DONE").write_text("{}")
    chain = run_dir / "chain-100.jsonl"
    lines = []
    for cause, count in case.counts.items():
        lines += [line("100", "requeue", cause.value, "continued", how="continued")] * count
    chain.write_text("".join(lines))
    b = case.budget
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "STUB_PREEMPT_TIME": "2026-01-01T00:00:00" if preempt else "None",
        "STUB_TIME_LEFT": time_left,
        "SLURM_JOB_ID": "100",
        "HPCJOBS_JOB_OUTPUT_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(ckpt),
    }
    policy = Policy(
        lead=60,
        budgets={
            "preemption": b.preemption,
            "timeout": b.timeout,
            "node_failure": b.node_failure,
            "application": b.application,
        },
        max_total=b.total,
        sbatch_args=[
            "--job-name=x",
            "--array=0-9",
            "-d",
            "afterok:1",
            "--nodes=2",
            "--output=/o/slurm-%j.out",
        ],
    )
    sup = _supervisor(env, policy)
    sup.state.signal = signal
    sup.state.term_sent = bool(signal)  # the signal reached the program (delivered, or passed on)
    code = sup.finish(case.exit_code)
    events = [
        [str(e.time), e.job_id, str(e.restart), e.event, e.cause, e.detail]
        for e in events_in(chain)
    ]
    return code, events, _calls(tmp_path)


def _observations(cause: Cause) -> tuple[str, bool, str]:
    """How each cause looks to the supervisor: (signal, PreemptTime set, time left)."""
    return {
        Cause.NONE: ("", False, "10:00"),
        Cause.APPLICATION: ("", False, "10:00"),
        Cause.PREEMPTION: ("warning", True, "0:15"),
        Cause.TIMEOUT: ("warning", False, "1:30"),
        Cause.CANCELLED: ("term", False, "10:00"),
    }[cause]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_supervisor_matches_table(tmp_path: Path, case: Case) -> None:
    signal, preempt, left = _observations(case.cause)
    code, events, calls = _finish_case(
        tmp_path, case, signal=signal, preempt=preempt, time_left=left
    )
    last = events[-1]
    if case.action is Action.REQUEUE:
        assert code == 0
        assert last[3:5] == ["requeue", case.cause.value]
        assert "continued as job 4242" in last[5]
        # The continuation depends on this job, keeps the options, drops the old dependency
        # and the array range, and this job is told not to be requeued by Slurm as well.
        assert "--dependency=afterany:100" in calls
        assert "--job-name=x" in calls and "--nodes=2" in calls
        assert "afterok:1" not in calls and "--array=0-9" not in calls
        assert "Requeue=0" in calls
        # Every run of the chain appends to the first run's log.
        assert "--output=/o/slurm-100.out" in calls
    elif case.action is Action.FINISH:
        assert code == 0
        assert last[3:5] == ["end", "finish"]
        assert "sbatch" not in calls
    else:
        assert code != 0
        assert last[3:5] == ["end", "fail"]
        assert "sbatch" not in calls


def test_begin_counts_slurm_requeue_as_node_failure(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = _job_env(tmp_path, SLURM_JOB_ID="7", SLURM_RESTART_COUNT="1")
    run_dir = tmp_path / "run"
    (run_dir / "chain-7.jsonl").write_text(line("7", "start", checkpoint=-1))
    policy = _policy(budgets={**MaxRequeues().model_dump(), "node_failure": 1})
    sup = _supervisor(env, policy)
    assert _begin(sup) is None, capfd.readouterr().err
    assert sup.ctx.env["HPCJOBS_RESTART_COUNT"] == "1"
    assert kinds(run_dir / "chain-7.jsonl")[1] == ("requeue", "node_failure")
    # A second node failure exceeds the budget of 1: the job gives up at once.
    env["SLURM_RESTART_COUNT"] = "2"
    capfd.readouterr()
    assert _begin(_supervisor(env, policy)) == 1
    assert "budget for node_failure exhausted" in capfd.readouterr().err


def test_cancelled_job_is_not_marked_done(tmp_path: Path) -> None:
    """scancel: the program exits 0 on SIGTERM before the supervisor hears of it."""
    case = Case("cancel seen only by the steps", Cause.NONE, 0, Action.FAIL)
    env = _job_env(tmp_path, SLURM_JOB_ID="100", STUB_JOB_STATE="CANCELLED")
    run_dir = tmp_path / "run"
    assert _supervisor(env).finish(case.exit_code) != 0
    assert not (run_dir / "DONE-100").exists()
    assert kinds(run_dir / "chain-100.jsonl")[-1] == ("end", "fail")
    assert events_in(run_dir / "chain-100.jsonl")[-1].detail == "cancelled"


@pytest.mark.parametrize(("restart", "marked"), [("0", False), ("1", True)])
def test_chain_end_after_a_slurm_requeue_is_not_requeued_again(
    tmp_path: Path, restart: str, marked: bool
) -> None:
    """Slurm 24.11 requeues the run after its own requeue of a preempted job once more when it
    exits: a chain that ends in such a run marks it Requeue=0. First runs make no extra call."""
    env = _job_env(
        tmp_path, SLURM_JOB_ID="100", SLURM_RESTART_COUNT=restart, HPCJOBS_CHAIN_ROOT="100"
    )
    run_dir = tmp_path / "run"
    for code, end in ((0, ("finish", "completed")), (3, ("fail", "application"))):
        (tmp_path / "calls.log").write_text("")
        _supervisor(env).finish(code)
        last = events_in(run_dir / "chain-100.jsonl")[-1]
        assert (last.event, last.cause, last.detail[: len(end[1])]) == ("end", *end)
        calls = _calls(tmp_path)
        assert ("scontrol update jobid=100 Requeue=0" in calls) is marked, calls
        (run_dir / "DONE-100").unlink(missing_ok=True)


def test_begin_exits_when_done(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    env = _job_env(tmp_path, SLURM_JOB_ID="8")
    (tmp_path / "run" / "ckpt" / "DONE").write_text("{}")
    assert _begin(_supervisor(env)) == 0
    out, err = capfd.readouterr()
    assert "hpcjobs: run" not in out
    assert "already finished" in err


def test_time_left_is_read_with_slurms_one_duration_parser() -> None:
    got = [parse_duration(t) for t in ("1-02:03:04", "02:03:04", "3:04", "0:59")]
    assert got == [93784, 7384, 184, 59]
    assert parse_duration("UNLIMITED") is None


# ---- requeues Slurm did by itself (node failure, grace time over) -------------------------------


def test_finish_after_slurm_already_requeued_is_not_done(tmp_path: Path) -> None:
    """A node failed: Slurm requeued the job while the program on the healthy node exited 0.
    The run must not count as finished, and no continuation may be submitted."""
    env = _job_env(tmp_path, STUB_RESTARTS="1", STUB_SACCT_RUNS="NODE_FAIL|2026-01-01T00:00:00")
    assert _supervisor(env).finish(0) == 0
    (event,) = events_in(tmp_path / "run" / "chain-300.jsonl")
    assert (event.event, event.cause, event.detail) == (
        "requeue",
        "node_failure",
        "requeued by Slurm (restart 1)",
    )
    assert (event.text("how"), event.stopped_run) == ("slurm", 0)
    assert not (tmp_path / "run" / "DONE-300").exists()
    assert "sbatch" not in _calls(tmp_path)


def test_begin_after_unlogged_requeue_asks_accounting(tmp_path: Path, utc: None) -> None:
    """The first run died without a word; accounting says it was preempted (grace time over)."""
    env = _job_env(
        tmp_path,
        SLURM_RESTART_COUNT="1",
        STUB_SACCT_RUNS="PREEMPTED|2026-01-01T00:00:10 RUNNING|Unknown",
    )
    (tmp_path / "run" / "chain-300.jsonl").write_text(line("300", "start", checkpoint=-1))
    assert _begin(_supervisor(env)) is None
    event = events_in(tmp_path / "run" / "chain-300.jsonl")[1]
    assert (event.event, event.cause) == ("requeue", "preemption")
    assert event.time == 1767225610  # dated at the lost run's end
    assert event.text("slurm_state") == "PREEMPTED"


def test_begin_never_runs_a_chain_twice(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Slurm requeued a job whose chain had already continued as another job: exit at once."""
    env = _job_env(tmp_path, SLURM_RESTART_COUNT="1")
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "start", checkpoint=-1)
        + line("300", "requeue", "preemption", "continued as job 301", how="continued", next="301")
    )
    assert _begin(_supervisor(env)) == 0
    assert "already continues as job 301" in capfd.readouterr().err


def test_begin_enforces_total_budget_on_slurm_requeues(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = _job_env(
        tmp_path,
        SLURM_RESTART_COUNT="1",
        STUB_SACCT_RUNS="NODE_FAIL|2026-01-01T00:00:00",
        HPCJOBS_CHAIN_ROOT="299",
    )
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("299", "start", checkpoint=-1)
        + line("299", "requeue", "timeout", "continued as job 300", how="continued", next="300")
        + line("300", "start", checkpoint=1)
    )
    assert _begin(_supervisor(env, max_total=1)) == 1
    assert "total requeue budget exhausted (1/1); giving up" in capfd.readouterr().err
    last = events_in(tmp_path / "run" / "chain-300.jsonl")[-1]
    assert (last.event, last.cause, last.detail) == (
        "end",
        "fail",
        "requeue budget exhausted: 1/1 requeues in total",
    )


def test_begin_sets_aside_a_log_left_by_an_earlier_job_with_the_same_id(tmp_path: Path) -> None:
    """Job ids repeat when a cluster's counter is reset: an old chain must not pass for ours."""
    env = _job_env(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "chain-300.jsonl").write_text(line("300", "end", "finish", "completed"))
    (run_dir / "DONE-300").write_text("")
    assert _begin(_supervisor(env)) is None
    assert [kind for kind, _ in kinds(run_dir / "chain-300.jsonl")] == ["start"]
    assert list(run_dir.glob("chain-300.jsonl.stale-*"))
    assert not (run_dir / "DONE-300").exists()


def test_continuation_drops_one_shot_options_and_keeps_the_chain_token(tmp_path: Path) -> None:
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import Where, parse_spec
    from hpcjobs.script.render import render_job

    spec = parse_spec(
        {
            "command": ["true"],
            "output_dir": str(tmp_path / "out"),
            "sbatch_options": ["--hold", "--begin=now+1hour", "--comment=mine", "--exclusive"],
        }
    )
    script = render_job(spec, load_site("sandbox"), where=Where(cwd=tmp_path)).script
    assert "#SBATCH --exclusive\n" in script
    assert "#SBATCH --hold" not in script and "#SBATCH --begin" not in script
    policy = script_policy(script)
    args = policy.sbatch_args
    assert "--exclusive" in args and "--hold" not in args
    assert not any(a.startswith("--begin") for a in args)
    env = _job_env(tmp_path, STUB_COMMENT="hpcjobs:0123abcd my sweep")
    _supervisor(env, policy).continuation.continue_chain("preemption")
    (call,) = [ln for ln in _calls(tmp_path).splitlines() if ln.startswith("sbatch")]
    words = call.split(" ")
    assert "--exclusive" in words and "--comment=mine" not in words
    assert words.count("--dependency=afterany:300") == 1
    assert call.split("--comment=")[1].startswith("hpcjobs:0123abcd my sweep ")


def test_event_log_done_marker_and_job_logs_are_private(tmp_path: Path) -> None:
    env = _job_env(tmp_path, HPCJOBS_CHAIN_ROOT="300")
    run_dir = Path(env["HPCJOBS_JOB_OUTPUT_DIR"])
    out, err = run_dir / "slurm-300.out", run_dir / "slurm-300.err"
    for path in (out, err):
        path.write_text("log\n")
        path.chmod(0o644)
    bindir = Path(env["PATH"].split(":")[0])
    (bindir / "scontrol").write_text(
        "#!/bin/bash\n"
        f'echo "JobId=300 JobName=x StdOut={tmp_path}/decoy"\n'
        f'echo "   StdErr={err}"\n'
        'echo "   StdIn=/dev/null"\n'
        f'echo "   StdOut={out}"\n'
    )
    decoy = tmp_path / "decoy"
    decoy.write_text("")
    decoy.chmod(0o644)
    sup = _supervisor(env)
    old = os.umask(0o022)
    try:
        sup.start.private_logs()
        sup.ctx.event("start", "-", "x")
        sup.continuation.mark_done()
    finally:
        os.umask(old)
    assert out.stat().st_mode & 0o777 == 0o600 and err.stat().st_mode & 0o777 == 0o600
    assert decoy.stat().st_mode & 0o777 == 0o644  # a job name cannot point it elsewhere
    assert (run_dir / "chain-300.jsonl").stat().st_mode & 0o777 == 0o600
    assert (run_dir / "DONE-300").stat().st_mode & 0o777 == 0o600


def test_the_reference_speaks_the_one_vocabulary_of_causes() -> None:
    """The independent reference model above names causes as the supervisor does (it leaves
    out infrastructure and stall, which tests/unit/test_decide.py and test_faults.py cover)."""
    from hpcjobs.contract.causes import CANCELLED, CAUSES, FINISHED

    assert {c.value for c in Cause} <= {*CAUSES, FINISHED, CANCELLED}
