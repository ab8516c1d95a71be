"""``SshRunner``: the :class:`~hpcjobs.runner.Runner` that runs commands on a remote host.

One runner owns one SSH connection, opened on first use and reused by every command and file
operation until :meth:`SshRunner.close`. Commands keep the local runner's contract: argv lists
(quoted for the remote shell), a timeout on every call, and :class:`~hpcjobs.errors.CommandError`
for a non-zero exit. Connection, authentication and host key problems raise
:class:`~hpcjobs.errors.TransportError` (exit 4).
"""

from __future__ import annotations

import contextlib
import select
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, TypeVar

from hpcjobs.atomicfile import PRIVATE, PRIVATE_DIR
from hpcjobs.backoff import Backoff
from hpcjobs.errors import (
    BadInputError,
    CommandError,
    CommandNotFoundError,
    CommandTimeoutError,
    TransportError,
)
from hpcjobs.logger import logger
from hpcjobs.remote.command import remote_command
from hpcjobs.remote.hostkeys import KnownHosts, TrustSources
from hpcjobs.remote.hostspec import SITE_LOGIN_HOSTS, parse_host_spec
from hpcjobs.remote.policy import CONNECT_RETRY, TransientTransportError
from hpcjobs.remote.sshconfig import Target, load_ssh_config, resolve_target
from hpcjobs.runner import DEFAULT_TIMEOUT, Result, checked_argv
from hpcjobs.textlines import split_lines

if TYPE_CHECKING:
    import paramiko

    from hpcjobs.remote.connect import Connection

log = logger(__name__)

RemotePath = str | PurePosixPath
_T = TypeVar("_T")

_READ_SIZE = 65536
_SEND_SIZE = 32768


class SshRunner:
    """Runs commands and moves files on a remote host over one SSH connection.

    Args:
        targets: Where to connect; the first that answers is used (later ones are tried only
            after network failures, never after a host key or login failure).
        trust: Pinned keys and system files to verify host keys against.
        env: Variables set for every command (like :class:`~hpcjobs.runner.LocalRunner`).
        default_timeout: Seconds a command may run when ``run`` gets no timeout.
        retry: How to retry connections that fail for network reasons.
    """

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        trust: TrustSources | None = None,
        env: Mapping[str, str] | None = None,
        default_timeout: float = DEFAULT_TIMEOUT,
        retry: Backoff | None = None,
    ) -> None:
        if not targets:
            raise ValueError("SshRunner needs at least one target")
        self.targets = tuple(targets)
        self.trust = trust or TrustSources()
        self.env = dict(env or {})
        self.default_timeout = default_timeout
        self.retry = retry or CONNECT_RETRY
        self._connection: Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()

    # ---- connection --------------------------------------------------------------------

    @property
    def target(self) -> Target:
        """The host connected to, or the first candidate before connecting."""
        return self._connection.target if self._connection else self.targets[0]

    @property
    def host_key(self) -> tuple[str, str] | None:
        """The verified host key (type, ``SHA256:`` fingerprint), once connected."""
        if self._connection is None:
            return None
        return self._connection.key_type, self._connection.key_fingerprint

    def connect(self) -> Connection:
        """The open connection, connecting (or reconnecting after a drop) when needed.

        Raises:
            TransportError: No target could be reached and logged in to (exit 4).
        """
        with self._lock:
            if self._connection is not None and self._connection.is_active():
                return self._connection
            self._drop()
            from hpcjobs.remote.connect import connect

            last: TransientTransportError | None = None
            for target in self.targets:
                try:
                    self._connection = connect(target, self.trust, retry=self.retry)
                    return self._connection
                except TransientTransportError as exc:
                    last = exc
                    if len(self.targets) > 1:
                        log.warning("%s; trying the next login host", exc.message)
            assert last is not None
            raise last

    def close(self) -> None:
        """Close the SFTP channel and the connection. The runner reconnects if used again."""
        with self._lock:
            self._drop()

    def __enter__(self) -> SshRunner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _drop(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception as exc:  # a dead channel may fail to close; the socket goes anyway
                log.debug("closing SFTP: %s", exc)
            self._sftp = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # ---- commands ----------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        """Run ``argv`` on the remote host and wait for it.

        Args:
            argv: The program and its arguments; each is quoted for the remote shell.
            stdin: Text fed to the command's standard input (else it reads end-of-file).
            timeout: Seconds before the command is abandoned (default ``default_timeout``).
            check: Raise :class:`CommandError` for a non-zero exit status.
            env: Variables set for this command, on top of the runner's ``env``.

        Raises:
            CommandError: The command exited non-zero (with ``check``).
            CommandNotFoundError: The program is not on the remote PATH.
            CommandTimeoutError: The command ran longer than ``timeout``.
            TransportError: The connection failed or was lost (exit 4).
        """
        items = checked_argv(argv)
        command = remote_command(items, {**self.env, **(env or {})})
        limit = self.default_timeout if timeout is None else timeout
        connection = self.connect()
        log.debug("run on %s: %s", connection.target.label, shlex.join(items))
        import paramiko

        try:
            channel = connection.transport.open_session(timeout=connection.target.connect_timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                f"cannot start {items[0]} on {connection.target.label}: {exc}",
                hint="the connection may have dropped; run the command again",
            ) from exc
        try:
            out, err, status = _collect(channel, (stdin or "").encode(), limit, items)
        finally:
            channel.close()
        if status is None:
            if not connection.is_active():
                raise TransportError(
                    f"the connection to {connection.target.label} was lost while {items[0]} ran",
                    hint="check the network, then look at the job state before running it again",
                )
            status = -1  # ended by a signal: sshd sends exit-signal instead of a status
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        if status == 127 and _not_found(items[0], stderr):
            raise CommandNotFoundError(
                items,
                hint=f"{items[0]} is not on the PATH of non-interactive logins on "
                f"{connection.target.hostname}; ask your admins, or check ~/.bashrc there",
            )
        result = Result(tuple(items), status, stdout, stderr)
        if check and status != 0:
            raise CommandError(items, status, stderr, stdout=stdout)
        return result

    # ---- files -------------------------------------------------------------------------

    def makedirs(self, remote_path: RemotePath, mode: int = PRIVATE_DIR) -> None:
        """Create a remote folder and its missing parents, each new one with ``mode``.

        ``~/`` at the start means the remote home folder; relative paths start there too.

        Raises:
            TransportError: The folder cannot be created (exit 4).
        """
        from hpcjobs.remote import files

        path = _remote_path(remote_path)
        self._file_op("create folder", path, lambda sftp: files.makedirs(sftp, path, mode))

    def write_text(self, remote_path: RemotePath, text: str, mode: int = PRIVATE) -> None:
        """Write ``text`` (UTF-8) to a remote file created with ``mode``; see :meth:`upload`."""
        self.upload(text.encode("utf-8"), remote_path, mode)

    def write_bytes(self, remote_path: RemotePath, data: bytes, mode: int = PRIVATE) -> None:
        """Write ``data`` to a remote file created with ``mode``; see :meth:`upload`."""
        self.upload(data, remote_path, mode)

    def upload(
        self, local_or_text: Path | str | bytes, remote_path: RemotePath, mode: int = PRIVATE
    ) -> None:
        """Copy a local file, text or bytes to a remote file created with ``mode``.

        The data goes to a temporary file that is created with ``mode`` and then renamed over
        ``remote_path``, so the file is never more open than ``mode`` and never half-written.
        The folder must exist (see :meth:`makedirs`).

        Args:
            local_or_text: A :class:`~pathlib.Path` is read as a local file; a ``str`` is the
                text itself (UTF-8), never a path; ``bytes`` are written as they are.
            remote_path: Where to write; ``~/`` means the remote home folder.
            mode: Permission bits of the new file.

        Raises:
            BadInputError: The local file cannot be read.
            TransportError: The remote file cannot be written (exit 4).
        """
        from hpcjobs.remote import files

        if isinstance(local_or_text, Path):
            try:
                data = local_or_text.read_bytes()
            except OSError as exc:
                raise BadInputError(f"cannot read {local_or_text}: {exc.strerror}") from exc
        elif isinstance(local_or_text, str):
            data = local_or_text.encode("utf-8")
        else:
            data = bytes(local_or_text)
        path = _remote_path(remote_path)
        self._file_op("write", path, lambda sftp: files.write_bytes(sftp, path, data, mode))

    def read_text(self, remote_path: RemotePath) -> str:
        """The contents of a remote file, decoded as UTF-8 (bad bytes replaced).

        Raises:
            TransportError: The file cannot be read (exit 4).
        """
        from hpcjobs.remote import files

        path = _remote_path(remote_path)
        data = self._file_op("read", path, lambda sftp: files.read_bytes(sftp, path))
        return data.decode("utf-8", errors="replace")

    def _file_op(self, what: str, path: str, action: Callable[[paramiko.SFTPClient], _T]) -> _T:
        with self._lock:
            sftp = self._sftp_client()
            try:
                return action(sftp)
            except OSError as exc:
                reason = exc.strerror or str(exc) or type(exc).__name__
                raise TransportError(
                    f"cannot {what} {path} on {self.target.label}: {reason}",
                    hint="check the path and its permissions on the remote host",
                ) from exc

    def _sftp_client(self) -> paramiko.SFTPClient:
        connection = self.connect()
        if self._sftp is not None:
            return self._sftp
        import paramiko

        try:
            sftp = paramiko.SFTPClient.from_transport(connection.transport)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransportError(
                f"cannot open SFTP on {connection.target.label}: {exc}",
                hint="the server must enable the sftp subsystem",
            ) from exc
        if sftp is None:
            raise TransportError(f"cannot open SFTP on {connection.target.label}")
        self._sftp = sftp
        return sftp


def connect_runner(
    host_spec: str,
    *,
    site_login_hosts: Sequence[str] | None = None,
    pinned_host_keys: Sequence[str] | None = None,
    known_hosts: Path | None = None,
    ssh_config: Sequence[Path] | None = None,
    env: Mapping[str, str] | None = None,
    retry: Backoff | None = None,
) -> SshRunner:
    """An :class:`SshRunner` for ``[user@]host[:port]``, resolved through ``~/.ssh/config``.

    Nothing connects yet: the first command or file operation does.

    Args:
        host_spec: ``[user@]host[:port]``, or ``@site`` for the site's login hosts (tried in
            order while they fail for network reasons).
        site_login_hosts: The site config's ``login_hosts``.
        pinned_host_keys: The site config's ``host_keys`` (``known_hosts`` lines; a line
            without host names applies to every login host).
        known_hosts: Use this file instead of ``~/.ssh/known_hosts``/``UserKnownHostsFile``.
        ssh_config: Client config files (default ``~/.ssh/config``, ``/etc/ssh/ssh_config``).
        env: Variables set for every remote command.
        retry: Connection retry policy (default: 4 attempts with backoff).

    Raises:
        BadInputError: ``host_spec`` is malformed, or ``@site`` without login hosts.
        ConfigError: A pinned host key line is malformed.
        TransportError: The SSH client config cannot be read or applied.
    """
    login = tuple(site_login_hosts or ())
    if host_spec == SITE_LOGIN_HOSTS:
        if not login:
            raise BadInputError(
                f"--host {SITE_LOGIN_HOSTS} needs login_hosts in the site config",
                hint="pass --host [user@]host[:port], or ask your admins to add login_hosts",
            )
        specs = [parse_host_spec(h) for h in login]
    else:
        specs = [parse_host_spec(host_spec)]
    trust = TrustSources(pinned=tuple(pinned_host_keys or ()), login_hosts=login)
    KnownHosts.load([], pinned=trust.pinned, login_hosts=login, global_files=())  # check early
    config = load_ssh_config(list(ssh_config) if ssh_config is not None else None)
    targets = [resolve_target(spec, config, known_hosts=known_hosts) for spec in specs]
    return SshRunner(targets, trust=trust, env=env, retry=retry)


def _remote_path(value: RemotePath) -> str:
    text = str(value)
    if not text or "\0" in text:
        raise BadInputError(f"invalid remote path {text!r}")
    if text == "~":
        return "."
    if text.startswith("~/"):
        return text[2:] or "."
    if text.startswith("~"):
        raise BadInputError(
            f"remote path {text!r}: only '~/' (your own home folder) is understood",
            hint="write the full path instead",
        )
    return text


def _not_found(program: str, stderr: str) -> bool:
    """Whether a 127 exit came from the shell (or env) not finding ``program``."""
    tail = split_lines(stderr.strip())[-1:] or [""]
    line = tail[0]
    return program in line and ("not found" in line or "No such file or directory" in line)


def _collect(
    channel: paramiko.Channel, data: bytes, limit: float, argv: list[str]
) -> tuple[bytes, bytes, int | None]:
    """Feed ``data`` to the command, gather its output, and wait for its exit status.

    Reading and writing are interleaved so a command that writes a lot before it has read
    all its input cannot deadlock us.

    Returns:
        stdout, stderr, and the exit status (None when the channel closed without one).
    """
    deadline = time.monotonic() + limit
    out = bytearray()
    err = bytearray()
    pending = memoryview(data)
    if not pending:
        with contextlib.suppress(OSError):
            channel.shutdown_write()
    wakeup = channel.fileno()
    while True:
        busy = False
        while channel.recv_ready():
            out += channel.recv(_READ_SIZE)
            busy = True
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(_READ_SIZE)
            busy = True
        if pending and channel.send_ready():
            pending = _send_some(channel, pending)
            busy = True
        drained = not channel.recv_ready() and not channel.recv_stderr_ready()
        if drained and (channel.eof_received or channel.closed):
            if channel.exit_status_ready():
                return bytes(out), bytes(err), channel.recv_exit_status()
            if channel.closed:
                return bytes(out), bytes(err), None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommandTimeoutError(argv, limit)
        if busy:
            continue
        if drained and channel.eof_received:
            channel.status_event.wait(min(remaining, 1.0))
        else:
            select.select([wakeup], [], [], min(remaining, 0.05 if pending else 1.0))


def _send_some(channel: paramiko.Channel, pending: memoryview) -> memoryview:
    """Send the next chunk of input; close our side once all is sent or the command is gone."""
    try:
        sent = 0 if channel.closed else channel.send(bytes(pending[:_SEND_SIZE]))
    except OSError:
        sent = 0
    rest = pending[sent:] if sent else memoryview(b"")
    if not rest:
        with contextlib.suppress(OSError):
            channel.shutdown_write()
    return rest
