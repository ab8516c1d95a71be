"""How the scale benchmark splits a recovery (tests/scale/phases.py): pure arithmetic on the
chain's event log."""

from __future__ import annotations

import pytest

from hpcjobs.contract.eventlog import parse
from hpcjobs.jobs.chain import Chain
from tests.eventlines import line
from tests.scale.phases import boundaries, durations, parts


def _chain(*lines: str) -> Chain:
    return Chain(parse("".join(lines)))


def test_a_crash_splits_into_teardown_classify_and_the_decisions_parts() -> None:
    took = {"agents_end": 1.0, "nodes": 0.05, "steps_end": 0.01, "release": 0.2}
    chain = _chain(
        line("7", "start", at=100.0),
        line("7", "fault", "infrastructure", at=105.5, exited=105.4),
        line("7", "requeue", "infrastructure", at=107.0, how="in_job", took=took),
        line("7", "start", at=107.1),
    )
    ends = boundaries(chain, 0, 100.5, {})
    assert durations(ends)["detect"] == pytest.approx(5.0)
    assert durations(ends)["decide"] == pytest.approx(1.5)
    assert parts(chain, 0, 100.5) == pytest.approx({"teardown": 4.9, "classify": 0.1, **took})


def test_what_the_log_does_not_say_is_left_out() -> None:
    chain = _chain(
        line("7", "fault", "stall", at=50.0, exited=None),
        line("7", "requeue", "stall", at=51.0, how="continued"),
    )
    assert parts(chain, 0, 10.0) == {}
