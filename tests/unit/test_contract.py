"""The contract both sides share (hpcjobs/contract/): Slurm's durations read by one parser,
job states by one table, and the package stays standard library only."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hpcjobs.contract.slurmstates import has_ended
from hpcjobs.contract.slurmtime import parse_duration


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1-02:03:04", 93784),
        ("02:03:04", 7384),
        ("3:04", 184),
        ("59", None),  # a bare number is a time limit's minutes, never a duration
        ("0:00", 0),
        ("12:34", 754),
        ("00:01:17", 77),
        ("00:01.500", 1),
        ("2-00:00:10", 172810),
        (" 10:00\n", 600),
        ("UNLIMITED", None),
        ("NOT_SET", None),
        ("INVALID", None),
        ("", None),
        ("1:2:3:4", None),
        ("1-x:00", None),
    ],
)
def test_one_duration_parser(text: str, value: int | None) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize(
    ("state", "ended"),
    [
        ("", False),
        ("RUNNING", False),
        ("PENDING", False),
        ("COMPLETING", False),
        ("SUSPENDED", False),
        ("REQUEUED", False),
        ("REQUEUE_HOLD", False),
        ("SIGNALING", False),
        ("STAGE_OUT", False),
        ("COMPLETED", True),
        ("CANCELLED by 1000", True),
        ("NODE_FAIL", True),
        ("PREEMPTED", True),
        ("TIMEOUT", True),
        ("FAILED", True),
        ("BOOT_FAIL", True),
        ("COMPLETED+", True),
        ("SPECIAL_EXIT", False),
    ],
)
def test_has_ended(state: str, ended: bool) -> None:
    assert has_ended(state) is ended


def test_the_contract_needs_the_standard_library_only() -> None:
    code = (
        "import sys\n"
        "import hpcjobs.contract.causes, hpcjobs.contract.eventlog, hpcjobs.contract.jobenv\n"
        "import hpcjobs.contract.names, hpcjobs.contract.slurmcmd, hpcjobs.contract.slurmstates\n"
        "import hpcjobs.contract.slurmtext, hpcjobs.contract.slurmtime\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'click', 'yaml', 'jinja2', 'submitit', 'paramiko', 'tenacity')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_time_stamps_are_read_one_way() -> None:
    from hpcjobs.contract.slurmtime import epoch, parse_timestamp

    stamp = parse_timestamp("2026-12-07T02:30:00")
    assert stamp is not None and (stamp.hour, stamp.minute) == (2, 30)
    assert epoch("2026-12-07T02:30:00") == stamp.timestamp()
    for unset in ("Unknown", "None", "", "N/A", "not a time"):
        assert parse_timestamp(unset) is None and epoch(unset) is None
