"""Driving the sandbox from "a laptop": submit, status, logs -f, cancel and history over SSH.

The client side has its own $HOME (ssh config, known_hosts); the login node is a real sshd on
127.0.0.1 whose test user submits to the sandbox.
"""

from __future__ import annotations

import json
import secrets
import time

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from tests.live.conftest import SshClientHome
from tests.live.sshd import SshServer

pytestmark = pytest.mark.ssh

STEPS = 'for i in 1 2 3; do echo "step $i on $SLURMD_NODENAME"; sleep 1; done'


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def login(ssh_home: SshClientHome, sshd: SshServer, sandbox: object) -> str:
    ssh_home.write_config(ssh_home.alias_config("login-sandbox"))
    ssh_home.trust_server()
    return "login-sandbox"


def test_remote_submit_status_logs_history(login: str, sshd: SshServer) -> None:
    code, out, err = _cli(
        "--site",
        "sandbox",
        "submit",
        "--host",
        login,
        "--json",
        "-J",
        "remote 'demo'",
        "--output-dir",
        f"hpcjobs-test/{secrets.token_hex(4)}",
        "-N",
        "2",
        "-t",
        "5:00",
        "--",
        "bash",
        "-c",
        STEPS,
    )
    assert code == 0, err
    sub = json.loads(out)
    job_id = sub["job_id"]
    # Relative paths resolve on the login node: the test user's home, not this machine's.
    assert sub["output_dir"].startswith(f"/home/{sshd.user}/hpcjobs-test/")

    code, out, err = _cli("logs", "--host", login, "-f", job_id)
    assert code == 0, err
    assert "step 3 on n" in out
    assert "hpcjobs: run 0 of job" in out

    code, out, err = _cli("status", "--host", login, "--json", job_id)
    assert code == 0, err
    assert json.loads(out)["jobs"][0]["state"] == "COMPLETED"

    deadline = time.monotonic() + 60
    while True:
        code, out, err = _cli("history", "--host", login, "--json", job_id)
        if code == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert code == 0, err
    data = json.loads(out)
    assert data["final"] == {"result": "finish", "detail": "completed"}
    assert data["jobs"][0]["runs"][0]["state"] == "COMPLETED"

    # The script and record on the login node are private to the user.
    from hpcjobs.remote.runner import connect_runner

    with connect_runner(login) as remote:
        modes = remote.run(["stat", "-c", "%a %n", sub["script"], sub["record"]]).stdout
        folder = remote.run(["stat", "-c", "%a", sub["script"].rsplit("/", 1)[0]]).stdout
    assert [line.split()[0] for line in modes.splitlines()] == ["600", "600"]
    assert folder.strip() == "700"


def test_remote_cancel(login: str) -> None:
    code, out, err = _cli(
        "--site",
        "sandbox",
        "submit",
        "--host",
        login,
        "-t",
        "5:00",
        "--",
        "sleep",
        "300",
    )
    assert code == 0, err
    job_id = out.strip()
    code, out, err = _cli("cancel", "--host", login, job_id)
    assert code == 0, err
    assert f"cancelled {job_id}" in out
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        code, out, err = _cli("status", "--host", login, "--json", job_id)
        state = json.loads(out)["jobs"][0]["state"] if code == 0 else ""
        if state.startswith("CANCELLED"):
            break
        time.sleep(1)
    assert state.startswith("CANCELLED")


def test_remote_unknown_host_key_exits_4(ssh_home: SshClientHome, sandbox: object) -> None:
    ssh_home.write_config(ssh_home.alias_config("untrusted"))
    code, _out, err = _cli("status", "--host", "untrusted", "1")
    assert code == 4
    assert "hpcjobs ssh trust" in err
    assert "Traceback" not in err
