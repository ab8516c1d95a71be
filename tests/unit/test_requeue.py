"""The requeue policy, checked on one table against both implementations: Python's
tests/unit/requeue_reference.py and the bash library every batch script carries."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpcjobs.config.models import MaxRequeues
from hpcjobs.resources import templates_dir
from tests.unit.requeue_reference import Action, Budget, Cause, classify, decide

LIBRARY = templates_dir() / "lib" / "requeue.bash"
FAULTS = templates_dir() / "lib" / "faults.bash"
#: The two libraries every batch script carries, in the script's order.
SOURCE = f"source {LIBRARY}\nsource {FAULTS}"


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


# ---- the bash library, with stand-ins for scontrol, squeue and sbatch ---------------------------

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


def _stub_bin(tmp_path: Path) -> Path:
    """A folder with the stand-ins for scontrol, squeue, sbatch and sacct."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in STUBS.items():
        (bindir / name).write_text(body)
        (bindir / name).chmod(0o755)
    return bindir


def _bash_cause_and_run(
    tmp_path: Path, case: Case, *, signal: str, preempt: bool, time_left: str
) -> tuple[int, list[list[str]], str]:
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    ckpt = run_dir / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    if case.done:
        (ckpt / "DONE").write_text("{}")
    chain = run_dir / "chain-100.tsv"
    lines = []
    for cause, count in case.counts.items():
        lines += [f"1.0\t100\t0\trequeue\t{cause.value}\tcontinued\n"] * count
    chain.write_text("".join(lines))
    b = case.budget
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "STUB_PREEMPT_TIME": "2026-01-01T00:00:00" if preempt else "None",
        "STUB_TIME_LEFT": time_left,
        "SLURM_JOB_ID": "100",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(ckpt),
        "HPCJOBS_SIGNAL_LEAD": "60",
        "HPCJOBS_MAX_REQUEUE_PREEMPTION": str(b.preemption),
        "HPCJOBS_MAX_REQUEUE_TIMEOUT": str(b.timeout),
        "HPCJOBS_MAX_REQUEUE_NODE_FAILURE": str(b.node_failure),
        "HPCJOBS_MAX_REQUEUE_APPLICATION": str(b.application),
        "HPCJOBS_MAX_REQUEUES": "" if b.total is None else str(b.total),
    }
    script = (
        f"{SOURCE}\n"
        "HPCJOBS_SBATCH_ARGS=(--job-name=x --array=0-9 -d afterok:1 --nodes=2 "
        "--output=/o/slurm-%j.out)\n"
        f'hpcjobs_finish {case.exit_code} "{signal}"\n'
    )
    proc = subprocess.run(
        ["bash", "-c", script, "job.sbatch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    events = [line.split("\t") for line in chain.read_text().splitlines()]
    calls = (tmp_path / "calls.log").read_text() if (tmp_path / "calls.log").exists() else ""
    return int(proc.stdout.strip()), events, calls


def _observations(cause: Cause) -> tuple[str, bool, str]:
    """How each cause looks to the batch script: (signal, PreemptTime set, time left)."""
    return {
        Cause.NONE: ("", False, "10:00"),
        Cause.APPLICATION: ("", False, "10:00"),
        Cause.PREEMPTION: ("warning", True, "0:15"),
        Cause.TIMEOUT: ("warning", False, "1:30"),
        Cause.CANCELLED: ("term", False, "10:00"),
    }[cause]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bash_library_matches_table(tmp_path: Path, case: Case) -> None:
    signal, preempt, left = _observations(case.cause)
    code, events, calls = _bash_cause_and_run(
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


def test_bash_begin_counts_slurm_requeue_as_node_failure(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "7",
        "SLURM_RESTART_COUNT": "1",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
        "HPCJOBS_MAX_REQUEUE_NODE_FAILURE": "1",
    }
    script = f"{SOURCE}\nhpcjobs_begin\necho restart=$HPCJOBS_RESTART_COUNT\n"
    run_dir.mkdir()
    (run_dir / "chain-7.tsv").write_text("1.0\t7\t0\tstart\t-\tcheckpoint=-1\n")
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert "restart=1" in proc.stdout
    events = (run_dir / "chain-7.tsv").read_text().splitlines()
    assert events[1].split("\t")[3:5] == ["requeue", "node_failure"]
    # A second node failure exceeds the budget of 1: the job gives up at once.
    env["SLURM_RESTART_COUNT"] = "2"
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 1
    assert "budget for node_failure exhausted" in proc.stderr


def test_bash_cancelled_job_is_not_marked_done(tmp_path: Path) -> None:
    """scancel: the program exits 0 on SIGTERM before the batch shell hears of it."""
    case = Case("cancel seen only by the steps", Cause.NONE, 0, Action.FAIL)
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "ckpt").mkdir(parents=True)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "STUB_JOB_STATE": "CANCELLED",
        "SLURM_JOB_ID": "100",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
    }
    script = f'{SOURCE}\nhpcjobs_finish {case.exit_code} ""\n'
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert int(out) != 0
    assert not (run_dir / "DONE-100").exists()
    assert "end\tfail\tcancelled" in (run_dir / "chain-100.tsv").read_text()


@pytest.mark.parametrize(("restart", "marked"), [("0", False), ("1", True)])
def test_bash_chain_end_after_a_slurm_requeue_is_not_requeued_again(
    tmp_path: Path, restart: str, marked: bool
) -> None:
    """Slurm 24.11 requeues the run after its own requeue of a preempted job once more when it
    exits: a chain that ends in such a run marks it Requeue=0. First runs make no extra call."""
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "ckpt").mkdir(parents=True)
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "SLURM_JOB_ID": "100",
        "SLURM_RESTART_COUNT": restart,
        "HPCJOBS_CHAIN_ROOT": "100",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
    }
    for code, end in (("0", "end\tfinish\tcompleted"), ("3", "end\tfail\tapplication")):
        (tmp_path / "calls.log").write_text("")
        script = f'{SOURCE}\nhpcjobs_finish {code} ""\n'
        subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=True
        )
        assert end in (run_dir / "chain-100.tsv").read_text()
        calls = (tmp_path / "calls.log").read_text()
        assert ("scontrol update jobid=100 Requeue=0" in calls) is marked, calls
        (run_dir / "DONE-100").unlink(missing_ok=True)


def test_bash_begin_exits_when_done(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "ckpt").mkdir(parents=True)
    (run_dir / "ckpt" / "DONE").write_text("{}")
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_JOB_ID": "8",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
    }
    proc = subprocess.run(
        ["bash", "-c", f"{SOURCE}\nhpcjobs_begin\necho RAN"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0
    assert "RAN" not in proc.stdout
    assert "already finished" in proc.stderr


def test_bash_seconds() -> None:
    script = (
        f"{SOURCE}\n"
        'for t in 1-02:03:04 02:03:04 3:04 59 UNLIMITED; do echo "[$(hpcjobs_seconds $t)]"; done'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[93784]", "[7384]", "[184]", "[59]", "[]"]


# ---- requeues Slurm did by itself (node failure, grace time over) -------------------------------


def _library_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    bindir = _stub_bin(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "ckpt").mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "STUB_LOG": str(tmp_path / "calls.log"),
        "SLURM_JOB_ID": "300",
        "HPCJOBS_RUN_DIR": str(run_dir),
        "HPCJOBS_CHECKPOINT_DIR": str(run_dir / "ckpt"),
        # A rendered script always sets the budgets: here the site config's defaults.
        **{
            f"HPCJOBS_MAX_REQUEUE_{k.upper()}": str(v)
            for k, v in MaxRequeues().model_dump().items()
        },
        **extra,
    }


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"{SOURCE}\n{script}", "job.sbatch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_finish_after_slurm_already_requeued_is_not_done(tmp_path: Path) -> None:
    """A node failed: Slurm requeued the job while the program on the healthy node exited 0.
    The run must not count as finished, and no continuation may be submitted."""
    env = _library_env(tmp_path, STUB_RESTARTS="1", STUB_SACCT_RUNS="NODE_FAIL|2026-01-01T00:00:00")
    proc = _bash('hpcjobs_finish 0 ""', env)
    assert proc.returncode == 0, proc.stderr
    chain = (tmp_path / "run" / "chain-300.tsv").read_text()
    assert "requeue\tnode_failure\trequeued by Slurm (restart 1)" in chain
    assert not (tmp_path / "run" / "DONE-300").exists()
    assert "sbatch" not in (tmp_path / "calls.log").read_text()


def test_begin_after_unlogged_requeue_asks_accounting(tmp_path: Path) -> None:
    """The first run died without a word; accounting says it was preempted (grace time over)."""
    env = _library_env(
        tmp_path,
        SLURM_RESTART_COUNT="1",
        STUB_SACCT_RUNS="PREEMPTED|2026-01-01T00:00:10 RUNNING|Unknown",
    )
    (tmp_path / "run" / "chain-300.tsv").write_text("1.0\t300\t0\tstart\t-\tcheckpoint=-1\n")
    proc = _bash("hpcjobs_begin\necho RAN", env)
    assert proc.returncode == 0, proc.stderr
    assert "RAN" in proc.stdout
    lines = (tmp_path / "run" / "chain-300.tsv").read_text().splitlines()
    fields = lines[1].split("\t")
    assert fields[3:5] == ["requeue", "preemption"]
    assert fields[0].startswith("1767225610")  # dated at the lost run's end


def test_begin_never_runs_a_chain_twice(tmp_path: Path) -> None:
    """Slurm requeued a job whose chain had already continued as another job: exit at once."""
    env = _library_env(tmp_path, SLURM_RESTART_COUNT="1")
    (tmp_path / "run" / "chain-300.tsv").write_text(
        "1.0\t300\t0\tstart\t-\tcheckpoint=-1\n"
        "2.0\t300\t0\trequeue\tpreemption\tcontinued as job 301 checkpoint=4 progress=4\n"
    )
    proc = _bash("hpcjobs_begin\necho RAN", env)
    assert proc.returncode == 0
    assert "RAN" not in proc.stdout
    assert "already continues as job 301" in proc.stderr


def test_begin_enforces_total_budget_on_slurm_requeues(tmp_path: Path) -> None:
    env = _library_env(
        tmp_path,
        SLURM_RESTART_COUNT="1",
        HPCJOBS_MAX_REQUEUES="1",
        STUB_SACCT_RUNS="NODE_FAIL|2026-01-01T00:00:00",
    )
    (tmp_path / "run" / "chain-300.tsv").write_text(
        "1.0\t299\t0\tstart\t-\tcheckpoint=-1\n"
        "2.0\t299\t0\trequeue\ttimeout\tcontinued as job 300 checkpoint=1 progress=1\n"
        "3.0\t300\t0\tstart\t-\tcheckpoint=1\n"
    )
    env["HPCJOBS_CHAIN_ROOT"] = "299"
    proc = _bash("hpcjobs_begin\necho RAN", env)
    assert proc.returncode == 1
    assert "RAN" not in proc.stdout
    assert "total requeue budget exhausted" in proc.stderr


def test_begin_sets_aside_a_log_left_by_an_earlier_job_with_the_same_id(tmp_path: Path) -> None:
    """Job ids repeat when a cluster's counter is reset: an old chain must not pass for ours."""
    env = _library_env(tmp_path)
    run_dir = tmp_path / "run"
    (run_dir / "chain-300.tsv").write_text("1.0\t300\t0\tend\tfinish\tcompleted\n")
    (run_dir / "DONE-300").write_text("")
    proc = _bash("hpcjobs_begin\necho RAN", env)
    assert proc.returncode == 0, proc.stderr
    assert "RAN" in proc.stdout
    events = (run_dir / "chain-300.tsv").read_text().splitlines()
    assert [e.split("\t")[3] for e in events] == ["standby", "start"]
    assert list(run_dir.glob("chain-300.tsv.stale-*"))
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
    (line,) = [ln for ln in script.split("\n") if ln.startswith("HPCJOBS_SBATCH_ARGS=(")]
    assert "--exclusive" in line and "--hold" not in line and "--begin" not in line
    env = _library_env(tmp_path, STUB_COMMENT="hpcjobs:0123abcd my sweep")
    proc = _bash(f"{line}\nhpcjobs_continue preemption", env)
    assert proc.returncode == 0, proc.stderr
    (call,) = [
        ln for ln in (tmp_path / "calls.log").read_text().splitlines() if ln.startswith("sbatch")
    ]
    words = call.split(" ")
    assert "--exclusive" in words and "--comment=mine" not in words
    assert words.count("--dependency=afterany:300") == 1
    assert call.split("--comment=")[1].startswith("hpcjobs:0123abcd my sweep ")


def test_event_log_done_marker_and_job_logs_are_private(tmp_path: Path) -> None:
    env = _library_env(tmp_path, HPCJOBS_CHAIN_ROOT="300")
    run_dir = Path(env["HPCJOBS_RUN_DIR"])
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
    proc = _bash("umask 022\nhpcjobs_private_logs\nhpcjobs_event start - x\nhpcjobs_mark_done", env)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_mode & 0o777 == 0o600 and err.stat().st_mode & 0o777 == 0o600
    assert decoy.stat().st_mode & 0o777 == 0o644  # a job name cannot point it elsewhere
    assert (run_dir / "chain-300.tsv").stat().st_mode & 0o777 == 0o600
    assert (run_dir / "DONE-300").stat().st_mode & 0o777 == 0o600
