"""Parsing ``--host [user@]host[:port]``."""

from __future__ import annotations

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.remote.hostspec import HostSpec, format_host_port, parse_host_spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("login1", HostSpec("login1")),
        ("login1.cluster.example", HostSpec("login1.cluster.example")),
        ("alice@login1", HostSpec("login1", user="alice")),
        ("alice@login1:2222", HostSpec("login1", user="alice", port=2222)),
        ("login_1:22", HostSpec("login_1", port=22)),
        ("10.0.0.5:2200", HostSpec("10.0.0.5", port=2200)),
        ("bob.smith@10.0.0.5", HostSpec("10.0.0.5", user="bob.smith")),
        ("[::1]:2222", HostSpec("::1", port=2222)),
        ("alice@[fe80::1%eth0]", HostSpec("fe80::1%eth0", user="alice")),
        ("fe80::1", HostSpec("fe80::1")),
    ],
)
def test_valid_specs(text: str, expected: HostSpec) -> None:
    assert parse_host_spec(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " login1",
        "login1 ",
        "log in1",
        "login1\n",
        "login1;rm -rf /",
        "-oProxyCommand=evil",
        "$(id)",
        "alice@",
        "@login1",
        "al ice@login1",
        "alice@bob@login1:0",
        "login1:0",
        "login1:65536",
        "login1:22x",
        "login1:",
        "[::1",
        "[::1]x",
        "[not-an-address]:22",
        "a" * 300,
    ],
)
def test_invalid_specs(text: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_host_spec(text)
    assert info.value.exit_code == 2
    assert info.value.hint


def test_round_trip_and_known_hosts_names() -> None:
    for text in ("alice@login1:2222", "login1", "alice@[::1]:22"):
        assert str(parse_host_spec(text)) == text
    assert format_host_port("login1", 22) == "login1"
    assert format_host_port("login1", 2222) == "[login1]:2222"
