"""Connection failures: which are retried (network) and which are final (login, host keys)."""

from __future__ import annotations

import errno
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from hpcjobs.backoff import Backoff
from hpcjobs.errors import TransportError
from hpcjobs.remote import connect as connect_module
from hpcjobs.remote.hostkeys import TrustSources, UnknownHostKeyError
from hpcjobs.remote.policy import AuthenticationError, TransientTransportError
from hpcjobs.remote.sshconfig import Target


@pytest.fixture
def target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Target:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return Target(
        alias="login1",
        spec="alice@login1",
        hostname="127.0.0.1",
        port=_closed_port(),
        user="alice",
        known_hosts_files=(tmp_path / "known_hosts",),
        connect_timeout=5,
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _retry(sleeps: list[float], attempts: int = 4) -> Backoff:
    return Backoff(attempts=attempts, first_wait_s=0.01, max_wait_s=0.01, sleep=sleeps.append)


TRUST = TrustSources(global_files=())


def test_refused_connection_is_retried_then_reported(target: Target) -> None:
    sleeps: list[float] = []
    with pytest.raises(TransientTransportError) as info:
        connect_module.connect(target, TRUST, retry=_retry(sleeps, attempts=3))
    assert len(sleeps) == 2
    assert info.value.exit_code == 4
    assert "refused" in info.value.message
    assert info.value.hint and "hpcjobs ssh check" in info.value.hint


@pytest.fixture
def hangup_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server that accepts connections and closes them at once (no SSH banner)."""
    accepted: list[int] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1]), accepted
    stop.set()
    thread.join(timeout=2)
    server.close()


def test_dropped_handshake_is_retried(target: Target, hangup_server: tuple[int, list[int]]) -> None:
    port, accepted = hangup_server
    sleeps: list[float] = []
    moved = Target(**{**target.__dict__, "port": port})
    with pytest.raises(TransientTransportError):
        connect_module.connect(moved, TRUST, retry=_retry(sleeps, attempts=3))
    assert len(accepted) == 3
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    "error",
    [
        AuthenticationError("no key accepted"),
        UnknownHostKeyError("login1", "login1", "ssh-ed25519", "SHA256:x"),
        TransportError("cannot resolve host name"),
    ],
)
def test_final_errors_are_not_retried(
    target: Target, monkeypatch: pytest.MonkeyPatch, error: TransportError
) -> None:
    calls: list[int] = []

    def fail(*args: object) -> None:
        calls.append(1)
        raise error

    monkeypatch.setattr(connect_module, "_login", fail)
    sleeps: list[float] = []
    with pytest.raises(type(error)):
        connect_module.connect(target, TRUST, retry=_retry(sleeps))
    assert calls == [1]
    assert sleeps == []


def test_unknown_dns_name_is_final(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_such_name(*args: object, **kwargs: object) -> socket.socket:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", no_such_name)
    sleeps: list[float] = []
    with pytest.raises(TransportError) as info:
        connect_module.connect(target, TRUST, retry=_retry(sleeps))
    assert not isinstance(info.value, TransientTransportError)
    assert "cannot resolve" in info.value.message
    assert sleeps == []


@pytest.mark.parametrize(
    ("error", "verified", "kind", "words"),
    [
        (socket.gaierror(socket.EAI_AGAIN, "again"), False, TransientTransportError, "DNS"),
        (OSError(errno.EHOSTUNREACH, "No route to host"), False, TransientTransportError, "route"),
        (OSError(errno.EACCES, "Permission denied"), False, TransportError, "Permission"),
        (TimeoutError("timed out"), False, TransientTransportError, "timed out"),
        (EOFError(), False, TransientTransportError, "closed the connection"),
        (
            paramiko.SSHException("Error reading SSH protocol banner"),
            False,
            TransientTransportError,
            "handshake",
        ),
        (
            paramiko.SSHException("Incompatible ssh peer (no acceptable kex algorithm)"),
            False,
            TransportError,
            "algorithms",
        ),
        (
            paramiko.ChannelException(2, "Connect failed"),
            False,
            TransientTransportError,
            "jump host",
        ),
        (
            paramiko.ChannelException(1, "Administratively prohibited"),
            False,
            TransportError,
            "jump host",
        ),
        (
            paramiko.AuthenticationException("Authentication failed."),
            True,
            AuthenticationError,
            "accepted none of the keys",
        ),
        (
            paramiko.BadAuthenticationType("bad", ["password"]),
            True,
            AuthenticationError,
            "allows: password",
        ),
        (
            paramiko.PasswordRequiredException("private key file is encrypted"),
            True,
            AuthenticationError,
            "passphrase",
        ),
        (
            paramiko.SSHException("No authentication methods available"),
            True,
            AuthenticationError,
            "no key to offer",
        ),
        (EOFError(), True, TransportError, "while logging in"),
    ],
)
def test_error_translation(
    target: Target, error: BaseException, verified: bool, kind: type, words: str
) -> None:
    translated = connect_module._translate(error, target, verified=verified)
    assert type(translated) is kind
    assert words in translated.message
    assert translated.exit_code == 4
    assert translated.hint


def test_auth_message_names_key_sources_not_keys(target: Target, tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    error = connect_module._translate(paramiko.AuthenticationException("x"), target, verified=True)
    assert "id_ed25519" in error.message
    assert "no ssh-agent running" in error.message
    assert "secret" not in error.message and "PRIVATE" not in error.message
