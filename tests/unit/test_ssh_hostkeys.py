"""known_hosts parsing, pinned site keys, verdicts, fingerprints and recording new keys."""

from __future__ import annotations

import base64
import shutil
import stat
import subprocess
from pathlib import Path

import paramiko
import pytest

from hpcjobs.errors import ConfigError
from hpcjobs.remote.hostkeys import (
    ChangedHostKeyError,
    KnownHosts,
    KnownKey,
    UnknownHostKeyError,
    Verdict,
    append_known_host,
    fingerprint,
    hash_host,
    host_matches,
    parse_line,
    parse_pinned,
    read_known_hosts,
)


@pytest.fixture(scope="module")
def keys() -> list[paramiko.PKey]:
    return [paramiko.ECDSAKey.generate() for _ in range(3)]


def _entry(line: str, source: str) -> KnownKey:
    entry = parse_line(line, source)
    assert entry is not None
    return entry


def _line(names: str, key: paramiko.PKey) -> str:
    return f"{names} {key.get_name()} {key.get_base64()}"


def test_fingerprint_matches_openssh(keys: list[paramiko.PKey], tmp_path: Path) -> None:
    key = keys[0]
    assert fingerprint(key.asbytes()) == key.fingerprint
    if shutil.which("ssh-keygen"):
        pub = tmp_path / "k.pub"
        pub.write_text(_line("", key).strip() + "\n")
        out = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.split()[1] == fingerprint(key.asbytes())


def test_verdicts(keys: list[paramiko.PKey]) -> None:
    good, other, third = keys
    store = KnownHosts(
        [
            _entry(_line("login1,[login1]:2222", good), "f:1"),
            _entry(_line("login2", other), "f:2"),
            _entry(_line("login2", good), "f:3"),
            _entry("@revoked * " + f"{third.get_name()} {third.get_base64()}", "f:4"),
        ]
    )
    blob = good.asbytes()
    assert store.judge("login1", good.get_name(), blob).verdict is Verdict.TRUSTED
    assert store.judge("[login1]:2222", good.get_name(), blob).verdict is Verdict.TRUSTED
    # Any of several recorded keys of the same type is accepted.
    assert store.judge("login2", good.get_name(), blob).verdict is Verdict.TRUSTED
    assert store.judge("login3", good.get_name(), blob).verdict is Verdict.UNKNOWN
    changed = store.judge("login1", other.get_name(), other.asbytes())
    assert changed.verdict is Verdict.CHANGED
    assert [e.source for e in changed.entries] == ["f:1"]
    assert store.judge("[login1]:2200", good.get_name(), blob).verdict is Verdict.UNKNOWN
    assert store.judge("anything", third.get_name(), third.asbytes()).verdict is Verdict.REVOKED


def test_patterns_and_hashes() -> None:
    assert host_matches(["*.cluster.example"], "login1.cluster.example")
    assert host_matches(["login?"], "LOGIN1")
    assert not host_matches(["login?"], "login12")
    assert not host_matches(["*.example", "!bad.example"], "bad.example")
    assert host_matches(["[login1]:2222"], "[login1]:2222")  # brackets are literal
    assert not host_matches(["[login1]:2222"], "l")
    hashed = hash_host("[login1]:2222", salt=b"s" * 20)
    assert hashed == paramiko.HostKeys.hash_host(
        "[login1]:2222", base64.b64encode(b"s" * 20).decode()
    )
    assert host_matches([hashed], "[login1]:2222")
    assert not host_matches([hashed], "login1")
    assert not host_matches(["|1|garbage"], "login1")


def test_parse_line_rejects_and_skips() -> None:
    assert parse_line("", "x") is None
    assert parse_line("# comment", "x") is None
    assert parse_line("@cert-authority *.example ssh-ed25519 AAAA", "x") is None
    for bad in ("host", "host ssh-ed25519", "host ssh-ed25519 !!!", "@weird host ssh-rsa AAAA"):
        with pytest.raises(ValueError):
            parse_line(bad, "x")
    mismatched = base64.b64encode(b"\x00\x00\x00\x07ssh-rsa" + b"\x00" * 8).decode()
    with pytest.raises(ValueError, match="not a ssh-ed25519 key"):
        parse_line(f"host ssh-ed25519 {mismatched}", "x")


def test_read_known_hosts_skips_bad_lines(keys: list[paramiko.PKey], tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"garbage line\n{_line('login1', keys[0])}\n\n# c\n")
    entries = read_known_hosts(path)
    assert [(e.patterns, e.source) for e in entries] == [(("login1",), f"{path}:2")]
    assert read_known_hosts(tmp_path / "missing") == []


def test_pinned_lines(keys: list[paramiko.PKey]) -> None:
    key = keys[0]
    full = parse_pinned([_line("login1.example", key)])
    assert full[0].pinned and full[0].source == "site config host_keys[0]"
    bare = parse_pinned(
        [f"{key.get_name()} {key.get_base64()} admin@site"],
        ["alice@login1.example", "login2.example:2222"],
    )
    assert bare[0].patterns == ("login1.example", "[login2.example]:2222")
    with pytest.raises(ConfigError, match="no login_hosts"):
        parse_pinned([f"{key.get_name()} {key.get_base64()}"])
    with pytest.raises(ConfigError, match=r"host_keys\[1\]"):
        parse_pinned([_line("a", key), "login1 ssh-ed25519 not-base64!"])


def test_load_puts_pinned_first_and_prefers_known_types(
    keys: list[paramiko.PKey], tmp_path: Path
) -> None:
    user = tmp_path / "known_hosts"
    user.write_text(_line("login1", keys[1]) + "\n")
    rsa_line = "login1 ssh-rsa " + base64.b64encode(b"\x00\x00\x00\x07ssh-rsa" + b"\x01").decode()
    store = KnownHosts.load([user], pinned=[_line("login1", keys[0]), rsa_line], global_files=[])
    assert store.entries[0].pinned
    assert store.known_types("login1") == ["ecdsa-sha2-nistp256", "ssh-rsa"]
    offered = ["ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
    assert store.preferred_algorithms("login1", offered) == [
        "ecdsa-sha2-nistp256",
        "rsa-sha2-512",
        "rsa-sha2-256",
        "ssh-rsa",
        "ssh-ed25519",
    ]
    assert store.preferred_algorithms("elsewhere", offered) == offered


def test_append_creates_private_file(keys: list[paramiko.PKey], tmp_path: Path) -> None:
    path = tmp_path / "new" / ".ssh" / "known_hosts"
    key = keys[0]
    line = append_known_host(path, "[login1]:2222", key.get_name(), key.asbytes())
    assert line == _line("[login1]:2222", key)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.write_text(path.read_text().rstrip("\n"))  # no final newline
    append_known_host(path, "login2", key.get_name(), key.asbytes(), hashed=True)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and lines[1].startswith("|1|")
    store = KnownHosts(read_known_hosts(path))
    assert store.judge("login2", key.get_name(), key.asbytes()).verdict is Verdict.TRUSTED


def test_errors_show_fingerprints_and_next_steps(keys: list[paramiko.PKey]) -> None:
    key, old = keys[0], keys[1]
    unknown = UnknownHostKeyError(
        "alice@login1:2222", "[login1]:2222", key.get_name(), fingerprint(key.asbytes())
    )
    assert unknown.exit_code == 4
    assert fingerprint(key.asbytes()) in unknown.message
    assert unknown.hint and "hpcjobs ssh trust alice@login1:2222" in unknown.hint

    recorded = _entry(_line("[login1]:2222", old), "/home/a/.ssh/known_hosts:3")
    changed = ChangedHostKeyError(
        "login1:2222", "[login1]:2222", key.get_name(), fingerprint(key.asbytes()), [recorded]
    )
    assert "CHANGED" in changed.message
    assert fingerprint(old.asbytes()) in changed.message
    assert "/home/a/.ssh/known_hosts:3" in changed.message
    assert (
        changed.hint and "ssh-keygen -R '[login1]:2222' -f /home/a/.ssh/known_hosts" in changed.hint
    )
    pinned = parse_pinned([_line("[login1]:2222", old)])
    assert "site config" in (ChangedHostKeyError("h", "n", "t", "f", pinned).hint or "")
