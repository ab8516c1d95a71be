"""``--host``, ``make_runner`` and the ``hpcjobs ssh`` commands, without a server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.cli.options import host_option, make_runner, site_ssh_settings
from hpcjobs.errors import BadInputError, ConfigError
from hpcjobs.remote.runner import SshRunner, connect_runner
from hpcjobs.runner import LocalRunner


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcjobs.remote import sshconfig

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sshconfig, "SYSTEM_CONFIG", tmp_path / "no-system-config")


@click.command()
@host_option
def show(host: str | None) -> None:
    click.echo(repr(host))


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "None"),
        (["--host", "alice@login1:2222"], {}, "'alice@login1:2222'"),
        ([], {"HPCJOBS_HOST": "login2"}, "'login2'"),
        (["--host", "@site"], {}, "'@site'"),
        ([], {"HPCJOBS_HOST": ""}, "None"),
    ],
)
def test_host_option(args: list[str], env: dict[str, str], expected: str) -> None:
    result = CliRunner().invoke(show, args, env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == expected


def test_host_option_rejects_bad_values() -> None:
    result = CliRunner().invoke(show, ["--host", "login1; rm -rf /"])
    assert result.exit_code == 2
    assert "Invalid value for '--host'" in result.output


def test_make_runner_local_and_remote() -> None:
    local = make_runner(None, local_env={"SLURM_CONF": "/x/slurm.conf"})
    assert isinstance(local, LocalRunner)
    assert local.env == {"SLURM_CONF": "/x/slurm.conf"}

    remote = make_runner("alice@login1:2222", remote_env={"A": "1"})
    assert isinstance(remote, SshRunner)
    assert (remote.target.user, remote.target.hostname, remote.target.port) == (
        "alice",
        "login1",
        2222,
    )
    assert remote.env == {"A": "1"}
    assert remote.host_key is None  # nothing connected yet
    remote.close()


def test_make_runner_uses_the_site_login_hosts_and_pins() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    site = SimpleNamespace(login_hosts=["login1.example", "login2.example"], host_keys=[key])
    runner = make_runner("@site", site)  # type: ignore[arg-type]
    assert isinstance(runner, SshRunner)
    assert [t.hostname for t in runner.targets] == ["login1.example", "login2.example"]
    assert runner.trust.pinned == (key,)
    assert site_ssh_settings(None) == ([], [])


def test_site_without_login_hosts() -> None:
    with pytest.raises(BadInputError, match="login_hosts"):
        connect_runner("@site")


def test_malformed_pinned_key_fails_early() -> None:
    with pytest.raises(ConfigError, match=r"host_keys\[0\]"):
        connect_runner("login1", pinned_host_keys=["login1 ssh-ed25519 ###"])


def test_runner_closes_with_the_click_context(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []
    monkeypatch.setattr(SshRunner, "close", lambda self: closed.append(self.target.hostname))

    @click.command()
    def cmd() -> None:
        make_runner("login1")
        assert closed == []

    result = CliRunner().invoke(cmd, [])
    assert result.exit_code == 0, result.output
    assert closed == ["login1"]


def test_remote_paths() -> None:
    from hpcjobs.remote.runner import _remote_path

    assert _remote_path("~/runs/a") == "runs/a"
    assert _remote_path("~") == "."
    assert _remote_path("/abs/path") == "/abs/path"
    with pytest.raises(BadInputError):
        _remote_path("~bob/x")
    with pytest.raises(BadInputError):
        _remote_path("a\0b")


def test_ssh_group_help() -> None:
    result = CliRunner().invoke(cli, ["ssh", "--help"])
    assert result.exit_code == 0
    assert "trust" in result.output and "check" in result.output
    listing = CliRunner().invoke(cli, ["--help"])
    assert "ssh" in listing.output


def test_trust_refuses_site_shorthand_and_bad_hosts() -> None:
    result = CliRunner().invoke(cli, ["ssh", "trust", "@site"])
    assert result.exit_code == 2
    assert "one login host at a time" in result.output
    result = CliRunner().invoke(cli, ["ssh", "check", "bad host"])
    assert result.exit_code == 2


def test_modules_import_without_paramiko() -> None:
    code = (
        "import sys, json\n"
        "import hpcjobs.remote, hpcjobs.remote.runner, hpcjobs.remote.trust\n"
        "import hpcjobs.cli.options, hpcjobs.cli.ssh\n"
        "print(json.dumps('paramiko' in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) is False
