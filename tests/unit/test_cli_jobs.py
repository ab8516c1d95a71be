"""`hpcjobs status|logs|cancel|history` against a scripted Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.jobs.records import remember, write_record
from hpcjobs.runner import Result
from hpcjobs.slurm import backend
from tests.fakes import FakeRunner, client_for, fail, ok

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
UNKNOWN = (DATA / "22.05/squeue-unknown-id.stderr").read_text()
SACCT24 = (DATA / "24.11/sacct-duplicates.txt").read_text()
SQUEUE24 = (DATA / "24.11/squeue-all.txt").read_text()


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    runner = FakeRunner()
    monkeypatch.setattr(backend, "client_from_environment", lambda: client_for(runner))
    return runner


def test_status_table(slurm: FakeRunner) -> None:
    slurm.add("squeue", ok(SQUEUE24))
    result = CliRunner().invoke(cli, ["status", "1180", "1181"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == [
        "JOBID",
        "NAME",
        "STATE",
        "REASON",
        "NODES",
        "NODELIST",
        "ELAPSED",
        "RESTARTS",
    ]
    assert any(line.split()[:3] == ["1181", "finetune", "PENDING"] for line in lines)
    assert "2-03:04:05" in result.output
    assert len(slurm.calls) == 1


def test_status_json_and_unknown_exit_3(slurm: FakeRunner) -> None:
    slurm.add("squeue", ok(SQUEUE24)).add("sacct", ok(SACCT24))
    result = CliRunner().invoke(cli, ["status", "--json", "1180", "1171", "99999"])
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    states = {j["job_id"]: (j["state"], j["restarts"]) for j in data["jobs"]}
    assert states["1171"] == ("RUNNING", 3) and states["1180"] == ("RUNNING", 0)
    assert data["unknown"] == ["99999"]
    assert "unknown job 99999" in result.stderr
    assert len(slurm.calls) == 2


def test_status_without_ids_lists_my_jobs(slurm: FakeRunner) -> None:
    slurm.add("squeue", ok(""))
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 0 and "No jobs." in result.output
    assert "--me" in slurm.calls[0]


def test_status_bad_id_is_exit_2(slurm: FakeRunner) -> None:
    result = CliRunner().invoke(cli, ["status", "12;ls"])
    assert result.exit_code == 2 and "not a job id" in result.stderr
    assert slurm.calls == []


def test_status_watch_stops_when_jobs_end(
    slurm: FakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = "5|5|5|N/A|{}|None|n1|0:01|1|0|batch|alice|w|\n"
    slurm.add("squeue", ok(line.format("RUNNING")), ok(line.format("COMPLETED")))
    waits: list[float] = []
    monkeypatch.setattr("hpcjobs.cli.status.time.sleep", waits.append)
    result = CliRunner().invoke(cli, ["status", "--watch", "5"])
    assert result.exit_code == 0, result.output
    assert result.output.count("JOBID") == 2 and waits == [1.0]


def test_status_watch_ctrl_c_is_130(slurm: FakeRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    slurm.add("squeue", ok("5|5|5|N/A|RUNNING|None|n1|0:01|1|0|batch|alice|w|\n"))

    def interrupt(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("hpcjobs.cli.status.time.sleep", interrupt)
    assert CliRunner().invoke(cli, ["status", "--watch", "5"]).exit_code == 130


def test_cancel(slurm: FakeRunner) -> None:
    slurm.add("scancel", Result(("scancel",), 0, "", "scancel: Terminating job 5\n"))
    result = CliRunner().invoke(cli, ["cancel", "5", "6_2"])
    assert result.exit_code == 0
    assert result.output.splitlines() == ["cancelled 5", "cancelled 6_2"]
    assert slurm.calls[0] == ["scancel", "-v", "5", "6_2"]


def test_cancel_signal_unknown_and_finished(slurm: FakeRunner) -> None:
    stderr = (
        "scancel: error: Kill job error on job id 404: Invalid job id specified\n"
        "scancel: error: Kill job error on job id 1182: Invalid job id specified\n"
    )
    slurm.add("scancel", fail(stderr)).add("squeue", ok(SQUEUE24)).add("sacct", ok(""))
    result = CliRunner().invoke(cli, ["cancel", "--signal", "usr1", "7", "404", "1182"])
    assert result.exit_code == 3
    assert "sent USR1 to 7" in result.output
    assert "1182 had already ended" in result.output
    assert "unknown job 404" in result.stderr


def test_cancel_rejects_bad_signal(slurm: FakeRunner) -> None:
    result = CliRunner().invoke(cli, ["cancel", "-s", "USR1;ls", "5"])
    assert result.exit_code == 2 and slurm.calls == []


def test_history_table_and_json(slurm: FakeRunner) -> None:
    slurm.add("sacct", ok(SACCT24))
    result = CliRunner().invoke(cli, ["history", "1171"])
    assert result.exit_code == 0, result.output
    assert "4 runs, 3 restarts" in result.output
    assert "preemption" in result.output and "node_failure" in result.output
    assert "00:02:56" in result.output  # gap after the preemption
    result = CliRunner().invoke(cli, ["history", "--json", "1171"])
    data = json.loads(result.stdout)
    runs = next(j for j in data["jobs"] if j["job_id"] == "1171")["runs"]
    assert [r["cause"] for r in runs] == ["preemption", "node_failure", "requeued", "running"]


def test_history_unknown_is_exit_3(slurm: FakeRunner) -> None:
    slurm.add("sacct", ok(""))
    result = CliRunner().invoke(cli, ["history", "404"])
    assert result.exit_code == 3 and "unknown job 404" in result.stderr


def _show_job(path: Path, job_id: str = "50", state: str = "RUNNING", extra: str = "") -> str:
    return f"JobId={job_id} {extra}JobName=x JobState={state} StdErr={path}.err StdOut={path}\n"


def test_logs_prints_the_file(slurm: FakeRunner, tmp_path: Path) -> None:
    log = tmp_path / "x-50.out"
    log.write_text("hpcjobs: run 0 of job 50\nfirst\nhpcjobs: run 1 of job 50\nsecond\n")
    slurm.add("scontrol", ok(_show_job(log)))
    result = CliRunner().invoke(cli, ["logs", "50"])
    assert result.exit_code == 0 and result.output.endswith("second\n")
    result = CliRunner().invoke(cli, ["logs", "50", "--restart", "1"])
    assert result.output == "hpcjobs: run 1 of job 50\nsecond\n"
    result = CliRunner().invoke(cli, ["logs", "50", "--restart", "4"])
    assert result.exit_code == 2 and "no run 4" in result.stderr  # bad input, not a failed job


def test_logs_stderr_and_task(slurm: FakeRunner, tmp_path: Path) -> None:
    log = tmp_path / "x-51.out"
    Path(f"{log}.err").write_text("oops\n")
    slurm.add("scontrol", ok(_show_job(log, "51", extra="ArrayJobId=50 ArrayTaskId=1 ")))
    result = CliRunner().invoke(cli, ["logs", "50", "--task", "1", "--stderr"])
    assert result.exit_code == 0 and result.output == "oops\n"
    assert slurm.calls[0][-1] == "50_1"
    result = CliRunner().invoke(cli, ["logs", "50"])
    assert result.exit_code == 2 and "is an array" in result.stderr


def test_logs_follow_until_the_job_ends(
    slurm: FakeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "x-50.out"
    log.write_text("starting\n")
    running = "50|50|50|N/A|RUNNING|None|n1|0:01|1|0|batch|alice|x|\n"
    done = "50|50|50|N/A|COMPLETED|None|n1|0:02|1|0|batch|alice|x|\n"
    slurm.add("scontrol", ok(_show_job(log))).add("squeue", ok(running), ok(done))

    def sleep(_: float) -> None:
        with log.open("a") as handle:
            handle.write("tick\n")

    monkeypatch.setattr("hpcjobs.jobs.follow.time.sleep", sleep)
    result = CliRunner().invoke(cli, ["logs", "-f", "50"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("starting\ntick\n")
    assert slurm.count("squeue") == 2


def test_logs_from_the_record_after_slurm_forgot(
    slurm: FakeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "run"
    folder.mkdir()
    record = write_record(
        folder / "record.json",
        {"sbatch_args": ["-J", "train", "--output", "%x-%j.out"], "workdir": str(folder)},
    )
    remember(["60"], record)
    (folder / "train-60.out").write_text("from the record\n")
    slurm.add("scontrol", fail(UNKNOWN))
    result = CliRunner().invoke(cli, ["logs", "60"])
    assert result.exit_code == 0, result.stderr
    assert result.output == "from the record\n"


def test_logs_unknown_job_is_exit_3(
    slurm: FakeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    slurm.add("scontrol", fail(UNKNOWN)).add("sacct", ok(""))
    result = CliRunner().invoke(cli, ["logs", "404"])
    assert result.exit_code == 3 and "unknown job 404" in result.stderr


def test_help_lists_the_commands() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    for name in ("status", "logs", "cancel", "history"):
        assert name in result.output


def test_logs_follow_waits_for_a_pending_job(
    slurm: FakeRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "x-50.out"
    pending = "JobId=50 JobName=x JobState=PENDING Reason=Priority StdOut=/wrong/x-50.out\n"
    done = "50|50|50|N/A|COMPLETED|None|n1|0:02|1|0|batch|alice|x|\n"
    slurm.add("scontrol", ok(pending), ok(_show_job(log, state="COMPLETED")))
    slurm.add("squeue", ok(done))
    log.write_text("ran\n")
    waits: list[float] = []
    monkeypatch.setattr("hpcjobs.cli.logs.time.sleep", waits.append)
    monkeypatch.setattr("hpcjobs.jobs.follow.time.sleep", waits.append)
    result = CliRunner().invoke(cli, ["logs", "-f", "50"])
    assert result.exit_code == 0, result.output
    assert "is pending (Priority)" in result.stderr
    assert result.stdout == "ran\n" and waits[0] == 1.0
