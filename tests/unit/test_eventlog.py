"""The event log's format and its one parser: JSON lines with a version, fields per event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcjobs.contract.eventlog import (
    FIELDS,
    FORMAT,
    HOWS,
    Chain,
    ChainView,
    Event,
    EventLog,
    encode,
    parse,
)
from hpcjobs.jobs.chain import parse_chain
from tests.eventlines import line

DOCS = Path(__file__).parents[2] / "docs" / "requeue.md"


def test_a_line_is_one_json_object_with_a_version() -> None:
    text = line("7", "requeue", "timeout", "continued as job 9", at=2.5, how="continued", next="9")
    record = json.loads(text)
    assert text.endswith("\n") and text.count("\n") == 1
    assert record == {
        "v": FORMAT,
        "time": 2.5,
        "job": "7",
        "restart": 0,
        "event": "requeue",
        "cause": "timeout",
        "detail": "continued as job 9",
        "how": "continued",
        "next": "9",
    }


def test_no_character_breaks_a_line() -> None:
    detail = "a\nb\tc\rd\u2028e\u0085f\x1cg"
    text = encode(Event(1.0, "7", 0, "end", "fail", detail))
    assert text.isascii() and text.count("\n") == 1
    (event,) = parse(text)
    assert event.detail == detail


def test_a_field_may_not_reuse_a_common_name() -> None:
    with pytest.raises(ValueError, match="job"):
        encode(Event(1.0, "7", 0, "fault", "stall", "x", {"job": "8"}))


def test_a_newer_format_is_read_as_far_as_it_is_known() -> None:
    newer = json.dumps(
        {"v": FORMAT + 1, "time": 3, "job": "7", "restart": 0, "event": "start", "cause": "-"}
        | {"checkpoint": 5, "gpus_per_node": 8}
    )
    (event,) = parse(newer + "\n")
    assert (event.detail, event.number("checkpoint"), event.data["gpus_per_node"]) == ("", 5, 8)


@pytest.mark.parametrize(
    "bad",
    [
        '{"v": 1, "time": 1, "job": "7", "restart": 0, "event": "start"',  # cut by a crash
        '{"time": 1, "job": "7", "restart": 0, "event": "start", "cause": "-"}',  # no version
        '{"v": 1, "time": "1", "job": "7", "restart": 0, "event": "start", "cause": "-"}',
        '{"v": 1, "time": 1, "job": 7, "restart": 0, "event": "start", "cause": "-"}',
        '["v", 1]',
        "1.0\t7\tx\tstart\t-\t",  # an older line with a bad restart count
        "garbage",
    ],
)
def test_malformed_lines_are_skipped(bad: str) -> None:
    good = line("7", "start", checkpoint=-1)
    assert [e.event for e in parse(good + bad + "\n" + good)] == ["start", "start"]


def test_wrong_types_read_as_missing() -> None:
    (event,) = parse(line("7", "start", checkpoint="5", nodes="n1"))
    assert event.number("checkpoint") is None and event.names("nodes") == []
    assert parse(line("7", "start", checkpoint=True))[0].number("checkpoint") is None


def test_what_a_chain_says() -> None:
    chain = parse_chain(
        line("5", "start", checkpoint=-1)
        + line("5", "standby", standby="6", standby_for="5")
        + line("5", "exclude", "stall", nodes=["n2"], released=[], limit=1)
        + line("5", "requeue", "stall", how="continued", next="6", checkpoint=3, progress=4)
        + line("6", "start", checkpoint=3)
        + line("6", "standby", standby="7_2", standby_for="6")
        + line("6", "handoff", next="8", nodes=["n2"])
        + line("8", "start", checkpoint=3)
        + line("8", "end", "finish", "completed")
    )
    assert chain.job_ids == ["5", "6", "8"]
    assert chain.standby_ids == ["6", "7_2"] and chain.standby_for("6") == "7_2"
    assert chain.predecessor("6") == "5" and chain.predecessor("8") == "6"
    assert chain.predecessor("5") is None
    assert chain.names_job("7") and chain.names_job("8") and not chain.names_job("9")
    assert chain.continued_as("6") and not chain.continued_as("7_2")
    assert chain.ended_after_standby("7_2") and chain.excluded() == ["n2"]
    assert chain.count("start") == 3 and chain.count("requeue", "stall") == 1
    (stop,) = chain.interruptions()
    assert (stop.job_id, stop.resumed_job_id, stop.steps_lost, stop.excluded) == (
        "5",
        "6",
        1,
        ["n2"],
    )


def test_the_supervisor_appends_private_single_writes(tmp_path: Path) -> None:
    log = EventLog(str(tmp_path / "chain-5.jsonl"), "5", 1)
    log.append("start", "-", "checkpoint=-1", checkpoint=-1, nodelist="n1", batch="n1")
    log.append("end", "finish", "completed", when=9.0)
    assert (tmp_path / "chain-5.jsonl").stat().st_mode & 0o777 == 0o600
    first, last = log.read().events
    assert (first.restart, first.text("batch"), last.time) == (1, "n1", 9.0)


def test_the_docs_list_every_event_and_its_fields() -> None:
    text = DOCS.read_text()
    for kind, fields in FIELDS.items():
        row = [ln for ln in text.splitlines() if ln.startswith(f"| `{kind}` |")]
        assert row, f"docs/requeue.md has no row for the {kind} event"
        for name in fields:
            assert f"`{name}`" in row[0], f"docs/requeue.md: {kind} lacks {name}"
    for how in HOWS:
        assert f"`{how}`" in text


def test_the_chain_view_reads_only_what_was_added(tmp_path: Path) -> None:
    """The supervisor's view of the log: each look parses the whole lines added since the last
    one; a line still being written waits; a log replaced (set aside) is read from its start."""
    path = tmp_path / "chain-7.jsonl"
    view = ChainView(str(path))
    assert view.current().events == []
    path.write_text(line("7", "start", checkpoint=-1))
    chain = view.current()
    assert [e.event for e in chain.events] == ["start"]
    requeue = line("7", "requeue", "timeout", "continued as job 9", how="continued", next="9")
    with path.open("a") as handle:
        handle.write(requeue[:20])
    assert [e.event for e in view.current().events] == ["start"]
    with path.open("a") as handle:
        handle.write(requeue[20:])
    assert view.current() is chain and chain.continued_as("9")
    path.rename(tmp_path / "old")
    path.write_text(line("9", "start", checkpoint=3) * 2)
    assert [e.job_id for e in view.current().events] == ["9", "9"]


def test_why_each_run_stopped_is_read_one_way() -> None:
    """A requeue names the run it ended (a standby's names its predecessor's), a run that went
    on inside its job stopped nothing, a move to a grower stops its run, an end speaks for its
    own run where nothing else did."""
    chain = Chain(
        parse(
            line("5", "start", checkpoint=-1)
            + line("5", "requeue", "stall", "again", how="in_job", stopped_run=0)
            + line("6", "requeue", "node_failure", "took over", how="took_over",
                   next="6", stopped_job="5")
            + line("6", "handoff", "grow", "continued as job 7", next="7", nodes=[])
            + line("7", "end", "finish", "completed")
        )
    )  # fmt: skip
    stops = {key: (e.event, e.cause) for key, e in chain.stops().items()}
    assert stops == {
        ("5", 0): ("requeue", "node_failure"),
        ("6", 0): ("handoff", "grow"),
        ("7", 0): ("end", "finish"),
    }
