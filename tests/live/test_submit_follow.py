"""Submitting and following real jobs on the sandbox, faults included.

Jobs are plain bash scripts handed to ``submit_rendered`` through a minimal stand-in for the
renderer's output.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.jobs.follow import JobEvent, follow_jobs
from hpcjobs.jobs.submission import SubmitResult, submit_rendered
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.sandbox import procs
from hpcjobs.sandbox.cluster import Sandbox
from hpcjobs.slurm import backend
from hpcjobs.slurm.classify import ErrorKind, SlurmCommandError
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.history import job_history
from hpcjobs.slurm.statusquery import query_status


@dataclass(frozen=True)
class Spec:
    name: str
    partition: str = "batch"


@dataclass(frozen=True)
class Rendered:
    script: str
    sbatch_args: list[str]
    spec: Spec
    site_name: str
    output_dir: Path
    blocks: dict[str, str] = field(default_factory=dict)
    supervisor: Path | None = None  # a plain script runs no supervisor


@dataclass
class CountingRunner:
    """A LocalRunner that counts the Slurm client invocations it makes, per program."""

    inner: LocalRunner
    counts: Counter[str] = field(default_factory=Counter)

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        self.counts[argv[0]] += 1
        return self.inner.run(argv, stdin=stdin, timeout=timeout, check=check, env=env)


@pytest.fixture
def runner(slurm_env: dict[str, str]) -> CountingRunner:
    return CountingRunner(LocalRunner(env=slurm_env))


@pytest.fixture
def client(runner: CountingRunner) -> SlurmClient:
    return SlurmClient(runner)


def _job(tmp: Path, name: str, body: str, *args: str) -> Rendered:
    out = tmp / "out" / name
    script = f"#!/bin/bash\n#SBATCH --open-mode=append\nset -u\n{body}\n"
    sbatch_args = ["-J", name, "-o", f"{out}/%x-%j.out", "-t", "5", *args]
    return Rendered(script, sbatch_args, Spec(name), "sandbox", out)


def _submit(client: SlurmClient, rendered: Rendered, tmp: Path, **kwargs: object) -> SubmitResult:
    return submit_rendered(rendered, client=client, index_dir=tmp / "index", **kwargs)  # type: ignore[arg-type]


def _wait(client: SlurmClient, ids: list[str], events: list[JobEvent] | None = None) -> int:
    result = follow_jobs(
        client, ids, on_event=(events.append if events is not None else lambda e: None)
    )
    return result.exit_code


def test_submit_wait_completed_with_record(
    client: SlurmClient, shared_tmp: Path, slurm_version: str
) -> None:
    rendered = _job(shared_tmp, "live-ok", 'echo "hello from $SLURM_JOB_ID"')
    result = _submit(client, rendered, shared_tmp)
    (job_id,) = result.job_ids
    events: list[JobEvent] = []
    assert _wait(client, [job_id], events) == 0
    assert events[-1].state == "COMPLETED"
    record = json.loads(result.record_path.read_text())
    assert record["slurm_version"] == slurm_version and record["job_ids"] == [job_id]
    assert record["site"] == "sandbox" and record["spec"]["name"] == "live-ok"
    assert stat.S_IMODE(result.record_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(result.script_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(rendered.output_dir.stat().st_mode) == 0o700
    log = rendered.output_dir / f"live-ok-{job_id}.out"
    assert log.read_text().strip() == f"hello from {job_id}"
    # The job carries the token: it is findable, and only once.
    assert client.find_by_token(result.token) == [job_id]


def test_wait_failure_exits_1(client: SlurmClient, shared_tmp: Path) -> None:
    result = _submit(client, _job(shared_tmp, "live-fail", "exit 3"), shared_tmp)
    assert _wait(client, result.job_ids) == 1
    deadline = time.monotonic() + 30
    while True:  # slurmdbd records the end a moment after the controller forgets the job
        (hist,) = job_history(client, result.job_ids[0])
        if hist.runs[-1].cause != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert hist.runs[-1].cause == "application" and hist.runs[-1].exit_code == 3


def test_unknown_partition_fails_fast_without_retries(
    runner: CountingRunner, client: SlurmClient, shared_tmp: Path
) -> None:
    rendered = _job(shared_tmp, "live-badpart", "true", "-p", "nope")
    started = time.monotonic()
    with pytest.raises(SlurmCommandError) as info:
        _submit(client, rendered, shared_tmp)
    # Sanity bound: one retry round of the Slurm policy alone would take longer.
    assert time.monotonic() - started < 8.0
    assert info.value.kind is ErrorKind.PERMANENT and info.value.exit_code == 3
    assert "Invalid partition name specified" in info.value.message
    assert runner.counts["sbatch"] == 2  # `sbatch --version` for the record, one submission


def test_controller_outage_submit_succeeds_once(
    sandbox: Sandbox, runner: CountingRunner, client: SlurmClient, shared_tmp: Path
) -> None:
    rendered = _job(shared_tmp, "live-outage", "true", "--hold")
    client.version()  # a local call; keep it out of the outage
    pid = sandbox.daemon_pids()["slurmctld"]
    assert pid is not None
    procs.stop(pid)
    outcome: dict[str, object] = {}

    def submit() -> None:
        try:
            outcome["result"] = _submit(client, rendered, shared_tmp)
        except Exception as exc:  # reported below
            outcome["error"] = exc

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        time.sleep(15)
        assert "result" not in outcome and "error" not in outcome
    finally:
        sandbox.up(sandbox.saved_settings())
    thread.join(timeout=180)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    result = outcome["result"]
    assert isinstance(result, SubmitResult)
    assert runner.counts["sbatch"] >= 3  # --version, failed attempt(s), the one that worked
    assert client.find_by_token(result.token) == result.job_ids
    client.cancel(result.job_ids)


def test_status_of_200_jobs_takes_at_most_two_calls(
    runner: CountingRunner,
    client: SlurmClient,
    slurm_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = LocalRunner(env=slurm_env)
    ids = [
        plain.run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                "-J",
                "live-many",
                "-o",
                "/dev/null",
                "--wrap",
                "true",
            ]
        ).stdout.strip()
        for _ in range(200)
    ]
    try:
        runner.counts.clear()
        report = query_status(client, ids)
        assert sum(runner.counts.values()) <= 2
        assert len(report.jobs) == 200 and report.unknown == []
        assert {j.reason for j in report.jobs} == {"JobHeldUser"}
        # The command line too, counted the same way.
        runner.counts.clear()
        monkeypatch.setattr(backend, "client_from_environment", lambda: client)
        result = CliRunner().invoke(cli, ["status", "--json", *ids])
        assert result.exit_code == 0, result.output
        assert len(json.loads(result.stdout)["jobs"]) == 200
        assert sum(runner.counts.values()) <= 2
    finally:
        client.cancel(ids)


def test_array_split_above_max_array_size(client: SlurmClient, shared_tmp: Path) -> None:
    marks = shared_tmp / "marks"
    marks.mkdir()
    os.chmod(marks, 0o777)
    body = f'touch "{marks}/$HPCJOBS_ARRAY_TASK_ID-$SLURM_ARRAY_TASK_ID"'
    rendered = _job(shared_tmp, "live-split", body, "--array=0-9%4")
    result = _submit(client, rendered, shared_tmp, max_array_size=4)
    assert len(result.job_ids) == 3
    assert _wait(client, result.job_ids) == 0
    seen = sorted(p.name for p in marks.iterdir())
    assert sorted(int(n.split("-")[0]) for n in seen) == list(range(10))
    assert all(int(n.split("-")[1]) < 4 for n in seen)


def test_array_split_uses_the_clusters_max_array_size(
    runner: CountingRunner, client: SlurmClient, shared_tmp: Path
) -> None:
    rendered = _job(shared_tmp, "live-big", "true", "--hold", "--array=0-2099%30")
    result = _submit(client, rendered, shared_tmp)
    try:
        assert runner.counts["scontrol"] == 1
        assert len(result.job_ids) == 3  # MaxArraySize=1001 on the sandbox
        rows = client.queue(result.job_ids)
        shown = sorted(r.job_id.split("_", 1)[1] for r in rows)
        assert shown == ["[0-1000%10]", "[0-1000%10]", "[0-97%10]"]
    finally:
        client.cancel(result.job_ids)


def test_dependency_waits_for_the_first_job(client: SlurmClient, shared_tmp: Path) -> None:
    first = _submit(client, _job(shared_tmp, "live-first", "sleep 3"), shared_tmp)
    second = _submit(
        client,
        _job(shared_tmp, "live-second", "true"),
        shared_tmp,
        after=[f"{first.job_ids[0]}:afterok"],
    )
    (row,) = client.queue(second.job_ids)
    assert row.state == "PENDING" and row.reason == "Dependency"
    assert _wait(client, [*first.job_ids, *second.job_ids]) == 0
    (a,) = job_history(client, first.job_ids[0])
    (b,) = job_history(client, second.job_ids[0])
    assert a.runs[-1].end is not None and b.runs[-1].start is not None
    assert b.runs[-1].start >= a.runs[-1].end


def test_requeue_is_followed_logged_and_in_history(
    client: SlurmClient, shared_tmp: Path, slurm_env: dict[str, str]
) -> None:
    body = (
        'echo "hpcjobs: run ${SLURM_RESTART_COUNT:-0} of job $SLURM_JOB_ID"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then\n'
        '  scontrol requeue "$SLURM_JOB_ID"; sleep 60\n'
        "fi\n"
        "echo finished"
    )
    result = _submit(client, _job(shared_tmp, "live-requeue", body, "--requeue"), shared_tmp)
    (job_id,) = result.job_ids
    env = {**os.environ, **slurm_env}
    follower = subprocess.Popen(
        [sys.executable, "-m", "hpcjobs", "logs", "-f", job_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    events: list[JobEvent] = []

    def on_event(event: JobEvent) -> None:
        events.append(event)
        if event.requeued and event.state == "PENDING":
            # Skip Slurm's ~2 minute requeue hold: the owner may start it at once, but not on
            # the node it left. There the hold is what keeps the job's revoked credential from
            # killing it ("Killing non-startable batch JobId=...: Job credential revoked", seen
            # on 24.11 when the scheduler put it straight back on that node).
            runner = LocalRunner(env=slurm_env)
            acct = ["sacct", "-n", "-X", "-P", "-D", "-j", job_id, "-o", "NodeList"]
            left = [n for n in runner.run(acct, check=False).stdout.split() if n != "None"]
            update = ["scontrol", "update", f"jobid={job_id}"]
            if left:
                runner.run([*update, f"ExcNodeList={left[-1]}"], check=False)
            runner.run([*update, "StartTime=now"], check=False)

    assert follow_jobs(client, [job_id], on_event=on_event, timeout_s=240).exit_code == 0
    assert any(e.requeued for e in events)
    out, err = follower.communicate(timeout=90)
    assert follower.returncode == 0, err
    assert "hpcjobs: run 0 of job" in out and "hpcjobs: run 1 of job" in out
    assert out.rstrip().endswith("finished")
    logs = CliRunner().invoke(cli, ["logs", job_id, "--restart", "1"], env=slurm_env)
    assert logs.output.startswith("hpcjobs: run 1 of job")
    (hist,) = job_history(client, job_id)
    assert [r.cause for r in hist.runs] == ["requeued", "completed"]
    assert hist.runs[0].gap_to_next_s is not None and hist.runs[0].gap_to_next_s < 120


def test_unknown_job_ids_exit_3(slurm_env: dict[str, str]) -> None:
    for args in (["status", "999999"], ["logs", "999999"], ["cancel", "999999"]):
        result = CliRunner().invoke(cli, args, env=slurm_env)
        assert result.exit_code == 3, (args, result.output)
        assert "unknown job 999999" in result.stderr


def test_cancel_and_status_from_the_command_line(
    client: SlurmClient, shared_tmp: Path, slurm_env: dict[str, str]
) -> None:
    result = _submit(client, _job(shared_tmp, "live-cancel", "sleep 120"), shared_tmp)
    (job_id,) = result.job_ids
    cancelled = CliRunner().invoke(cli, ["cancel", job_id], env=slurm_env)
    assert cancelled.exit_code == 0 and f"cancelled {job_id}" in cancelled.output
    assert _wait(client, [job_id]) == 1
    status = CliRunner().invoke(cli, ["status", "--json", job_id], env=slurm_env)
    assert status.exit_code == 0
    (job,) = json.loads(status.stdout)["jobs"]
    assert job["state"] == "CANCELLED"
