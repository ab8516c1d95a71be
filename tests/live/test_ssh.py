"""Remote use against a real OpenSSH server on 127.0.0.1: commands, files, host keys, logins.

Every test runs with an isolated ``$HOME`` (see ``ssh_home``) and checks afterwards that no
private key material reached the logs or the captured output.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.backoff import NO_RETRY, Backoff
from hpcjobs.cli import cli
from hpcjobs.errors import (
    CommandError,
    CommandNotFoundError,
    CommandTimeoutError,
    TransportError,
)
from hpcjobs.remote.hostkeys import ChangedHostKeyError, UnknownHostKeyError
from hpcjobs.remote.policy import AuthenticationError
from hpcjobs.remote.runner import SshRunner, connect_runner
from tests.live.conftest import SshClientHome
from tests.live.sshd import SshServer, make_key

pytestmark = pytest.mark.ssh


def _secret_fragments(server: SshServer) -> list[str]:
    fragments: list[str] = []
    for path in server.root.rglob("*"):
        if path.is_file() and "PRIVATE KEY" in path.read_text(errors="replace"):
            lines = path.read_text().splitlines()
            fragments += [ln for ln in lines if len(ln) >= 20 and not ln.startswith("-----")]
    return fragments


def assert_no_secrets(text: str, server: SshServer) -> None:
    assert "PRIVATE KEY" not in text
    for fragment in _secret_fragments(server):
        assert fragment not in text, "private key material leaked into output or logs"


@pytest.fixture(autouse=True)
def _no_key_material(
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)  # paramiko's debug log included
    yield
    server = request.getfixturevalue("sshd")
    out, err = capfd.readouterr()
    assert_no_secrets(caplog.text + out + err + server.log_text(), server)


@pytest.fixture
def runner(ssh_home: SshClientHome) -> Iterator[SshRunner]:
    ssh_home.write_config(ssh_home.alias_config())
    ssh_home.trust_server()
    with connect_runner("sshtest", retry=NO_RETRY) as remote:
        yield remote


def _cli(*args: str, input_text: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input_text)
    return result.exit_code, result.output


# ---- commands ----------------------------------------------------------------------------


def test_runs_remotely_as_the_test_user(runner: SshRunner, sshd: SshServer) -> None:
    result = runner.run(["sh", "-c", "whoami; echo to-stderr >&2; exit 3"], check=False)
    assert result.stdout == f"{sshd.user}\n"
    assert result.stderr == "to-stderr\n"
    assert result.returncode == 3
    assert runner.host_key == (sshd.host_key.key_type, sshd.host_key.fingerprint)


def test_nonzero_exit_raises_command_error(runner: SshRunner) -> None:
    with pytest.raises(CommandError) as info:
        runner.run(["sh", "-c", "echo broken >&2; exit 7"])
    assert info.value.returncode == 7
    assert "broken" in info.value.stderr
    assert info.value.exit_code == 2  # not a Slurm command: SlurmClient makes those exit 3


def test_nasty_arguments_arrive_byte_for_byte(runner: SshRunner, tmp_path: Path) -> None:
    canary = f"/tmp/hpcjobs-ssh-canary-{secrets.token_hex(4)}"
    values = [
        "it's",
        'say "hi"',
        "two  spaces",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"a; touch {canary}",
        "x && y || z | w > out < in &",
        "line1\nline2\ttab",
        "carriage\rreturn",
        "",
        "*",
        "~",
        "$HOME ${HOME}",
        "back\\slash",
        "-n",
        "üñïçødé ✓",
        "'",
        '"',
        "#not a comment",
    ]
    result = runner.run(["printf", "%s\\0", *values])
    assert result.stdout.split("\0")[:-1] == values
    assert not Path(canary).exists()


def test_env_values_are_passed_quoted(runner: SshRunner) -> None:
    value = "it's $(id) `id`; a b\nc"
    result = runner.run(["printenv", "HPCJOBS_VALUE"], env={"HPCJOBS_VALUE": value})
    assert result.stdout == value + "\n"


def test_stdin_and_large_output_do_not_deadlock(runner: SshRunner) -> None:
    text = "".join(f"line {i} {'x' * 90}\n" for i in range(30000))  # about 3 MB each way
    result = runner.run(["cat"], stdin=text, timeout=60)
    assert result.stdout == text


def test_unread_input_and_signals(runner: SshRunner) -> None:
    assert runner.run(["true"], stdin="x" * 5_000_000, timeout=30).ok
    assert runner.run(["head", "-c", "3"], stdin="abcdef" * 1_000_000, timeout=30).stdout == "abc"
    killed = runner.run(["sh", "-c", "kill -TERM $$"], check=False)
    assert killed.returncode != 0


def test_commands_are_quick_on_an_open_connection(runner: SshRunner) -> None:
    runner.run(["true"])
    started = time.monotonic()
    for _ in range(10):
        runner.run(["true"])
    # Sanity bound: a new connection per command would take about a second each here.
    assert (time.monotonic() - started) / 10 < 2.0


def test_timeout_is_enforced(runner: SshRunner) -> None:
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError):
        runner.run(["sleep", "30"], timeout=1)
    assert time.monotonic() - started < 10
    assert runner.run(["echo", "still usable"]).stdout == "still usable\n"


def test_missing_program(runner: SshRunner) -> None:
    with pytest.raises(CommandNotFoundError) as info:
        runner.run(["hpcjobs-no-such-program", "x"])
    assert info.value.hint and "PATH" in info.value.hint


def test_one_connection_serves_many_commands(runner: SshRunner, sshd: SshServer) -> None:
    before = sshd.connections_logged()
    name = f"hpcjobs-one-conn-{secrets.token_hex(3)}"
    for _ in range(5):
        runner.run(["true"])
    runner.write_text(name, "x")
    assert runner.read_text(name) == "x"
    runner.run(["rm", "-f", name])
    assert sshd.connections_logged() - before <= 1


# ---- files -------------------------------------------------------------------------------


def _mode(runner: SshRunner, path: str) -> str:
    return runner.run(["stat", "-c", "%a", path]).stdout.strip()


def test_sftp_creates_private_folders_and_files(runner: SshRunner, tmp_path: Path) -> None:
    base = f"hpcjobs-sftp-{secrets.token_hex(4)}"
    try:
        runner.makedirs(f"~/{base}/runs/job1")
        for folder in (base, f"{base}/runs", f"{base}/runs/job1"):
            assert _mode(runner, folder) == "700"
        runner.makedirs(f"{base}/runs/job1")  # idempotent

        script = "#!/bin/bash\necho 'hello' \"$USER\"\n"
        runner.write_text(f"~/{base}/runs/job1/job.sh", script)
        assert _mode(runner, f"{base}/runs/job1/job.sh") == "600"
        assert runner.read_text(f"{base}/runs/job1/job.sh") == script

        local = tmp_path / "data.bin"
        local.write_bytes(bytes(range(256)) * 1000)
        runner.upload(local, f"{base}/runs/job1/data.bin", mode=0o640)
        assert _mode(runner, f"{base}/runs/job1/data.bin") == "640"
        size = runner.run(["stat", "-c", "%s", f"{base}/runs/job1/data.bin"]).stdout.strip()
        assert size == "256000"

        runner.write_text(f"{base}/runs/job1/job.sh", "replaced\n")
        assert runner.read_text(f"{base}/runs/job1/job.sh") == "replaced\n"
        assert _mode(runner, f"{base}/runs/job1/job.sh") == "600"
        leftovers = runner.run(["ls", "-A", f"{base}/runs/job1"]).stdout.split()
        assert sorted(leftovers) == ["data.bin", "job.sh"]

        with pytest.raises(TransportError) as info:
            runner.read_text(f"{base}/missing.txt")
        assert info.value.exit_code == 4
    finally:
        runner.run(["rm", "-rf", base])


# ---- host keys ---------------------------------------------------------------------------


def test_unknown_host_is_refused_with_fingerprint_and_hint(
    ssh_home: SshClientHome, sshd: SshServer
) -> None:
    ssh_home.write_config(ssh_home.alias_config())
    with pytest.raises(UnknownHostKeyError) as info:
        connect_runner("sshtest", retry=NO_RETRY).run(["true"])
    error = info.value
    assert error.exit_code == 4
    assert sshd.host_key.fingerprint in error.message
    assert error.hint and "hpcjobs ssh trust sshtest" in error.hint

    code, output = _cli("ssh", "check", "sshtest")
    assert code == 4
    assert sshd.host_key.fingerprint in output
    assert "hpcjobs ssh trust" in output
    assert_no_secrets(output, sshd)


def test_changed_host_key_is_refused_even_by_trust(
    ssh_home: SshClientHome, sshd: SshServer
) -> None:
    other = make_key(sshd.root / f"other_host_{secrets.token_hex(3)}", comment="impostor")
    ssh_home.write_config(ssh_home.alias_config())
    ssh_home.known_hosts.write_text(f"{sshd.key_name} {other.public}\n")
    recorded = ssh_home.known_hosts.read_text()

    with pytest.raises(ChangedHostKeyError) as info:
        connect_runner("sshtest", retry=NO_RETRY).run(["true"])
    assert info.value.exit_code == 4
    assert "CHANGED" in info.value.message
    assert sshd.host_key.fingerprint in info.value.message
    assert other.fingerprint in info.value.message

    code, output = _cli("ssh", "trust", "--yes", "sshtest")
    assert code == 4
    assert "CHANGED" in output
    assert ssh_home.known_hosts.read_text() == recorded
    with pytest.raises(ChangedHostKeyError):
        connect_runner("sshtest", retry=NO_RETRY).run(["true"])


def test_trust_records_the_key_then_commands_work(ssh_home: SshClientHome, sshd: SshServer) -> None:
    # No ~/.ssh yet: trust creates it 0700 and known_hosts 0600.
    ssh_home.ssh_dir.rmdir()
    code, output = _cli("ssh", "trust", "--yes", f"127.0.0.1:{sshd.port}")
    assert code == 0, output
    assert sshd.host_key.fingerprint in output
    assert oct(ssh_home.ssh_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(ssh_home.known_hosts.stat().st_mode & 0o777) == "0o600"
    assert ssh_home.known_hosts.read_text() == sshd.known_hosts_line() + "\n"

    code, output = _cli("ssh", "trust", "--yes", f"127.0.0.1:{sshd.port}")
    assert code == 0 and "already trusted" in output

    ssh_home.write_config(ssh_home.alias_config())
    with connect_runner("sshtest", retry=NO_RETRY) as remote:
        assert remote.run(["whoami"]).stdout.strip() == sshd.user
    assert_no_secrets(output, sshd)


def test_trust_asks_and_can_be_declined(ssh_home: SshClientHome, sshd: SshServer) -> None:
    code, output = _cli("ssh", "trust", f"127.0.0.1:{sshd.port}", input_text="n\n")
    assert code == 4
    assert sshd.host_key.fingerprint in output
    assert not ssh_home.known_hosts.exists()

    code, output = _cli("ssh", "trust", f"127.0.0.1:{sshd.port}", input_text="y\n")
    assert code == 0, output
    assert sshd.host_key.public in ssh_home.known_hosts.read_text()


def test_trust_hashes_names_when_configured(ssh_home: SshClientHome, sshd: SshServer) -> None:
    ssh_home.write_config("Host *\n    HashKnownHosts yes\n" + ssh_home.alias_config())
    code, output = _cli("ssh", "trust", "--yes", "sshtest")
    assert code == 0, output
    line = ssh_home.known_hosts.read_text()
    assert line.startswith("|1|") and "127.0.0.1" not in line
    ssh_home.write_config(ssh_home.alias_config())
    with connect_runner("sshtest", retry=NO_RETRY) as remote:
        assert remote.run(["true"]).ok
    # OpenSSH agrees with the hashed entry.
    found = subprocess.run(
        ["ssh-keygen", "-F", sshd.key_name, "-f", str(ssh_home.known_hosts)],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0


def test_pinned_site_keys_need_no_known_hosts(ssh_home: SshClientHome, sshd: SshServer) -> None:
    ssh_home.write_config(ssh_home.alias_config())
    pinned = [sshd.known_hosts_line()]
    with connect_runner("sshtest", pinned_host_keys=pinned, retry=NO_RETRY) as remote:
        assert remote.run(["true"]).ok

    # A pinned line without host names applies to the site's login hosts; @site uses them.
    ssh_home.write_config(_key_for_loopback(sshd))
    login = [sshd.spec]
    bare = [sshd.host_key.public]
    with connect_runner(
        "@site", site_login_hosts=login, pinned_host_keys=bare, retry=NO_RETRY
    ) as remote:
        assert remote.run(["whoami"]).stdout.strip() == sshd.user
    assert not ssh_home.known_hosts.exists()


def _key_for_loopback(sshd: SshServer) -> str:
    return f"Host 127.0.0.1\n    IdentityFile {sshd.client_key.private}\n    IdentitiesOnly yes\n"


def test_login_host_failover_skips_a_dead_host(ssh_home: SshClientHome, sshd: SshServer) -> None:
    from tests.live.sshd import free_port

    dead = free_port()
    ssh_home.write_config(_key_for_loopback(sshd))
    ssh_home.trust_server()
    login = [f"{sshd.user}@127.0.0.1:{dead}", sshd.spec]
    with connect_runner("@site", site_login_hosts=login, retry=NO_RETRY) as remote:
        assert remote.run(["true"]).ok
        assert remote.target.port == sshd.port


# ---- logins ------------------------------------------------------------------------------


def test_wrong_key_exits_4_clearly_without_retry(ssh_home: SshClientHome, sshd: SshServer) -> None:
    wrong = make_key(sshd.root / f"wrong_{secrets.token_hex(3)}", comment="not-authorized")
    ssh_home.write_config(ssh_home.alias_config(identity=wrong.private))
    ssh_home.trust_server()
    sleeps: list[float] = []
    retry = Backoff(attempts=5, sleep=sleeps.append)
    before = sshd.connections_logged()

    with pytest.raises(AuthenticationError) as info:
        connect_runner("sshtest", retry=retry).run(["true"])
    error = info.value
    assert error.exit_code == 4
    assert "authentication" in error.message.lower()
    assert str(wrong.private) in error.message
    assert error.hint and "authorized_keys" in error.hint
    assert sleeps == []
    time.sleep(0.5)  # let sshd write its log line
    assert sshd.connections_logged() - before == 1

    code, output = _cli("ssh", "check", "sshtest")
    assert code == 4
    assert "authentication" in output.lower()
    assert_no_secrets(output, sshd)


def test_default_identity_is_used(ssh_home: SshClientHome, sshd: SshServer) -> None:
    key = ssh_home.ssh_dir / "id_ed25519"
    key.write_bytes(sshd.client_key.private.read_bytes())
    key.chmod(0o600)
    ssh_home.trust_server()
    with connect_runner(sshd.spec, retry=NO_RETRY) as remote:
        assert remote.run(["whoami"]).stdout.strip() == sshd.user


def test_ssh_agent_is_used(
    ssh_home: SshClientHome, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(
            ["ssh-add", str(sshd.client_key.private)], env=env, check=True, capture_output=True
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        ssh_home.trust_server()
        with connect_runner(sshd.spec, retry=NO_RETRY) as remote:
            assert remote.run(["whoami"]).stdout.strip() == sshd.user
    finally:
        agent.terminate()
        agent.wait(timeout=10)


def test_proxy_jump_through_a_bastion(ssh_home: SshClientHome, sshd: SshServer) -> None:
    ssh_home.write_config(
        ssh_home.alias_config("bastion")
        + f"Host inner\n    HostName localhost\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.client_key.private}\n    IdentitiesOnly yes\n"
        "    ProxyJump bastion\n"
    )
    ssh_home.trust_server()  # the bastion: [127.0.0.1]:port
    before = sshd.connections_logged()
    # The inner host is reached by name "localhost": its key is unknown until trusted.
    with pytest.raises(UnknownHostKeyError) as info:
        connect_runner("inner", retry=NO_RETRY).run(["true"])
    assert f"[localhost]:{sshd.port}" == info.value.key_name
    code, output = _cli("ssh", "trust", "--yes", "inner")
    assert code == 0, output
    with connect_runner("inner", retry=NO_RETRY) as remote:
        assert remote.run(["whoami"]).stdout.strip() == sshd.user
    time.sleep(0.5)
    assert "direct-tcpip" in sshd.log_text() or sshd.connections_logged() > before


def test_refused_connection_is_retried(ssh_home: SshClientHome) -> None:
    from tests.live.sshd import free_port

    sleeps: list[float] = []
    retry = Backoff(attempts=3, sleep=sleeps.append)
    with pytest.raises(TransportError) as info:
        connect_runner(f"nobody@127.0.0.1:{free_port()}", retry=retry).run(["true"])
    assert info.value.exit_code == 4
    assert "refused" in info.value.message
    assert len(sleeps) == 2


# ---- Slurm over SSH ----------------------------------------------------------------------


def test_ssh_check_reports_slurm(
    ssh_home: SshClientHome, sshd: SshServer, sandbox: object, tmp_path: Path
) -> None:
    ssh_home.write_config(ssh_home.alias_config())
    ssh_home.trust_server()
    code, output = _cli("ssh", "check", "sshtest")
    assert code == 0, output
    assert sshd.host_key.fingerprint in output
    assert re.search(r"Slurm: slurm\S* \d+\.\d+", output)

    # The same through the site config: its login_hosts and pinned key, no known_hosts.
    import yaml

    from hpcjobs.resources import site_configs_dir

    data = yaml.safe_load((site_configs_dir() / "sandbox.yaml").read_text())
    data["login_hosts"] = [sshd.spec]
    data["host_keys"] = [sshd.host_key.public]
    site = tmp_path / "remote-site.yaml"
    site.write_text(yaml.safe_dump(data))
    ssh_home.known_hosts.unlink()
    ssh_home.write_config(_key_for_loopback(sshd))
    code, output = _cli("--site", str(site), "ssh", "check", "@site")
    assert code == 0, output
    assert f"Connected to {sshd.user}@127.0.0.1:{sshd.port}" in output
    assert "Slurm: slurm" in output


def test_sinfo_and_sbatch_over_ssh(
    runner: SshRunner, sshd: SshServer, slurm_env: dict[str, str]
) -> None:
    runner.env.update(slurm_env)
    nodes = runner.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()
    assert {"n1", "n2", "n3"} <= set(nodes)

    script = '#!/bin/bash\necho "hello from $(whoami) on $SLURMD_NODENAME"\n'
    job_id = (
        runner.run(
            ["sbatch", "--parsable", "--wait", "-J", "hpcjobs ssh 'test'", "-t", "1"],
            stdin=script,
            timeout=180,
        )
        .stdout.strip()
        .split(";")[0]
    )
    assert job_id.isdigit()
    try:
        output = runner.read_text(f"slurm-{job_id}.out")
        assert re.fullmatch(rf"hello from {sshd.user} on n\d\n", output)
        deadline = time.monotonic() + 30
        while True:  # slurmdbd first records a job as "allocation", then fills in its name
            name = runner.run(
                ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "JobName"], timeout=60
            ).stdout.strip()
            if name.splitlines()[:1] != ["allocation"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert name.splitlines()[0] == "hpcjobs ssh 'test'"
    finally:
        runner.run(["rm", "-f", f"slurm-{job_id}.out"], check=False)
