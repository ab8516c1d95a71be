"""SlurmClient: retries, no duplicate submissions, batched queries, scancel outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.backoff import Backoff
from hpcjobs.errors import CommandTimeoutError
from hpcjobs.runner import Result
from hpcjobs.slurm import parse
from hpcjobs.slurm.classify import AccountingDisabledError, ErrorKind, SlurmCommandError
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.sbatchline import comment_has_token
from tests.fakes import FakeRunner, Sleeps, client_for, fail, ok

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
DOWN = (DATA / "22.05/sbatch-controller-down.stderr").read_text()
TIMEOUT = (DATA / "24.11/sbatch-socket-timeout.stderr").read_text()
BAD_PARTITION = (DATA / "22.05/sbatch-invalid-partition.stderr").read_text()


def token_line(job_id: str, comment: str) -> str:
    return f"{job_id}|{job_id}|{comment}|\n"


def test_submit_plain(tmp_path: Path) -> None:
    runner = FakeRunner().add("sbatch", ok("4242\n"))
    job = client_for(runner).submit(tmp_path / "job.sh", ["-p", "batch"], token="t1")
    assert job == "4242"
    argv = runner.calls[0]
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--comment=hpcjobs:t1" in argv and argv[-1] == str(tmp_path / "job.sh")
    assert runner.envs[0] == {"SLURM_TIME_FORMAT": "standard"}


def test_submit_comment_keeps_user_text(tmp_path: Path) -> None:
    runner = FakeRunner().add("sbatch", ok("1\n"))
    client_for(runner).submit(tmp_path / "j.sh", [], token="t", comment="note x")
    assert "--comment=hpcjobs:t note x" in runner.calls[0]
    assert comment_has_token("hpcjobs:t note x", "t")
    assert not comment_has_token("hpcjobs:t2", "t")


def test_permanent_error_fails_at_once(tmp_path: Path) -> None:
    sleeps = Sleeps()
    runner = FakeRunner().add("sbatch", fail(BAD_PARTITION))
    with pytest.raises(SlurmCommandError) as info:
        client_for(runner, sleeps).submit(tmp_path / "j.sh", [], token="t")
    assert runner.count("sbatch") == 1 and sleeps.waits == []
    assert info.value.kind is ErrorKind.PERMANENT
    assert "Invalid partition name specified" in info.value.message
    assert info.value.exit_code == 3


def test_transient_error_is_retried_with_backoff(tmp_path: Path) -> None:
    sleeps = Sleeps()
    runner = FakeRunner().add("sbatch", fail(DOWN), fail(DOWN), ok("77\n"))
    assert client_for(runner, sleeps).submit(tmp_path / "j.sh", [], token="t") == "77"
    assert runner.count("sbatch") == 3
    assert runner.count("squeue") == 0  # a connect failure cannot have created the job
    assert len(sleeps.waits) == 2 and all(0 <= w <= 20 for w in sleeps.waits)


def test_retries_stop_at_the_attempt_bound(tmp_path: Path) -> None:
    runner = FakeRunner().add("sbatch", fail(DOWN))
    policy = Backoff(attempts=4, total_s=1000, sleep=Sleeps())
    with pytest.raises(SlurmCommandError) as info:
        SlurmClient(runner, policy=policy).submit(tmp_path / "j.sh", [], token="t")
    assert runner.count("sbatch") == 4
    assert info.value.kind is ErrorKind.TRANSIENT and info.value.hint


def test_retries_stop_at_the_time_bound(tmp_path: Path) -> None:
    runner = FakeRunner().add("sbatch", fail(DOWN))
    with pytest.raises(SlurmCommandError):
        client_for(runner, total=0.0).submit(tmp_path / "j.sh", [], token="t")
    assert runner.count("sbatch") == 1


def test_ambiguous_failure_adopts_the_job_that_was_created(tmp_path: Path) -> None:
    runner = (
        FakeRunner()
        .add("sbatch", fail(TIMEOUT), ok("999\n"))
        .add("squeue", ok(token_line("500", "(null)") + token_line("501", "hpcjobs:tok")))
    )
    job = client_for(runner).submit(tmp_path / "j.sh", [], token="tok")
    assert job == "501"
    assert runner.count("sbatch") == 1  # never submitted twice
    lookup = runner.calls[1]
    assert lookup[:3] == ["squeue", "--me", "-h"]


def test_ambiguous_failure_resubmits_when_nothing_was_created(tmp_path: Path) -> None:
    runner = (
        FakeRunner()
        .add("sbatch", fail(TIMEOUT), ok("1000\n"))
        .add("squeue", ok(token_line("500", "hpcjobs:other")))
    )
    assert client_for(runner).submit(tmp_path / "j.sh", [], token="tok") == "1000"
    assert runner.count("sbatch") == 2 and runner.count("squeue") == 1


def test_our_own_timeout_counts_as_ambiguous(tmp_path: Path) -> None:
    runner = (
        FakeRunner()
        .add("sbatch", CommandTimeoutError(["sbatch"], 150), ok("1\n"))
        .add("squeue", ok(token_line("88", "hpcjobs:tok extra words")))
    )
    assert client_for(runner).submit(tmp_path / "j.sh", [], token="tok") == "88"
    assert runner.count("sbatch") == 1


def test_ambiguous_until_the_end_then_last_lookup(tmp_path: Path) -> None:
    runner = (
        FakeRunner()
        .add("sbatch", fail(TIMEOUT))
        .add("squeue", ok(""), ok(""), ok(token_line("5", "hpcjobs:tok")))
    )
    policy = Backoff(attempts=3, total_s=100, sleep=Sleeps())
    job = SlurmClient(runner, policy=policy).submit(tmp_path / "j.sh", [], token="tok")
    assert job == "5"
    assert runner.count("sbatch") == 3


def test_ambiguous_until_the_end_without_job_says_so(tmp_path: Path) -> None:
    runner = FakeRunner().add("sbatch", fail(TIMEOUT)).add("squeue", ok(""))
    policy = Backoff(attempts=2, total_s=100, sleep=Sleeps())
    with pytest.raises(SlurmCommandError) as info:
        SlurmClient(runner, policy=policy).submit(tmp_path / "j.sh", [], token="tok")
    assert "hpcjobs:tok" in (info.value.hint or "")


def test_queue_is_one_call_for_many_ids() -> None:
    text = (DATA / "22.05/squeue-all.txt").read_text()
    runner = FakeRunner().add("squeue", ok(text))
    rows = client_for(runner).queue([str(i) for i in range(1, 201)])
    assert runner.count("squeue") == 1
    argv = runner.calls[0]
    assert argv[argv.index("-j") + 1].count(",") == 199
    assert "-t" in argv and "all" in argv and "--me" not in argv
    assert rows and all(isinstance(r, parse.QueueRow) for r in rows)


def test_queue_mine() -> None:
    runner = FakeRunner().add("squeue", ok(""))
    assert client_for(runner).queue(mine=True) == []
    assert "--me" in runner.calls[0] and "-j" not in runner.calls[0]


def test_queue_unknown_single_id_is_empty() -> None:
    stderr = (DATA / "22.05/squeue-unknown-id.stderr").read_text()
    runner = FakeRunner().add("squeue", fail(stderr))
    assert client_for(runner).queue(["99999"]) == []
    assert runner.count("squeue") == 1


def test_queries_retry_transient_failures() -> None:
    stderr = (DATA / "22.05/squeue-controller-down.stderr").read_text()
    runner = FakeRunner().add("squeue", fail(stderr), ok(""))
    assert client_for(runner).queue(["1"]) == []
    assert runner.count("squeue") == 2


def test_bad_job_id_is_bad_input() -> None:
    from hpcjobs.errors import BadInputError

    with pytest.raises(BadInputError):
        client_for(FakeRunner()).queue(["12; rm -rf /"])


def test_accounting_and_disabled_accounting() -> None:
    text = (DATA / "22.05/sacct-duplicates.txt").read_text()
    runner = FakeRunner().add("sacct", ok(text))
    rows = client_for(runner).accounting(["26", "27"])
    assert rows and "-D" in runner.calls[0] and "-X" in runner.calls[0]
    disabled = (DATA / "24.11/sacct-disabled.stderr").read_text()
    runner = FakeRunner().add("sacct", fail(disabled))
    with pytest.raises(AccountingDisabledError):
        client_for(runner).accounting(["1"])
    assert runner.count("sacct") == 1


def test_config_and_max_array_size_cached() -> None:
    text = (DATA / "24.11/scontrol-show-config.txt").read_text()
    runner = FakeRunner().add("scontrol", ok(text))
    client = client_for(runner)
    assert client.max_array_size() == 501
    assert client.max_array_size() == 501
    assert runner.count("scontrol") == 1


def test_version_is_unknown_when_sbatch_cannot_tell() -> None:
    runner = FakeRunner().add("sbatch", fail("sbatch: fatal: Could not establish a config"))
    assert client_for(runner).version() == "unknown"
    runner = FakeRunner().add("sbatch", ok("slurm-wlm 22.05.8\n"))
    assert client_for(runner).version() == "22.05.8"


def test_show_job() -> None:
    text = (DATA / "24.11/scontrol-show-job.txt").read_text()
    runner = FakeRunner().add("scontrol", ok(text))
    assert client_for(runner).show_job("1181")["Restarts"] == "2"  # type: ignore[index]
    unknown = (DATA / "22.05/squeue-unknown-id.stderr").read_text()
    runner = FakeRunner().add("scontrol", fail(unknown))
    assert client_for(runner).show_job("5") is None


def test_cancel_outcomes() -> None:
    stderr = (DATA / "24.11/scancel-mixed.stderr").read_text()
    runner = FakeRunner().add("scancel", fail(stderr))
    outcome = client_for(runner).cancel(["99999", "1185", "7"], signal="USR1")
    assert outcome.unknown == ("99999",)
    assert outcome.finished == ("1185",)
    assert outcome.signalled == ("7",)
    assert runner.calls[0][:3] == ["scancel", "-v", "--signal=USR1"]


def test_cancel_unknown_with_exit_zero() -> None:
    stderr = (DATA / "22.05/scancel-unknown.stderr").read_text()
    runner = FakeRunner().add("scancel", Result(("x",), 0, "", stderr))
    outcome = client_for(runner).cancel(["99999"])
    assert outcome.unknown == ("99999",) and outcome.signalled == ()


def test_cancel_does_not_repeat_an_ambiguous_signal() -> None:
    runner = FakeRunner().add("scancel", fail(TIMEOUT))
    with pytest.raises(SlurmCommandError) as info:
        client_for(runner).cancel(["5"], signal="USR1")
    assert info.value.kind is ErrorKind.AMBIGUOUS
    assert runner.count("scancel") == 1


def test_cancel_retries_a_controller_outage() -> None:
    down = (DATA / "22.05/squeue-controller-down.stderr").read_text()
    runner = FakeRunner().add("scancel", fail(down), Result(("x",), 0, "", ""))
    assert client_for(runner).cancel(["5"]).signalled == ("5",)
    assert runner.count("scancel") == 2
