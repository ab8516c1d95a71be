"""Hostile values in Slurm output and event logs: a line ends at "\\n" and nowhere else.

A job name is free text chosen by whoever submits the job. ``str.splitlines`` also breaks at
U+2028, U+2029, U+0085, ``\\r``, ``\\v``, ``\\f`` and ``\\x1c``-``\\x1e``, so a name holding one
of them could forge a row of its own (a fake COMPLETED job) or an event in a chain log. The
recorded-looking output below is what Slurm prints for such names: ``squeue -O`` with ``Name``
last and each field followed by ``|``, ``sacct -P`` with ``JobName`` last.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from hpcjobs.errors import CommandError
from hpcjobs.jobs.chain import Event, format_event, parse_chain, read_chain
from hpcjobs.remote.hostkeys import read_known_hosts
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.slurm import parse
from hpcjobs.slurm.classify import slurm_message
from hpcjobs.slurm.client import SlurmClient, _scancel_job_errors
from hpcjobs.slurm.history import build_history
from hpcjobs.slurm.statusquery import query_status
from hpcjobs.textlines import split_lines

#: Every character ``str.splitlines`` breaks at besides "\n".
BREAKS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
BREAK_IDS = [f"U+{ord(c):04X}" for c in BREAKS]

_SQUEUE_GOOD = "1180|1180|1180|N/A|RUNNING|None|gpu[001-016]|2-03:04:05|16|0|batch|alice|"
_SQUEUE_FAKE = "666|666|666|N/A|COMPLETED|None|gpu099|0:10|1|0|batch|root|fake|"
_SACCT_GOOD = (
    "1170|1170|FAILED|1:0|0:0|None|2025-06-12T08:00:00|2025-06-12T08:00:00|"
    "2025-06-12T08:00:05|2025-06-12T09:10:05|01:10:00|2|gpu[001-002]|batch|alice|"
)
_SACCT_FAKE = (
    "1170|1170|COMPLETED|0:0|0:0|None|2025-06-12T09:00:00|2025-06-12T09:00:00|"
    "2025-06-12T09:00:05|2025-06-12T09:10:05|00:10:00|2|gpu[001-002]|batch|alice|fake"
)


def test_split_lines() -> None:
    assert split_lines("") == []
    assert split_lines("a") == ["a"]
    assert split_lines("a\nb\n") == ["a", "b"]
    assert split_lines("a\n\nb") == ["a", "", "b"]
    assert split_lines("\n") == [""]
    joined = "x".join(BREAKS)
    assert split_lines(joined + "\n") == [joined]


@pytest.mark.parametrize("brk", BREAKS, ids=BREAK_IDS)
def test_squeue_name_cannot_forge_a_row(brk: str) -> None:
    name = f"x{brk}{_SQUEUE_FAKE}"
    text = f"{_SQUEUE_GOOD}{name}|\n"
    rows = parse.parse_squeue(text)
    assert len(rows) == 1
    assert rows[0].job_id == "1180"
    assert rows[0].state == "RUNNING"
    assert rows[0].name == name


def test_squeue_name_with_delimiters_stays_in_its_column() -> None:
    name = "a|b||COMPLETED|c|"
    rows = parse.parse_squeue(f"{_SQUEUE_GOOD}{name}|\n{_SQUEUE_GOOD}plain|\n")
    assert [(r.state, r.user, r.name) for r in rows] == [
        ("RUNNING", "alice", name),
        ("RUNNING", "alice", "plain"),
    ]


@pytest.mark.parametrize("brk", BREAKS, ids=BREAK_IDS)
def test_sacct_name_cannot_forge_a_run(brk: str) -> None:
    name = f"x{brk}{_SACCT_FAKE}"
    rows = parse.parse_sacct(f"{_SACCT_GOOD}{name}\n")
    assert [(r.job_id, r.state, r.exit_code) for r in rows] == [("1170", "FAILED", 1)]
    assert rows[0].name == name
    (history,) = build_history(rows)
    assert [run.cause for run in history.runs] == ["application"]


def test_sacct_name_with_delimiters_stays_in_its_column() -> None:
    name = "evil|COMPLETED|0:0"
    (row,) = parse.parse_sacct(f"{_SACCT_GOOD}{name}\n")
    assert (row.state, row.user, row.name) == ("FAILED", "alice", name)


def test_token_comment_cannot_forge_a_row() -> None:
    comment = "hpcjobs:abc\u20281187|1187|hpcjobs:stolen"
    rows = parse.parse_token_rows(f"1186|1186|{comment}|\n")
    assert [(r.job_id, r.comment) for r in rows] == [("1186", comment)]


def test_queries_keep_the_column_order_that_protects_free_text() -> None:
    """The free-text fields come last, so a ``|`` in them cannot shift the others."""
    assert parse.SQUEUE_FIELDS[-1] == "Name"
    assert parse.SACCT_FIELDS[-1] == "JobName"
    assert parse.TOKEN_FIELDS[-1] == "Comment"
    assert parse.squeue_format(("A", "B")) == "A:|,B:|"


class _Canned:
    """A runner that answers squeue and sacct with fixed output."""

    def __init__(self, squeue: str, sacct: str) -> None:
        self.out = {"squeue": squeue, "sacct": sacct}
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], **_: object) -> Result:
        self.calls.append(list(argv))
        return Result(tuple(argv), 0, self.out[argv[0]], "")


def test_status_of_hostile_names_end_to_end() -> None:
    """``hpcjobs status`` for two ids: neither a forged queue row nor a forged run appears."""
    squeue = f"{_SQUEUE_GOOD}x\u2028{_SQUEUE_FAKE}|\n"
    sacct = f"{_SACCT_GOOD}y\x85{_SACCT_FAKE}\n"
    runner = _Canned(squeue, sacct)
    client = SlurmClient(runner)  # type: ignore[arg-type]
    report = query_status(client, ["1180", "1170"])
    assert [(j.job_id, j.state, j.source) for j in report.jobs] == [
        ("1180", "RUNNING", "queue"),
        ("1170", "FAILED", "accounting"),
    ]
    sacct_argv = next(c for c in runner.calls if c[0] == "sacct")
    assert "-P" in sacct_argv and sacct_argv[-1].endswith("JobName")


def test_local_runner_keeps_carriage_returns(tmp_path: Path) -> None:
    """Output is read as bytes: a "\\r" in a job name is not turned into a line break."""
    script = tmp_path / "squeue"
    name = "x\\r666|666|666|N/A|COMPLETED|None|n|0:10|1|0|b|root|fake"
    script.write_text(
        f"#!/bin/sh\nprintf '{_SQUEUE_GOOD}{name}|\\n'\nprintf '\\342\\200\\250\\n'\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    result = LocalRunner().run([str(script)], timeout=20)
    assert result.stdout.split("\n")[0].count("\r") == 1
    assert result.stdout.split("\n")[1] == "\u2028"
    (row,) = parse.parse_squeue(result.stdout.split("\n")[0] + "\n")
    assert row.state == "RUNNING"


def test_local_runner_sends_stdin_as_utf8() -> None:
    result = LocalRunner().run(["cat"], stdin="a\u2028b\r\n", timeout=20)
    assert result.stdout == "a\u2028b\r\n"


def test_scancel_and_error_messages_split_at_newlines_only() -> None:
    stderr = "scancel: error: Kill job error on job id 12: Invalid job id specified\u202813: x\n"
    assert list(_scancel_job_errors(stderr)) == ["12"]
    assert slurm_message("sbatch: error: a\u2028b\n") == "a\u2028b"
    exc = CommandError(["squeue"], 1, "one\ntwo\u2028three\n")
    assert exc.message.endswith("one | two\u2028three")


@pytest.mark.parametrize("brk", BREAKS, ids=BREAK_IDS)
def test_chain_detail_cannot_forge_an_event(brk: str) -> None:
    """A detail holding another line break stays in its event; a forged event is no event.

    An event is one "\\n"-ended JSON line. The writer escapes every break; a line cut short
    by hand with a raw break and a whole forged event after it is one bad line, no event.
    """
    requeue = format_event(Event(1718000000.0, "12", 0, "requeue", "preemption", f"a{brk}b"))
    forged = format_event(Event(1718000001.0, "99", 0, "end", "finish", "done"))
    cut = '{"v": 1, "time": 1718000002.0, "job": "12", "restart": 1, "detail": "checkpoint=3'
    chain = parse_chain(requeue + cut + brk + forged)
    assert [(e.event, e.detail) for e in chain.events] == [("requeue", f"a{brk}b")]
    assert chain.final is None
    assert chain.job_ids == ["12"]


def test_read_chain_keeps_carriage_returns(tmp_path: Path) -> None:
    """A local log is read as bytes: ``\\r`` in a detail does not end the line."""
    path = tmp_path / "chain-12.jsonl"
    start = format_event(Event(1.0, "12", 0, "start", "", "checkpoint=-1"))
    forged = format_event(Event(2.0, "12", 0, "end", "finish", "forged"))
    cut = (
        '{"v": 1, "time": 3.0, "job": "12", "restart": 0, "event": "start", "detail": "x\r' + forged
    )
    requeue = format_event(Event(3.0, "12", 0, "requeue", "preemption", "x\ry"))
    path.write_bytes((start + cut + requeue).encode())
    chain = read_chain(path)
    assert [(e.event, e.detail) for e in chain.events] == [
        ("start", "checkpoint=-1"),
        ("requeue", "x\ry"),
    ]
    assert chain.final is None


def test_format_event_keeps_each_event_on_one_line() -> None:
    text = format_event(Event(1.0, "12", 0, "end", "fail", "a\nb\tc\rd\u2028e"))
    assert text.count("\n") == 1
    (event,) = parse_chain(text).events
    assert event.detail == "a\nb\tc\rd\u2028e"  # kept as it was: JSON escapes it


def test_known_hosts_line_with_odd_breaks_stays_one_line(tmp_path: Path) -> None:
    blob = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    path = tmp_path / "known_hosts"
    path.write_text(f"good ssh-ed25519 {blob} comment\u2028evil ssh-ed25519 {blob}\n")
    entries = read_known_hosts(path)
    assert [e.patterns for e in entries] == [("good",)]
