"""Open a verified, authenticated SSH connection, through jump hosts, with retries.

This module imports paramiko; the rest of hpcjobs imports it only when a connection is opened.

* Host keys: every hop's key is judged by :class:`~hpcjobs.remote.hostkeys.KnownHosts`
  before any credential is sent. Unknown and changed keys are refused.
* Authentication: keys only (``IdentityFile``, ssh-agent, ``~/.ssh/id_*``). No passwords, no
  passphrase prompts, and the agent is never forwarded.
* Failures: network trouble (refused, unreachable, timeouts, dropped handshakes) is retried
  with jittered exponential backoff; authentication and host key failures are not. Every
  failure is a :class:`~hpcjobs.errors.TransportError` (exit 4).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import paramiko

from hpcjobs.backoff import Backoff
from hpcjobs.errors import TransportError
from hpcjobs.logger import logger
from hpcjobs.remote import policy as retry_policy
from hpcjobs.remote.hostkeys import (
    ChangedHostKeyError,
    KnownHosts,
    TrustSources,
    UnknownHostKeyError,
    Verdict,
    fingerprint,
)
from hpcjobs.remote.policy import CONNECT_RETRY, AuthenticationError, TransientTransportError
from hpcjobs.remote.sshconfig import Target

log = logger(__name__)

AUTH_TIMEOUT_S = 30.0
KEEPALIVE_S = 30
DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519")

_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EHOSTDOWN,
        errno.ETIMEDOUT,
        errno.EPIPE,
    }
)

_CONNECT_HINT = (
    "check the host name and port and that this machine can reach it (VPN, firewall); "
    "'hpcjobs ssh check HOST' tests the connection"
)


@dataclass
class Connection:
    """An open, authenticated connection, plus the jump-host connections under it."""

    target: Target
    client: paramiko.SSHClient
    hops: list[paramiko.SSHClient]
    key_type: str
    key_fingerprint: str

    @property
    def transport(self) -> paramiko.Transport:
        """The live transport.

        Raises:
            TransportError: The connection has been closed or was lost.
        """
        transport = self.client.get_transport()
        if transport is None or not transport.is_active():
            raise TransientTransportError(
                f"the SSH connection to {self.target.label} was lost",
                hint="check the network; run the command again",
            )
        return transport

    def is_active(self) -> bool:
        """Whether the connection is still up."""
        transport = self.client.get_transport()
        return transport is not None and transport.is_active()

    def close(self) -> None:
        """Close the connection and the jump-host connections (innermost first)."""
        self.client.close()
        for hop in reversed(self.hops):
            hop.close()
        self.hops.clear()


def connect(target: Target, trust: TrustSources, *, retry: Backoff | None = None) -> Connection:
    """Connect to ``target`` (through its jump hosts), verify host keys and log in.

    Raises:
        UnknownHostKeyError: A host's key is not on record (exit 4).
        ChangedHostKeyError: A host's key differs from the one on record (exit 4).
        AuthenticationError: No key was accepted (exit 4, not retried).
        TransientTransportError: The network failed on every attempt (exit 4).
        TransportError: Any other SSH failure (exit 4).
    """
    return retry_policy.call(
        retry or CONNECT_RETRY, lambda: _connect_once(target, trust), label=target.label
    )


def fetch_host_key(
    target: Target, trust: TrustSources, *, retry: Backoff | None = None
) -> tuple[str, bytes]:
    """The host key ``target`` presents, without logging in to it.

    Jump hosts on the way are verified and logged in to as usual. The key type recorded for the
    host, if any, is asked for first, so that a known key compares against its own type.

    Returns:
        The key type (``ssh-ed25519``, ...) and the public key blob.
    """
    return retry_policy.call(
        retry or CONNECT_RETRY, lambda: _fetch_once(target, trust), label=target.label
    )


def _connect_once(target: Target, trust: TrustSources) -> Connection:
    hops: list[paramiko.SSHClient] = []
    try:
        via: paramiko.SSHClient | None = None
        for hop in target.jumps:
            via, _ = _login(hop, trust, via)
            hops.append(via)
        client, checked = _login(target, trust, via)
    except BaseException:
        for hop_client in reversed(hops):
            hop_client.close()
        raise
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(KEEPALIVE_S)
    log.info("connected to %s", target.label)
    return Connection(target, client, hops, checked.key_type, checked.key_fingerprint)


def _fetch_once(target: Target, trust: TrustSources) -> tuple[str, bytes]:
    hops: list[paramiko.SSHClient] = []
    transport: paramiko.Transport | None = None
    try:
        via: paramiko.SSHClient | None = None
        for hop in target.jumps:
            via, _ = _login(hop, trust, via)
            hops.append(via)
        sock = _open_socket(target, via)
        try:
            transport = paramiko.Transport(sock)
            options = transport.get_security_options()
            store = trust.store_for(target)
            options.key_types = store.preferred_algorithms(target.key_name, options.key_types)
            transport.start_client(timeout=target.connect_timeout)
            key = transport.get_remote_server_key()
        except TransportError:
            raise
        except Exception as exc:
            raise _translate(exc, target, verified=False) from exc
        return key.get_name(), key.asbytes()
    finally:
        if transport is not None:
            transport.close()
        for hop_client in reversed(hops):
            hop_client.close()


@dataclass
class _Checked:
    key_type: str = ""
    key_fingerprint: str = ""


class _VerifyingPolicy(paramiko.RejectPolicy):
    """Rejects every host key, like RejectPolicy, except one that is on record for the host.

    No host keys are loaded into the :class:`paramiko.SSHClient`, so paramiko hands every
    server key to this policy, which judges it against hpcjobs' own store: that gives distinct
    "unknown" and "changed" errors, carrying the fingerprint to show.
    """

    def __init__(self, target: Target, store: KnownHosts, checked: _Checked) -> None:
        self.target = target
        self.store = store
        self.checked = checked
        self.verified = False

    def missing_host_key(  # type: ignore[override]
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        blob = key.asbytes()
        key_type = key.get_name()
        shown = fingerprint(blob)
        name = self.target.key_name
        judgement = self.store.judge(name, key_type, blob)
        if judgement.verdict is Verdict.TRUSTED:
            self.verified = True
            self.checked.key_type = key_type
            self.checked.key_fingerprint = shown
            log.debug(
                "host key of %s is %s %s (%s)", name, key_type, shown, judgement.entries[0].source
            )
            return
        if judgement.verdict is Verdict.UNKNOWN:
            raise UnknownHostKeyError(self.target.spec, name, key_type, shown)
        raise ChangedHostKeyError(
            self.target.spec,
            name,
            key_type,
            shown,
            judgement.entries,
            revoked=judgement.verdict is Verdict.REVOKED,
        )


def _login(
    target: Target, trust: TrustSources, via: paramiko.SSHClient | None
) -> tuple[paramiko.SSHClient, _Checked]:
    store = trust.store_for(target)
    sock = _open_socket(target, via)
    checked = _Checked()
    policy = _VerifyingPolicy(target, store, checked)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(policy)

    def transport_factory(sock: Any, /, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(sock, disabled_algorithms=kwargs.get("disabled_algorithms"))
        options = transport.get_security_options()
        options.key_types = store.preferred_algorithms(target.key_name, options.key_types)
        return transport

    log.debug("connecting to %s", target.label)
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            sock=sock,
            key_filename=cast(Any, [str(p) for p in target.identity_files] or None),
            allow_agent=not target.identities_only,
            look_for_keys=not target.identities_only,
            timeout=target.connect_timeout,
            banner_timeout=target.connect_timeout,
            auth_timeout=AUTH_TIMEOUT_S,
            transport_factory=transport_factory,
        )
    except TransportError:
        client.close()
        _close_quietly(sock)
        raise
    except Exception as exc:
        client.close()
        _close_quietly(sock)
        raise _translate(exc, target, verified=policy.verified) from exc
    return client, checked


def _open_socket(target: Target, via: paramiko.SSHClient | None) -> Any:
    """A connected byte stream to ``target``: TCP, a jump host's channel, or ProxyCommand."""
    try:
        if via is not None:
            transport = via.get_transport()
            if transport is None:
                raise TransientTransportError(f"the jump host before {target.label} went away")
            return transport.open_channel(
                "direct-tcpip",
                (target.hostname, target.port),
                ("127.0.0.1", 0),
                timeout=target.connect_timeout,
            )
        if target.proxy_command:
            log.debug("reaching %s through ProxyCommand", target.label)
            return paramiko.ProxyCommand(target.proxy_command)
        return socket.create_connection(
            (target.hostname, target.port), timeout=target.connect_timeout
        )
    except TransportError:
        raise
    except Exception as exc:
        raise _translate(exc, target, verified=False) from exc


def _translate(exc: BaseException, target: Target, *, verified: bool) -> TransportError:
    """Turn a paramiko or socket error into a clear :class:`TransportError`.

    Args:
        exc: The error.
        target: The host being connected to.
        verified: The host key was already accepted, so the failure happened while logging in:
            that is never retried.
    """
    where = target.label
    if verified:
        if isinstance(exc, OSError | EOFError):
            return TransportError(
                f"the connection to {where} was lost while logging in", hint=_CONNECT_HINT
            )
        return _auth_error(exc, target)
    if isinstance(exc, OSError | EOFError):
        return _network_error(exc, target)
    if isinstance(exc, paramiko.ChannelException):
        message = f"the jump host could not open a connection to {where}: {exc.text}"
        if exc.code == 2:  # connect failed: the far side refused or timed out
            return TransientTransportError(message, hint=_CONNECT_HINT)
        return TransportError(
            message, hint="the jump host may forbid forwarding (AllowTcpForwarding)"
        )
    if isinstance(exc, paramiko.ssh_exception.ProxyCommandFailure):
        return TransportError(
            f"the ProxyCommand for {where} failed: {exc}",
            hint="check ProxyCommand in ~/.ssh/config",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return _auth_error(exc, target)
    if isinstance(exc, paramiko.SSHException):
        text = str(exc)
        if "ncompatible" in text:
            return TransportError(
                f"cannot agree on SSH algorithms with {where}: {text}",
                hint="the server may be very old or very restricted; ask your admins",
            )
        return TransientTransportError(
            f"the SSH handshake with {where} failed: {text}", hint=_CONNECT_HINT
        )
    return TransportError(f"SSH connection to {where} failed: {exc}", hint=_CONNECT_HINT)


def _network_error(exc: OSError | EOFError, target: Target) -> TransportError:
    where = target.label
    if isinstance(exc, socket.gaierror):
        if exc.errno == socket.EAI_AGAIN:
            return TransientTransportError(
                f"cannot resolve {target.hostname!r} right now (temporary DNS failure)",
                hint=_CONNECT_HINT,
            )
        return TransportError(
            f"cannot resolve host name {target.hostname!r}",
            hint="check the spelling, or add a Host entry with HostName to ~/.ssh/config",
        )
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return TransientTransportError(f"{where} refused the connection", hint=_CONNECT_HINT)
    if isinstance(exc, TimeoutError):
        return TransientTransportError(f"connecting to {where} timed out", hint=_CONNECT_HINT)
    if isinstance(exc, EOFError):
        return TransientTransportError(
            f"{where} closed the connection during the SSH handshake", hint=_CONNECT_HINT
        )
    message = f"cannot connect to {where}: {exc.strerror or exc}"
    if exc.errno in _TRANSIENT_ERRNOS:
        return TransientTransportError(message, hint=_CONNECT_HINT)
    return TransportError(message, hint=_CONNECT_HINT)


def _auth_error(exc: BaseException, target: Target) -> TransportError:
    who = f"{target.user}@{target.hostname}:{target.port}"
    tried = describe_key_sources(target)
    if isinstance(exc, paramiko.BadAuthenticationType):
        allowed = ", ".join(exc.allowed_types) or "none"
        return AuthenticationError(
            f"{who} does not accept key authentication (it allows: {allowed})",
            hint="hpcjobs logs in with SSH keys only; ask your admins to enable publickey",
        )
    if isinstance(exc, paramiko.PasswordRequiredException):
        return AuthenticationError(
            f"SSH authentication as {who} failed: a private key is protected by a passphrase "
            f"and no ssh-agent offered it (tried {tried})",
            hint="load the key into your agent with 'ssh-add PATH'; hpcjobs never asks for "
            "passphrases",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return AuthenticationError(
            f"SSH authentication as {who} failed: the server accepted none of the keys offered "
            f"(tried {tried})",
            hint="check the user name ([user@]host), that your public key is in "
            "~/.ssh/authorized_keys on that host, or load the right key with 'ssh-add'",
        )
    if isinstance(exc, paramiko.SSHException) and "No authentication methods" in str(exc):
        return AuthenticationError(
            f"SSH authentication as {who} failed: no key to offer (tried {tried})",
            hint="create a key with 'ssh-keygen -t ed25519', install it on the cluster, "
            "or set IdentityFile in ~/.ssh/config",
        )
    return AuthenticationError(
        f"SSH authentication as {who} failed: {exc}",
        hint="check IdentityFile in ~/.ssh/config and that the key files are readable",
    )


def describe_key_sources(target: Target) -> str:
    """Where keys were looked for, for error messages (paths only, never key material)."""
    parts: list[str] = []
    if target.identity_files:
        parts.append("IdentityFile " + ", ".join(str(p) for p in target.identity_files))
    if not target.identities_only:
        parts.append("ssh-agent" if os.environ.get("SSH_AUTH_SOCK") else "no ssh-agent running")
        found = _default_keys()
        parts.append(
            "default keys " + ", ".join(str(p) for p in found) if found else "no ~/.ssh/id_* keys"
        )
    return "; ".join(parts) or "nothing"


def _default_keys() -> Sequence[Path]:
    folder = Path.home() / ".ssh"
    return [folder / name for name in DEFAULT_KEYS if (folder / name).is_file()]


def _close_quietly(sock: Any) -> None:
    with contextlib.suppress(Exception):
        sock.close()
