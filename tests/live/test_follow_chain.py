"""Following chains on the sandbox: ``submit --wait`` latency, cancel, status and history.

Jobs go through ``hpcjobs --site sandbox submit`` (the real batch script and event log). A
pending continuation is made deterministic with a blocker: a job that needs every node and is
queued before the continuation, so that it takes the nodes when the first run ends and the
continuation waits (PENDING) until it is cancelled. (A continuation does not copy one-shot
options such as ``--hold``.)
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.jobs.chain import read_chain
from hpcjobs.jobs.follow import follow_jobs
from hpcjobs.runner import LocalRunner
from hpcjobs.slurm.client import SlurmClient
from tests.live.conftest import SshClientHome
from tests.live.waiting import wait_for

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")
#: A program that stops on the warning signal, as a checkpointing program does.
STOPS_ON_USR2 = """\
import pathlib, signal, sys, time
signal.signal(signal.SIGUSR2, lambda *_: sys.exit(0))
pathlib.Path(sys.argv[1]).touch()  # ready: the handler is in place
time.sleep(300)
"""


@dataclass
class Login:
    """The test sandbox seen from a login node: run hpcjobs and Slurm commands, clean up."""

    env: dict[str, str]
    folder: Path
    jobs: list[str] = field(default_factory=list)

    @property
    def environ(self) -> dict[str, str]:
        return {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}

    def slurm(self, *argv: str, check: bool = True) -> str:
        return LocalRunner(env=self.env).run(list(argv), check=check, timeout=60).stdout

    def hpcjobs(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [HPCJOBS, *argv], env=self.environ, capture_output=True, text=True, timeout=120
        )
        if check:
            assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        return proc

    def out(self, name: str) -> Path:
        path = self.folder / name
        path.mkdir(mode=0o755)
        return path

    def submit_argv(self, name: str, out: Path, *options: str) -> list[str]:
        return [HPCJOBS, "--site", "sandbox", "submit", "-J", name, "--output-dir", str(out),
                "--launcher", "none", "-t", "5", *options]  # fmt: skip

    def state(self, job_id: str) -> str:
        return self.slurm("squeue", "-h", "-j", job_id, "-o", "%T %r", check=False).strip()


@pytest.fixture
def login(slurm_env: dict[str, str], shared_tmp: Path) -> Iterator[Login]:
    box = Login(env=dict(slurm_env), folder=shared_tmp)
    yield box
    chains = [read_chain(p) for p in shared_tmp.glob("*/chain-*.jsonl")]
    ids = sorted(set(box.jobs + [j for chain in chains for j in chain.job_ids]))
    if ids:
        box.slurm("scancel", *ids, check=False)


# ---- 3: submit --wait sees the end at once --------------------------------------------------


def test_submit_wait_returns_within_seconds_of_the_end(login: Login) -> None:
    out = login.out("wait-fast")
    argv = login.submit_argv("live-wait-fast", out, "--wait", "--", "sleep", "25")
    proc = subprocess.Popen(
        argv, env=login.environ, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    job_id = proc.stdout.readline().strip()
    assert job_id.isdigit(), proc.stderr.read() if proc.stderr else ""
    login.jobs.append(job_id)
    # For comparison: the gentle backoff alone (what --wait did before), on the same job.
    gentle: dict[str, float] = {}
    client = SlurmClient(LocalRunner(env=login.env))

    def follow_gently() -> None:
        follow_jobs(client, [job_id], on_event=lambda e: None)
        gentle["returned"] = time.time()

    thread = threading.Thread(target=follow_gently, daemon=True)
    thread.start()
    _, stderr = proc.communicate(timeout=300)
    returned = time.time()
    assert proc.returncode == 0, stderr
    chain = read_chain(out / f"chain-{job_id}.jsonl")
    assert chain.final is not None and chain.final.cause == "finish", chain.events
    latency = returned - chain.final.time
    thread.join(timeout=120)
    root_end = max(e.time for e in chain.events if e.job_id == job_id and e.event != "start")
    old = gentle["returned"] - root_end if "returned" in gentle else float("nan")
    print(
        f"\nsubmit --wait returned {latency:.1f} s after the job's end "
        f"(gentle backoff alone: {old:.1f} s; chain {chain.job_ids})"
    )
    # Sanity bound (the figure is printed above): the gentle backoff alone would be minutes.
    assert latency < 30, stderr


@pytest.mark.ssh
def test_submit_wait_over_ssh_returns_within_seconds_of_the_end(
    ssh_home: SshClientHome, sandbox: object
) -> None:
    ssh_home.write_config(ssh_home.alias_config("login-wait"))
    ssh_home.trust_server()
    argv = ["--site", "sandbox", "submit", "--host", "login-wait", "--json", "-J", "live-wait-ssh",
            "--output-dir", f"hpcjobs-test/{secrets.token_hex(4)}", "--launcher", "none",
            "-t", "5", "--wait", "--", "sleep", "20"]  # fmt: skip
    result = CliRunner().invoke(cli, argv)
    returned = time.time()
    assert result.exit_code == 0, result.stderr
    sub = json.loads(result.stdout)
    # The login node is this machine: its files can be read here.
    chain = read_chain(Path(sub["output_dir"]) / f"chain-{sub['job_id']}.jsonl")
    assert chain.final is not None and chain.final.cause == "finish", chain.events
    latency = returned - chain.final.time
    print(f"\nsubmit --wait over SSH returned {latency:.1f} s after the job's end")
    assert latency < 30, result.stderr  # sanity bound, as above


# ---- 4, 5, 9: a chain whose continuation is pending ----------------------------------------


def held_chain(login: Login, name: str) -> tuple[str, str, Path]:
    """A chain whose first run stopped on the warning signal; its continuation is pending.

    Returns the root id, the continuation's id and the output folder.
    """
    out = login.out(name)
    program = out / "stops_on_usr2.py"
    program.write_text(STOPS_ON_USR2)
    ready = out / "ready"
    argv = login.submit_argv(name, out, "--sbatch=--hold", "--", PYTHON, str(program), str(ready))
    proc = subprocess.run(
        argv, env=login.environ, cwd=out, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    root = proc.stdout.split()[-1]
    login.jobs.append(root)
    login.slurm("scontrol", "release", root)
    log = out / f"chain-{root}.jsonl"
    wait_for(f"job {root} to start", lambda: read_chain(log).starts >= 1, 180)
    wait_for(f"the program of job {root} to be ready for the signal", ready.exists, 60)
    blocker = login.slurm(
        "sbatch", "--parsable", "-p", "batch", "-N", "3", "--exclusive", "-J", "blocker",
        "-o", "/dev/null", "--wrap", "sleep 600",
    ).strip().split(";")[0]  # fmt: skip
    login.jobs.append(blocker)
    # The continuation is the run's standby, submitted when the run started, so it is older
    # than the blocker: give the blocker the higher priority, as a busier cluster would.
    login.slurm("scontrol", "update", f"jobid={blocker}", "Priority=4294967000")
    login.slurm("scancel", "--batch", "--signal=USR2", root)

    def continued() -> str | None:
        stops = read_chain(log).interruptions()
        how = stops[0].how if stops else ""
        return how.split()[3] if how.startswith("continued as job") else None

    new = wait_for(f"job {root} to continue", continued, 60)
    login.jobs.append(new)
    wait_for(f"job {root} to end", lambda: not login.state(root).startswith("RUNNING"), 60)
    wait_for(f"job {blocker} to take the nodes", lambda: login.state(blocker) == "RUNNING None", 60)
    assert login.state(new).startswith("PENDING"), login.state(new)
    return root, new, out


def test_status_logs_cancel_and_history_of_a_pending_continuation(login: Login) -> None:
    root, new, out = held_chain(login, "live-chain-cancel")
    # The continuation did not copy the first run's --hold, and kept the chain's token.
    assert "JobHeldUser" not in login.state(new)
    comment = login.slurm("squeue", "-h", "-j", new, "-o", "%k").strip()
    assert comment.startswith("hpcjobs:") and len(comment) > len("hpcjobs:"), comment
    # status: the chain's current job, its root and its runs.
    status = login.hpcjobs("status", "--json", root)
    (job,) = json.loads(status.stdout)["jobs"]
    assert (job["job_id"], job["state"], job["restarts"]) == (new, "PENDING", 0)
    assert (job["chain_root"], job["chain_jobs"], job["runs"]) == (root, [root, new], 1)
    table = login.hpcjobs("status", root).stdout.splitlines()
    assert table[0].split()[-2:] == ["CHAIN", "RUNS"]
    assert table[1].split()[0] == new and table[1].split()[-2:] == [root, "1"]
    unknown = login.hpcjobs("status", "9999999", check=False)
    assert unknown.returncode == 3 and unknown.stdout == ""
    assert "unknown job 9999999" in unknown.stderr
    # logs -f of the held job says why it waits.
    follower = subprocess.Popen(
        [HPCJOBS, "logs", "-f", new], env=login.environ, stderr=subprocess.PIPE, text=True
    )
    try:
        assert follower.stderr is not None
        first = follower.stderr.readline()
    finally:
        follower.terminate()
        follower.wait(timeout=30)
    # With or without a reason, depending on whether the scheduler has looked at it yet.
    assert first.startswith(f"==> job {new} is pending"), first
    assert "waiting" in first and "None" not in first, first
    # cancel: the held continuation never runs its script; cancel logs the chain's end.
    cancelled = login.hpcjobs("cancel", root)
    assert f"cancelled {new}" in cancelled.stdout, cancelled
    final = read_chain(out / f"chain-{root}.jsonl").final
    assert final is not None and (final.job_id, final.cause) == (new, "fail")
    history = login.hpcjobs("history", root).stdout
    assert f"Result: fail (cancelled while job {new} was pending)" in history, history
    assert "still running" not in history


def test_history_of_a_continuation_scancelled_by_hand(login: Login) -> None:
    root, new, out = held_chain(login, "live-chain-scancel")
    login.slurm("scancel", new)  # not through hpcjobs: nothing writes the chain's end

    def says_cancelled() -> str | None:
        text = login.hpcjobs("history", root).stdout
        return text if "Result: fail (cancelled" in text else None

    history = wait_for("history to say cancelled", says_cancelled, 30, every=1.0)
    assert f"cancelled: job {new} is CANCELLED in Slurm" in history, history
    data = json.loads(login.hpcjobs("history", "--json", root).stdout)
    assert data["final_source"] == "accounting" and data["final"]["result"] == "fail"
    assert read_chain(out / f"chain-{root}.jsonl").final is None


# ---- 9: the Python API's state right after submission ----------------------------------------


def test_executor_job_is_pending_right_after_submit(
    login: Login, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hpcjobs
    from hpcjobs.submitit.hpcjob import queue_state

    for key, value in login.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("XDG_STATE_HOME", str(login.folder / "state"))
    folder = login.out("executor-state")
    executor = hpcjobs.executor(
        "sandbox",
        folder=folder,
        python=PYTHON,
        time="00:05:00",
        additional_parameters={"hold": True},
    )
    job = executor.submit(time.sleep, 1)
    login.jobs.append(job.job_id)
    try:
        state = job.state
        accounting = job.watcher.get_state(job.job_id, mode="cache")
        print(f"\njob.state right after submit: {state} (accounting says {accounting})")
        assert state == "PENDING"
        assert queue_state(job.job_id) == "PENDING"
    finally:
        job.cancel(check=False)
