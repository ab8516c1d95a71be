"""`status`, `history`, `cancel` and `logs -f` of a chain, against a scripted Slurm.

The chain's event log is a real file read through the runner (``cat``, ``tee -a``); Slurm's
answers are scripted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.errors import CommandError
from hpcjobs.jobs.chain import Chain, Event, ended_by_accounting, format_event, parse_chain
from hpcjobs.jobs.records import remember
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.slurm import backend
from tests.eventlines import line
from tests.fakes import FakeRunner, client_for, ok
from tests.unit.test_follow import _line

UNKNOWN = (
    Path(__file__).resolve().parents[1] / "data" / "slurm" / "22.05/squeue-unknown-id.stderr"
).read_text()


@dataclass
class SlurmAndFiles(FakeRunner):
    """Scripted Slurm; ``cat`` and ``tee`` really run, on the test's files."""

    tee_fails: bool = False

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        if argv[0] == "tee" and self.tee_fails:
            raise CommandError(argv, 1, "tee: chain-40.jsonl: Permission denied")
        if argv[0] in ("cat", "tee"):
            self.calls.append(list(argv))
            return LocalRunner().run(argv, stdin=stdin, check=check)
        return super().run(argv, stdin=stdin, timeout=timeout, check=check, env=env)


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> SlurmAndFiles:
    runner = SlurmAndFiles()
    monkeypatch.setattr(backend, "client_from_environment", lambda: client_for(runner))
    return runner


def _ev(job_id: str, kind: str, cause: str = "-", detail: str = "", **data: object) -> str:
    return line(job_id, kind, cause, detail, at=1000.0, **data)


def _chain(tmp_path: Path, root: str, *lines: str) -> Path:
    """A chain submitted from here: its index entry, and its event log."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    remember([root], tmp_path / "record.json", output_dir=str(out))
    log = out / f"chain-{root}.jsonl"
    log.write_text("".join(lines))
    return log


def _continued(tmp_path: Path) -> Path:
    """Chain 40: run 1 preempted, continued as job 42, which is pending."""
    return _chain(
        tmp_path,
        "40",
        _ev("40", "start", detail="checkpoint=-1", checkpoint=-1),
        _ev(
            "40",
            "requeue",
            "preemption",
            "continued as job 42",
            checkpoint=47,
            progress=47,
            how="continued",
            next="42",
        ),
    )


def _sacct(job_id: str, state: str, start: str = "2025-01-01T00:00:01") -> str:
    return (
        f"{job_id}|{job_id}|{state}|0:0|0:0|None|2025-01-01T00:00:00|2025-01-01T00:00:00|"
        f"{start}|2025-01-01T00:01:00|00:00:59|1|n1|batch|alice|train\n"
    )


def _sacct_by_id(records: dict[str, str]) -> object:
    def reply(argv: Sequence[str]) -> Result:
        wanted = argv[argv.index("-j") + 1].split(",")
        return ok("".join(records[j] for j in wanted if j in records))

    return reply


# ---- status --------------------------------------------------------------------------------


def test_status_of_a_chain_shows_root_current_and_runs(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _continued(tmp_path)
    slurm.add("squeue", ok(_line("42", "PENDING", "JobHeldUser")))
    result = CliRunner().invoke(cli, ["status", "40"])
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[-3:] == ["RESTARTS", "CHAIN", "RUNS"]
    assert row.split()[:3] == ["42", "train", "PENDING"] and row.split()[-3:] == ["0", "40", "1"]
    assert "job 40 continues as job 42" in result.stderr
    result = CliRunner().invoke(cli, ["status", "--json", "40"])
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["job_id"] == "42" and job["restarts"] == 0 and job["state"] == "PENDING"
    assert (job["chain_root"], job["chain_jobs"], job["runs"]) == ("40", ["40", "42"], 1)


def test_status_runs_counts_the_chain_and_slurm_restarts(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _chain(
        tmp_path,
        "40",
        _ev("40", "start"),
        _ev("40", "requeue", "preemption", "continued as job 42", how="continued", next="42"),
        _ev("42", "start"),
    )
    # Job 42 was requeued by Slurm once and runs again; its second run has not logged yet.
    slurm.add("squeue", ok(_line("42", "RUNNING", restarts=1, nodes="n1")))
    result = CliRunner().invoke(cli, ["status", "--json", "40"])
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["runs"] == 3 and job["chain_jobs"] == ["40", "42"]


def _growing(tmp_path: Path, joins: bool = False) -> None:
    """Chain 50 runs below its full size; its grower, job 53, waits for 3 nodes (``joins``: a
    helper allocation for 1 more node, which joins the job)."""
    _chain(
        tmp_path,
        "50",
        _ev("50", "start"),
        _ev(
            "50",
            "grower",
            detail="grower job 53 for job 50",
            grower="53",
            grower_for="50",
            size="1" if joins else "3",
            joins=joins,
        ),
    )


def test_status_says_why_a_chain_runs_below_its_full_size(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _growing(tmp_path)
    rows = _line("50", "RUNNING", nodes="n1") + _line("53", "PENDING", "Resources")
    slurm.add("squeue", ok(rows), ok(rows))
    result = CliRunner().invoke(cli, ["status", "50"])
    assert result.exit_code == 0, result.output
    *table, note = result.stdout.splitlines()
    assert [row.split()[0] for row in table[1:]] == ["50"]  # the grower only in the note
    assert note == (
        "job 50 runs below its full size; its grower job 53 waits for 3 nodes (PENDING: "
        "Resources): Slurm adds no nodes to this running job (it holds GPUs, or the site does "
        "not permit job expansion), so the chain grows once 3 nodes are free besides the 1 it "
        'holds (docs/requeue.md, "Growing back")'
    )
    # One query, for the job and its grower together.
    (squeue,) = [call for call in slurm.calls if call[0] == "squeue"]
    assert "50,53" in " ".join(squeue)
    result = CliRunner().invoke(cli, ["status", "--json", "50"])
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["grower"] == {
        "job_id": "53", "size": "3", "state": "PENDING", "reason": "Resources", "joins": False,
    }  # fmt: skip


def test_status_says_a_chain_waits_for_nodes_to_join_it(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _growing(tmp_path, joins=True)
    rows = _line("50", "RUNNING", nodes="n1") + _line("53", "PENDING", "Resources")
    slurm.add("squeue", ok(rows))
    result = CliRunner().invoke(cli, ["status", "50"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "job 50 runs below its full size; its grower job 53 waits for 1 more nodes (PENDING: "
        "Resources), which join the job once Slurm grants them (job expansion; "
        'docs/requeue.md, "Growing back")'
    )


def test_a_grower_whose_nodes_joined_the_job_is_neither_said_nor_asked_for(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    log = _chain(tmp_path, "50")
    _growing(tmp_path, joins=True)
    with log.open("a") as out:
        out.write(_ev("50", "requeue", "grow", how="in_job", joined=["n4"]) + _ev("50", "start"))
    rows = _line("50", "RUNNING", nodes="n1")
    slurm.add("squeue", ok(rows))
    result = CliRunner().invoke(cli, ["status", "50"])
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == ["50"]
    (squeue,) = [call for call in slurm.calls if call[0] == "squeue"]
    assert "53" not in " ".join(squeue) and not [c for c in slurm.calls if c[0] == "sacct"]


def test_a_grower_that_runs_is_the_chains_next_job_and_shown(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _growing(tmp_path)
    slurm.add("squeue", ok(_line("50", "RUNNING", nodes="n1") + _line("53", "RUNNING", nodes="n2")))
    result = CliRunner().invoke(cli, ["status", "50"])
    assert result.exit_code == 0, result.output
    assert [row.split()[0] for row in result.stdout.splitlines()[1:]] == ["50", "53"]


def test_a_grower_that_left_the_queue_is_neither_said_nor_unknown(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _growing(tmp_path)
    slurm.add("squeue", ok(_line("50", "RUNNING", nodes="n1"))).add("sacct", ok(""))
    result = CliRunner().invoke(cli, ["status", "--json", "50"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["unknown"] == [] and [job["grower"] for job in data["jobs"]] == [None]


def test_status_of_plain_jobs_has_no_chain_columns(slurm: SlurmAndFiles) -> None:
    slurm.add("squeue", ok(_line("7", "RUNNING", nodes="n1")))
    result = CliRunner().invoke(cli, ["status", "7"])
    assert result.stdout.splitlines()[0].split()[-1] == "RESTARTS"
    result = CliRunner().invoke(cli, ["status", "--json", "7"])
    (job,) = json.loads(result.stdout)["jobs"]
    assert job["chain_root"] is None and job["chain_jobs"] is None and job["runs"] is None


def test_status_of_an_unknown_id_prints_only_the_error(slurm: SlurmAndFiles) -> None:
    slurm.add("squeue", Result(("squeue",), 1, "", UNKNOWN)).add("sacct", ok(""))
    result = CliRunner().invoke(cli, ["status", "9999"])
    assert result.exit_code == 3
    assert result.stdout == "" and "No jobs." not in result.output
    assert "unknown job 9999" in result.stderr


# ---- history and cancel ----------------------------------------------------------------------


def test_history_of_a_chain_whose_pending_continuation_was_scancelled(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    _continued(tmp_path)
    records = {"40": _sacct("40", "COMPLETED"), "42": _sacct("42", "CANCELLED", start="None")}
    slurm.add("sacct", _sacct_by_id(records))  # type: ignore[arg-type]
    result = CliRunner().invoke(cli, ["history", "40"])
    assert result.exit_code == 0, result.output
    assert "still running" not in result.output
    assert "Result: fail (cancelled: job 42 is CANCELLED in Slurm" in result.output
    data = json.loads(CliRunner().invoke(cli, ["history", "--json", "40"]).stdout)
    assert data["final"]["result"] == "fail" and data["final_source"] == "accounting"
    assert data["final"]["detail"].startswith("cancelled")


def test_history_of_a_chain_still_going(slurm: SlurmAndFiles, tmp_path: Path) -> None:
    _continued(tmp_path)
    records = {"40": _sacct("40", "COMPLETED"), "42": _sacct("42", "PENDING", start="None")}
    slurm.add("sacct", _sacct_by_id(records))  # type: ignore[arg-type]
    result = CliRunner().invoke(cli, ["history", "40"])
    assert "Result: still running" in result.output


def test_history_says_unknown_steps_lost_not_zero(slurm: SlurmAndFiles, tmp_path: Path) -> None:
    """A start from scratch loses progress + 1 steps; a stop without progress, or a start from a
    checkpoint of unknown step, loses an unknown number: ``?`` in the table, null in JSON."""
    go = {"how": "continued"}
    _chain(
        tmp_path,
        "40",
        line("40", "start", at=1.0, checkpoint=-1),
        line("40", "requeue", "preemption", "continued as job 42", at=2.0, next="42",
             checkpoint=-1, progress=9, **go),
        line("42", "start", at=3.0, checkpoint=-1),
        line("42", "requeue", "timeout", "continued as job 44", at=4.0, next="44",
             checkpoint=12, progress=-1, **go),
        line("44", "start", at=5.0, checkpoint=12),
        line("44", "requeue", "preemption", "continued as job 46", at=6.0, next="46",
             checkpoint=20, progress=25, **go),
        line("46", "start", at=7.0, checkpoint=None),
        line("46", "requeue", "timeout", "continued as job 48", at=8.0, next="48",
             checkpoint=30, progress=31, **go),
    )  # fmt: skip
    records = {j: _sacct(j, "COMPLETED") for j in ("40", "42", "44", "46")}
    records["48"] = _sacct("48", "PENDING", start="None")
    slurm.add("sacct", _sacct_by_id(records))  # type: ignore[arg-type]
    result = CliRunner().invoke(cli, ["history", "40"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    rows = lines[lines.index("Interruptions:") + 2 :][:4]
    # RESUMED FROM STEP and STEPS LOST: from scratch, no progress, unknown checkpoint, pending.
    assert [row.split()[5:7] for row in rows] == [
        ["-", "10"], ["12", "?"], ["?", "?"], ["-", "-"]
    ]  # fmt: skip
    assert "  ?: unknown (the program reported no progress" in result.output
    data = json.loads(CliRunner().invoke(cli, ["history", "--json", "40"]).stdout)
    got = [
        (i["progress_at_stop"], i["resumed_from_step"], i["steps_lost"], i["how_code"])
        for i in data["interruptions"]
    ]
    assert got == [
        (9, -1, 10, "continued"),
        (None, 12, None, "continued"),
        (25, None, None, "continued"),
        (31, None, None, "continued"),
    ]


def test_cancel_logs_the_end_of_a_chain_whose_newest_job_was_pending(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    log = _continued(tmp_path)
    slurm.add("squeue", ok(_line("42", "PENDING", "JobHeldUser")))
    slurm.add("scancel", ok(""))
    result = CliRunner().invoke(cli, ["cancel", "40"])
    assert result.exit_code == 0, result.output
    assert "cancelled 40" in result.output and "cancelled 42" in result.output
    final = parse_chain(log.read_text()).final
    assert final is not None and (final.job_id, final.cause) == ("42", "fail")
    assert final.detail == "cancelled while job 42 was pending"
    assert slurm.count("squeue") == 1 and slurm.count("scancel") == 1
    # history now says so from the event log.
    records = {"40": _sacct("40", "COMPLETED"), "42": _sacct("42", "CANCELLED", start="None")}
    slurm.add("sacct", _sacct_by_id(records))  # type: ignore[arg-type]
    result = CliRunner().invoke(cli, ["history", "40"])
    assert "Result: fail (cancelled while job 42 was pending)" in result.output
    data = json.loads(CliRunner().invoke(cli, ["history", "--json", "40"]).stdout)
    assert data["final_source"] == "event log" and data["final"]["result"] == "fail"


def test_cancel_of_a_running_chain_leaves_the_log_to_its_script(
    slurm: SlurmAndFiles, tmp_path: Path
) -> None:
    log = _chain(tmp_path, "40", _ev("40", "start"))
    before = log.read_text()
    slurm.add("squeue", ok(_line("40", "RUNNING", nodes="n1"))).add("scancel", ok(""))
    result = CliRunner().invoke(cli, ["cancel", "40"])
    assert result.exit_code == 0 and log.read_text() == before


def test_cancel_with_a_signal_logs_nothing(slurm: SlurmAndFiles, tmp_path: Path) -> None:
    log = _continued(tmp_path)
    before = log.read_text()
    slurm.add("scancel", ok(""))
    result = CliRunner().invoke(cli, ["cancel", "-s", "USR2", "40"])
    assert result.exit_code == 0 and log.read_text() == before
    assert slurm.count("squeue") == 0


def test_cancel_warns_when_the_log_cannot_be_written(slurm: SlurmAndFiles, tmp_path: Path) -> None:
    _continued(tmp_path)
    slurm.add("squeue", ok(_line("42", "PENDING"))).add("scancel", ok(""))
    slurm.tee_fails = True
    result = CliRunner().invoke(cli, ["cancel", "40"])
    assert result.exit_code == 0 and "cancelled 42" in result.output
    assert "could not log the end of chain 40" in result.stderr


def test_ended_by_accounting_only_for_cancelled() -> None:
    chain = parse_chain(
        _ev("40", "start") + _ev("40", "requeue", "timeout", "continued as job 42", next="42")
    )
    end = ended_by_accounting(chain, "42", "CANCELLED")
    assert end is not None and (end.event, end.cause, end.job_id) == ("end", "fail", "42")
    for state in ("PENDING", "RUNNING", "FAILED", "PREEMPTED", "NODE_FAIL", "COMPLETED"):
        assert ended_by_accounting(chain, "42", state) is None
    finished = Chain([*chain.events, Event(1.0, "42", 0, "end", "finish", "completed")])
    assert ended_by_accounting(finished, "42", "CANCELLED") is None


def test_event_lines_round_trip() -> None:
    event = Event(1796013732.335, "42_3", 2, "end", "fail", "a\ttab and\na newline")
    (back,) = parse_chain(format_event(event)).events
    assert back == event
    assert parse_chain(_ev("1", "start") * 3).starts == 3


# ---- logs -f ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "shown"), [("None", "pending;"), ("Priority", "pending (Priority);")]
)
def test_logs_follow_of_a_pending_job_names_a_real_reason_only(
    slurm: SlurmAndFiles,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    reason: str,
    shown: str,
) -> None:
    log = tmp_path / "x-50.out"
    pending = f"JobId=50 JobName=x JobState=PENDING Reason={reason} StdOut={log}\n"
    done = f"JobId=50 JobName=x JobState=COMPLETED StdErr={log}.err StdOut={log}\n"
    slurm.add("scontrol", ok(pending), ok(done))
    slurm.add("squeue", ok("50|50|50|N/A|COMPLETED|None|n1|0:02|1|0|batch|alice|x|\n"))
    log.write_text("ran\n")
    monkeypatch.setattr("hpcjobs.cli.logs.time.sleep", lambda s: None)
    monkeypatch.setattr("hpcjobs.jobs.follow.time.sleep", lambda s: None)
    result = CliRunner().invoke(cli, ["logs", "-f", "50"])
    assert result.exit_code == 0, result.output
    assert f"==> job 50 is {shown}" in result.stderr
    assert "(None)" not in result.stderr
