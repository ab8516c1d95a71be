"""Hostile job files and site configs: refused with exit 2 and one message naming the file.

Never a traceback, never a hang: a FIFO or device is refused before it is read, at most
``MAX_BYTES + 1`` bytes are read, and composing stops at deep nesting and at alias bombs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config import yamlfile
from hpcjobs.config.locate import _hostname_patterns
from hpcjobs.config.validate import validate_site_file
from hpcjobs.config.yamlfile import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    parse_yaml_text,
    read_limited,
    read_yaml_file,
)

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "site-configs" / "sandbox.yaml"

#: A "billion laughs" of 1 KB: ten levels of ten aliases each stand for 10**10 strings.
ALIAS_BOMB = (
    'x-a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    + "".join(
        f"x-{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
        for a, b in zip("abcdefghi", "bcdefghij", strict=True)
    )
    + "name: bomb\n"
)


def _fifo(tmp: Path) -> Path:
    path = tmp / "pipe.yaml"
    os.mkfifo(path)
    return path


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / name
        path.write_bytes(data)
        return path

    return make


def _directory(tmp: Path) -> Path:
    path = tmp / "folder.yaml"
    path.mkdir()
    return path


#: name -> (make the file in a folder, a fragment the message must hold, its line or None)
CASES: dict[str, tuple[Callable[[Path], Path], str, int | None]] = {
    "fifo": (_fifo, "is a named pipe (FIFO), not a regular file", None),
    "dev-zero": (lambda _: Path("/dev/zero"), "is a character device, not a regular file", None),
    "directory": (_directory, "is a directory", None),
    "control-byte": (_write("ctl.yaml", b"name: x\nnote: ok\nbad: a\x01b\n"), "U+0001", 3),
    "nul-byte": (_write("nul.yaml", b"name: x\x00\n"), "U+0000", 1),
    "deep-lists": (
        _write("deep.yaml", b"name: x\nx: " + b"[" * 3000 + b"]" * 3000 + b"\n"),
        "nested too deeply",
        2,
    ),
    "deep-mappings": (
        _write("deepmap.yaml", b"x: " + b"{a: " * 3000 + b"1" + b"}" * 3000 + b"\n"),
        "nested too deeply",
        1,
    ),
    "alias-bomb": (_write("bomb.yaml", ALIAS_BOMB.encode()), f"more than {MAX_NODES}", 5),
    "recursive-alias": (_write("loop.yaml", b"x-a: &a [1, *a]\nname: x\n"), "recursive", 1),
    "too-big": (
        _write("big.yaml", b"name: x\n" + b"#" * MAX_BYTES + b"\n"),
        f"file is larger than {MAX_BYTES} bytes",
        None,
    ),
}


@pytest.fixture(params=sorted(CASES))
def hostile(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str, int | None]:
    make, fragment, line = CASES[request.param]
    return make(tmp_path), fragment, line


def test_alias_bomb_is_small() -> None:
    assert len(ALIAS_BOMB) < 1100


@pytest.mark.timeout(20)
def test_read_yaml_file_refuses(hostile: tuple[Path, str, int | None]) -> None:
    path, fragment, line = hostile
    started = time.monotonic()
    doc = read_yaml_file(path, source=str(path))
    assert time.monotonic() - started < 10
    assert doc.data is None
    (problem,) = doc.problems
    assert fragment in problem.message
    assert problem.file == str(path)
    assert problem.line == line
    assert problem.format().startswith(f"{path}:")


@pytest.mark.timeout(20)
def test_site_validate_refuses(hostile: tuple[Path, str, int | None]) -> None:
    path, fragment, _ = hostile
    report = validate_site_file(path)
    assert any(fragment in p.message and p.file == str(path) for p in report.errors)
    result = CliRunner().invoke(cli, ["site", "validate", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and fragment in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.timeout(20)
def test_render_refuses_job_file(hostile: tuple[Path, str, int | None]) -> None:
    path, fragment, _ = hostile
    result = CliRunner().invoke(cli, ["--site", "sandbox", "render", "-f", str(path), "--", "true"])
    assert result.exit_code == 2
    assert str(path) in result.output and fragment in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "command",
    [["site", "validate", "{}"], ["--site", "sandbox", "render", "-f", "{}", "--", "true"]],
    ids=["site-validate", "render"],
)
def test_cli_process_exits_2_fast(
    hostile: tuple[Path, str, int | None], command: list[str]
) -> None:
    path, _, _ = hostile
    argv = [str(path) if part == "{}" else part for part in command]
    proc = subprocess.run(
        [sys.executable, "-m", "hpcjobs", *argv], capture_output=True, text=True, timeout=20
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert path.name in output
    assert "Traceback" not in output


def test_hostile_file_as_global_site_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(ALIAS_BOMB)
    proc = subprocess.run(
        [sys.executable, "-m", "hpcjobs", "--site", str(path), "render", "--", "true"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2
    assert str(path) in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.timeout(20)
def test_fifo_swapped_in_after_the_check_does_not_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open is non-blocking and the open file is checked again."""
    fifo = _fifo(tmp_path)
    regular = tmp_path / "regular.yaml"
    regular.write_text("name: x\n")
    real_stat = os.stat

    def stat_lies(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if str(path) == str(fifo):
            return real_stat(regular)
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(yamlfile.os, "stat", stat_lies)
    data, why = read_limited(fifo)
    assert data is None and "named pipe" in why


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_read_bound_does_not_trust_st_size() -> None:
    """Files in /proc say they are empty; at most ``limit + 1`` bytes are read anyway."""
    path = Path("/proc/self/status")
    assert os.stat(path).st_size == 0
    data, why = read_limited(path, limit=16)
    assert data is None and why == "file is larger than 16 bytes"


def test_exactly_max_bytes_is_read(tmp_path: Path) -> None:
    path = tmp_path / "full.yaml"
    path.write_bytes(b"name: x\n" + b"#" * (MAX_BYTES - 9) + b"\n")
    assert path.stat().st_size == MAX_BYTES
    doc = read_yaml_file(path)
    assert doc.ok and doc.data == {"name": "x"}


def test_nesting_up_to_the_limit_is_fine() -> None:
    deep = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    assert parse_yaml_text(deep, source="ok.yaml").ok
    deeper = "x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n"
    (problem,) = parse_yaml_text(deeper, source="no.yaml").problems
    assert problem.message.startswith("nested too deeply")


def test_aliases_and_merge_keys_still_work() -> None:
    text = (
        "x-part: &part {gpus: 8, time: 5:00}\n"
        "a: {<<: *part, name: a}\n"
        "b: [*part, *part]\n"
        "c: !!str 1:30\n"
    )
    doc = parse_yaml_text(text, source="ok.yaml")
    assert doc.ok, doc.problems
    assert doc.data["a"] == {"gpus": 8, "time": "5:00", "name": "a"}
    assert doc.data["b"] == [{"gpus": 8, "time": "5:00"}] * 2
    assert doc.lines[("a", "name")] == 2


def test_many_plain_values_hit_the_same_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlfile, "MAX_NODES", 1000)
    assert parse_yaml_text("x: [" + "1," * 997 + "]\n", source="ok.yaml").ok
    text = "x: [" + "1," * 998 + "]\n"
    (problem,) = parse_yaml_text(text, source="wide.yaml").problems
    assert "more than 1000" in problem.message


def test_site_hostnames_are_read_with_the_same_bounds(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("hostnames: ['login[0-9]+']\n")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB + "hostnames: ['x']\n")
    assert _hostname_patterns(good) == ["login[0-9]+"]
    started = time.monotonic()
    assert _hostname_patterns(bomb) == []
    assert _hostname_patterns(_fifo(tmp_path)) == []
    assert _hostname_patterns(Path("/dev/zero")) == []
    assert time.monotonic() - started < 5


# ---- login hosts and pinned host keys ------------------------------------------------------

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _site_with(tmp_path: Path, login_hosts: str, host_keys: str) -> Path:
    text = SANDBOX.read_text()
    text = text.replace('login_hosts: ["localhost"]', f"login_hosts: {login_hosts}")
    text = text.replace("host_keys: []", f"host_keys: {host_keys}")
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


def test_site_validate_checks_login_hosts_like_host_option(tmp_path: Path) -> None:
    path = _site_with(tmp_path, '["login1", "bad host", "a@b@c", "login2:70000", "@site"]', "[]")
    report = validate_site_file(path)
    assert [p.key for p in report.errors] == [
        "login_hosts.1",
        "login_hosts.2",
        "login_hosts.3",
        "login_hosts.4",
    ]
    assert all(p.file == str(path) and p.line == 8 for p in report.errors)
    assert "--host would refuse it: invalid port" in report.errors[2].message
    result = CliRunner().invoke(cli, ["site", "validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:8: login_hosts.1: --host would refuse it" in result.output


def test_site_validate_checks_pinned_keys_like_connecting(tmp_path: Path) -> None:
    rsa_data = ED25519.replace("ssh-ed25519", "ssh-rsa")
    keys = (
        f'["login1 {ED25519}", "{ED25519}", "login1 ssh-ed25519 AAAAnot", "junk", '
        f'"login1 {rsa_data}"]'
    )
    path = _site_with(tmp_path, '["login1:2222"]', keys)
    report = validate_site_file(path)
    assert [(p.key, p.message) for p in report.errors] == [
        ("host_keys.2", "not a valid known_hosts line: key data is not valid base64"),
        (
            "host_keys.3",
            "not a valid known_hosts line: expected: host-names key-type base64-key [comment]",
        ),
        ("host_keys.4", "not a valid known_hosts line: key data is not a ssh-rsa key"),
    ]
    result = CliRunner().invoke(cli, ["site", "validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:9: host_keys.3: not a valid known_hosts line" in result.output


def test_pinned_key_without_names_needs_login_hosts(tmp_path: Path) -> None:
    path = _site_with(tmp_path, "[]", f'["{ED25519}"]')
    (problem,) = validate_site_file(path).errors
    assert problem.key == "host_keys.0"
    assert "names no host and the site config has no login_hosts" in problem.message


def test_valid_login_hosts_and_keys_validate(tmp_path: Path) -> None:
    path = _site_with(tmp_path, '["alice@login1:2222", "[::1]:22"]', f'["{ED25519}"]')
    report = validate_site_file(path)
    assert report.ok, report.problems


def test_bad_login_host_refuses_the_site_everywhere(tmp_path: Path) -> None:
    path = _site_with(tmp_path, '["bad host"]', "[]")
    result = CliRunner().invoke(cli, ["--site", str(path), "render", "--", "true"])
    assert result.exit_code == 2
    assert f"{path}:8: login_hosts.0: --host would refuse it" in result.output
