"""Linux cpulist and Slurm time syntax."""

from __future__ import annotations

import pytest

from hpcjobs.config.cpulist import format_cpulist, parse_cpulist
from hpcjobs.contract.slurmtime import format_slurm_time, parse_slurm_time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", [0]),
        ("0-3,8", [0, 1, 2, 3, 8]),
        (" 8 , 0-1 ", [0, 1, 8]),
        ("0-7:2", [0, 2, 4, 6]),
        ("0-1,1-2", [0, 1, 2]),
        ("0-55,112-167", [*range(56), *range(112, 168)]),
    ],
)
def test_parse_cpulist(text: str, expected: list[int]) -> None:
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must not be empty"),
        ("a", "invalid cpulist item 'a'"),
        ("0-3;8", "invalid cpulist item"),
        ("3-0", "runs backwards"),
        ("0-7:0", "stride"),
        ("0,,1", "invalid cpulist item ''"),
        ("99999999", "above"),
        ("-1", "invalid cpulist item"),
    ],
)
def test_parse_cpulist_rejects(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_cpulist(text)
    assert fragment in str(info.value)


def test_format_cpulist_round_trips() -> None:
    cpus = [0, 1, 2, 3, 8, 10, 11]
    assert format_cpulist(cpus) == "0-3,8,10-11"
    assert parse_cpulist(format_cpulist(cpus)) == cpus
    assert format_cpulist([]) == ""
    assert format_cpulist([5, 5, 4]) == "4-5"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800),
        ("30:15", 1815),
        ("01:00:00", 3600),
        ("48:00:00", 172800),
        ("2-00:00:00", 172800),
        ("1-12", 129600),
        ("1-00:30", 88200),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_parse_slurm_time(text: str, seconds: int | None) -> None:
    assert parse_slurm_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1h", "1-25:00:00", "00:61", "01:00:60", "-1", "1:2:3:4"])
def test_parse_slurm_time_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_slurm_time(text)


def test_format_slurm_time() -> None:
    assert format_slurm_time(3600) == "01:00:00"
    assert format_slurm_time(172800 + 61) == "2-00:01:01"
    assert format_slurm_time(None) == "UNLIMITED"
