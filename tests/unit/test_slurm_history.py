"""Run history from sacct --duplicates, and the status query built on squeue + sacct."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.slurm import parse
from hpcjobs.slurm.classify import UnknownJobError
from hpcjobs.slurm.history import build_history, classify_run, job_history
from hpcjobs.slurm.statusquery import query_status, row_matches
from tests.fakes import FakeRunner, client_for, fail, ok

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
SACCT22 = (DATA / "22.05/sacct-duplicates.txt").read_text()
SACCT24 = (DATA / "24.11/sacct-duplicates.txt").read_text()
IDS = dict(line.split("=") for line in (DATA / "22.05/jobs.txt").read_text().split())


def _history(text: str) -> dict[str, list[tuple[str, str]]]:
    return {
        h.job_id: [(r.state, r.cause) for r in h.runs]
        for h in build_history(parse.parse_sacct(text))
    }


def test_causes_from_recorded_22_05() -> None:
    got = _history(SACCT22)
    assert got[IDS["preempted"]] == [("PREEMPTED", "preemption"), ("COMPLETED", "completed")]
    assert got[IDS["nodefail"]] == [("NODE_FAIL", "node_failure"), ("COMPLETED", "completed")]
    assert got[IDS["selfrequeue"]] == [("REQUEUED", "requeued"), ("COMPLETED", "completed")]
    assert got[IDS["timeout"]] == [("TIMEOUT", "timeout")]
    assert got[IDS["fail"]] == [("FAILED", "application")]
    assert got[IDS["cancel"]] == [("CANCELLED", "cancelled")]
    assert got[IDS["ok"]] == [("COMPLETED", "completed")]
    assert got["23_1"] == [("FAILED", "application")]


def test_a_run_slurm_resized_is_one_run() -> None:
    """Spare nodes: a job that lost a node (142) or released one (146) has a RESIZING record
    for its first size, with a submit time of its own (recorded on 22.05)."""
    histories = build_history(parse.parse_sacct((DATA / "22.05/sacct-resized.txt").read_text()))
    assert {h.job_id: [(r.state, r.cause) for r in h.runs] for h in histories} == {
        "142": [("COMPLETED", "completed")],
        "146": [("COMPLETED", "completed")],
    }
    (run,) = histories[0].runs
    assert (run.elapsed_s, run.nodes, run.nodelist, histories[0].restarts) == (17, 2, "n[1,3]", 0)
    assert run.submit is not None and run.submit.isoformat() == "2026-12-03T06:11:01"
    assert run.start is not None and run.start.isoformat() == "2026-12-03T06:11:04"


@pytest.mark.parametrize("release", ["24.11/recorded", "26.05/recorded"])
def test_a_run_slurm_resized_is_one_run_on_later_releases(release: str) -> None:
    """Job 110 lost a node (Slurm took it out), 112 released one (hpcjobs); on 24.11 the
    record after a release starts at the job's start and counts its whole time (recorded)."""
    text = (DATA / release / "sacct-resized.txt").read_text()
    runs = {h.job_id: h.runs for h in build_history(parse.parse_sacct(text))}
    assert [len(r) for r in runs.values()] == [1, 1]
    for (run,) in runs.values():
        assert run.start is not None and run.end is not None and run.elapsed_s is not None
        assert run.elapsed_s == (run.end - run.start).total_seconds(), run


def test_gap_before_the_next_run() -> None:
    (hist,) = [h for h in build_history(parse.parse_sacct(SACCT22)) if h.job_id == IDS["preempted"]]
    first, second = hist.runs
    # Preempted at 03:49:37, running again at 03:51:58 (the ~121 s requeue hold + scheduling).
    assert first.gap_to_next_s == 141.0 and second.gap_to_next_s is None
    assert (first.index, second.index, hist.restarts) == (0, 1, 1)
    data = hist.to_dict()
    assert data["runs"][0]["start"] == "2026-11-30T03:49:12"
    assert data["runs"][0]["cause"] == "preemption" and data["restarts"] == 1


def test_24_11_four_runs_and_details() -> None:
    histories = {h.job_id: h for h in build_history(parse.parse_sacct(SACCT24))}
    runs = histories["1171"].runs
    assert [r.cause for r in runs] == ["preemption", "node_failure", "requeued", "running"]
    assert [r.gap_to_next_s for r in runs] == [121.0 + 55.0, 180.0, 150.0, None]
    assert histories["1174"].runs[0].detail == "out of memory"
    assert histories["1173"].runs[0].detail == "exit code 1"
    assert histories["1175"].runs[0].detail == "by uid 1000"
    assert histories["1176_[2-9]"].runs[0].cause == "pending"


def test_requeued_by_hpcjobs_is_marked() -> None:
    rows = parse.parse_sacct(SACCT24)
    histories = build_history(rows, hpcjobs_requeues={"1171": {2}})
    runs = next(h for h in histories if h.job_id == "1171").runs
    assert runs[2].cause == "requeued_by_hpcjobs"
    row = next(r for r in rows if r.state == "REQUEUED")
    assert classify_run(row) == ("requeued", "")


def test_job_history_one_sacct_call_and_unknown() -> None:
    runner = FakeRunner().add("sacct", ok(SACCT24))
    assert job_history(client_for(runner), "1171")
    assert runner.count("sacct") == 1 and "-D" in runner.calls[0]
    runner = FakeRunner().add("sacct", ok(""))
    with pytest.raises(UnknownJobError) as info:
        job_history(client_for(runner), "99999")
    assert info.value.exit_code == 3 and "99999" in info.value.message


@pytest.mark.parametrize(
    ("wanted", "job_id", "raw", "hit"),
    [
        ("12", "12", "12", True),
        ("12", "12_3", "15", True),
        ("12_3", "12_3", "15", True),
        ("12_5", "12_[3-9%2]", "12", True),
        ("12_4", "12_[3-9:2]", "12", False),
        ("15", "12_3", "15", True),
        ("1", "12", "12", False),
        ("12_2", "12_[3-9]", "12", False),
    ],
)
def test_row_matches(wanted: str, job_id: str, raw: str, hit: bool) -> None:
    assert row_matches(wanted, job_id, raw) is hit


def test_status_live_jobs_need_one_call() -> None:
    text = (DATA / "24.11/squeue-all.txt").read_text()
    runner = FakeRunner().add("squeue", ok(text))
    report = query_status(client_for(runner), ["1180", "1182"])
    assert len(runner.calls) == 1
    assert {j.job_id for j in report.jobs} >= {"1180", "1182_0", "1182_[3-99%8]"}
    assert report.unknown == []


def test_status_finished_jobs_need_a_second_call_and_count_restarts() -> None:
    runner = FakeRunner().add("squeue", ok("")).add("sacct", ok(SACCT22))
    ids = [IDS["preempted"], IDS["ok"], "99999"]
    report = query_status(client_for(runner), ids)
    assert len(runner.calls) == 2
    jobs = {j.job_id: j for j in report.jobs}
    assert jobs[IDS["preempted"]].restarts == 1 and jobs[IDS["preempted"]].state == "COMPLETED"
    assert jobs[IDS["ok"]].restarts == 0 and jobs[IDS["ok"]].source == "accounting"
    assert report.unknown == ["99999"]


def test_status_without_accounting_falls_back_to_the_queue() -> None:
    disabled = (DATA / "24.11/sacct-disabled.stderr").read_text()
    runner = FakeRunner().add("squeue", ok("")).add("sacct", fail(disabled))
    report = query_status(client_for(runner), ["5"])
    assert report.unknown == ["5"] and report.accounting is False


def test_status_mine_is_one_squeue() -> None:
    runner = FakeRunner().add("squeue", ok((DATA / "22.05/squeue-all.txt").read_text()))
    report = query_status(client_for(runner), None, mine=True)
    assert len(runner.calls) == 1 and "--me" in runner.calls[0] and report.jobs


@pytest.mark.parametrize(("state", "shown"), [("COMPLETED", ""), ("PENDING", "Dependency")])
def test_status_of_an_ended_job_shows_no_reason_it_once_waited_for(state: str, shown: str) -> None:
    """Accounting keeps the last reason a job waited for: a standby that took over and
    completed still says 'Dependency'."""
    from hpcjobs.slurm.parse import AcctRow
    from hpcjobs.slurm.statusquery import from_accounting

    row = AcctRow(
        job_id="7", raw_id="7", state=state, cancelled_by=None, exit_code=0, exit_signal=None,
        derived_exit_code=0, reason="Dependency", submit=None, eligible=None, start=None,
        end=None, elapsed_s=60, nodes=1, nodelist="n1", partition="batch", user="u", name="j",
    )  # fmt: skip
    assert from_accounting([row]).reason == shown
