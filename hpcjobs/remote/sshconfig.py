"""Resolve a host argument through OpenSSH's client config (``~/.ssh/config``).

The settings hpcjobs honours: ``HostName``, ``User``, ``Port``, ``IdentityFile``,
``IdentitiesOnly``, ``ProxyJump``, ``ProxyCommand``, ``HostKeyAlias``, ``UserKnownHostsFile``,
``HashKnownHosts`` and ``ConnectTimeout``. ``Include`` lines are expanded. Host key checking is
always strict, whatever ``StrictHostKeyChecking`` says, and the agent is never forwarded.
"""

from __future__ import annotations

import getpass
import glob
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hpcjobs.errors import BadInputError, TransportError
from hpcjobs.remote.hostspec import HostSpec, format_host_port, parse_host_spec
from hpcjobs.safetext import parse_int
from hpcjobs.textlines import split_lines

if TYPE_CHECKING:
    from paramiko import SSHConfig

SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
DEFAULT_CONNECT_TIMEOUT = 15.0
MAX_JUMPS = 8

_INCLUDE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+?)\s*$", re.IGNORECASE)
_MAX_INCLUDE_DEPTH = 16


def user_config_path() -> Path:
    """``~/.ssh/config`` (``~`` is ``$HOME``)."""
    return Path.home() / ".ssh" / "config"


def default_known_hosts() -> Path:
    """``~/.ssh/known_hosts``."""
    return Path.home() / ".ssh" / "known_hosts"


@dataclass(frozen=True)
class Target:
    """Where and how to connect, after applying the SSH client config.

    Attributes:
        alias: The host as the user wrote it (the ``Host`` pattern it matched).
        spec: The whole host argument as the user wrote it, ``[user@]host[:port]``.
        hostname: The real host name or address (``HostName``).
        port: The TCP port.
        user: The remote user.
        identity_files: ``IdentityFile`` entries that exist, in order.
        identities_only: Use only ``identity_files`` (no agent, no default keys).
        jumps: ``ProxyJump`` hops, already resolved, first hop first.
        proxy_command: A ``ProxyCommand`` to reach the host through, if any.
        host_key_alias: ``HostKeyAlias``: the name to look the host key up under.
        known_hosts_files: ``UserKnownHostsFile`` entries (default ``~/.ssh/known_hosts``).
        hash_known_hosts: Whether new ``known_hosts`` entries are hashed.
        connect_timeout: Seconds to wait for the TCP connection and the SSH banner.
    """

    alias: str
    spec: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[Path, ...] = ()
    identities_only: bool = False
    jumps: tuple[Target, ...] = ()
    proxy_command: str | None = None
    host_key_alias: str | None = None
    known_hosts_files: tuple[Path, ...] = field(default_factory=lambda: (default_known_hosts(),))
    hash_known_hosts: bool = False
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def key_name(self) -> str:
        """The name the host key is recorded under in ``known_hosts``."""
        if self.host_key_alias:
            return self.host_key_alias
        return format_host_port(self.hostname, self.port)

    @property
    def label(self) -> str:
        """``user@host:port`` for messages, with the alias when it differs."""
        text = f"{self.user}@{self.hostname}:{self.port}"
        return text if self.alias == self.hostname else f"{self.alias} ({text})"


def load_ssh_config(paths: list[Path] | None = None) -> SSHConfig:
    """Parse the SSH client config files, first file first (its values win).

    Args:
        paths: The files to read; default ``~/.ssh/config`` then ``/etc/ssh/ssh_config``.
            Missing files are skipped.

    Raises:
        TransportError: A file exists but cannot be read or parsed.
    """
    import paramiko

    config = paramiko.SSHConfig()
    files = paths if paths is not None else [user_config_path(), SYSTEM_CONFIG]
    for path in files:
        if not path.is_file():
            continue
        try:
            text = _expand_includes(path, path.parent, 0)
            config.parse(split_lines(text))
        except (OSError, UnicodeDecodeError, paramiko.ssh_exception.ConfigParseError) as exc:
            raise TransportError(
                f"cannot read the SSH client config {path}: {exc}",
                hint="fix or move the file; hpcjobs reads it the way ssh does",
            ) from exc
    return config


def resolve_target(
    spec: HostSpec,
    config: SSHConfig,
    *,
    known_hosts: Path | None = None,
    _depth: int = 0,
) -> Target:
    """Apply the SSH config to ``spec``. Values in ``spec`` win over the config.

    Args:
        spec: The parsed host argument.
        config: From :func:`load_ssh_config`.
        known_hosts: Use this file instead of ``UserKnownHostsFile`` (for the target and its
            jump hosts).

    Raises:
        TransportError: The config cannot be applied (for example ``Match exec`` fails).
        BadInputError: A ``ProxyJump`` hop or ``Port`` in the config is malformed.
    """
    try:
        options = config.lookup(spec.host)
    except Exception as exc:  # paramiko raises assorted errors for Match/Canonicalize
        raise TransportError(
            f"cannot apply the SSH client config to {spec.host!r}: {exc}",
            hint="check the Host/Match blocks of ~/.ssh/config",
        ) from exc
    hostname = str(options.get("hostname") or spec.host)
    port = spec.port if spec.port is not None else _config_port(options.get("port"), spec.host)
    user = spec.user or options.get("user") or getpass.getuser()
    identity_files = tuple(
        path
        for path in (Path(p).expanduser() for p in options.get("identityfile", []))
        if path.is_file()
    )
    jumps: tuple[Target, ...] = ()
    jump_value = options.get("proxyjump")
    if jump_value and jump_value.lower() != "none":
        if _depth >= MAX_JUMPS:
            raise TransportError(
                f"ProxyJump for {spec.host!r} nests more than {MAX_JUMPS} hops (a loop?)",
                hint="check the ProxyJump lines of ~/.ssh/config",
            )
        jumps = _resolve_jumps(jump_value, config, known_hosts, _depth)
    proxy_command = options.get("proxycommand")
    if jumps or (proxy_command and proxy_command.lower() == "none"):
        proxy_command = None
    known = (
        (known_hosts,)
        if known_hosts is not None
        else _known_hosts_files(options.get("userknownhostsfile"))
    )
    timeout = options.get("connecttimeout") or ""
    return Target(
        alias=spec.host,
        spec=str(spec),
        hostname=hostname,
        port=port,
        user=str(user),
        identity_files=identity_files,
        identities_only=_yes(options.get("identitiesonly")),
        jumps=jumps,
        proxy_command=proxy_command or None,
        host_key_alias=options.get("hostkeyalias") or None,
        known_hosts_files=known,
        hash_known_hosts=_yes(options.get("hashknownhosts")),
        connect_timeout=float(timeout) if timeout.isdigit() else DEFAULT_CONNECT_TIMEOUT,
    )


def _resolve_jumps(
    value: str, config: SSHConfig, known_hosts: Path | None, depth: int
) -> tuple[Target, ...]:
    hops: list[Target] = []
    for item in value.split(","):
        text = item.strip()
        if text.startswith("ssh://"):
            text = text[len("ssh://") :]
        try:
            hop_spec = parse_host_spec(text)
        except BadInputError as exc:
            raise BadInputError(
                f"invalid ProxyJump hop {item.strip()!r}: {exc.message}", hint=exc.hint
            ) from exc
        hop = resolve_target(hop_spec, config, known_hosts=known_hosts, _depth=depth + 1)
        # A hop's own jumps come before it, as with ssh -J.
        hops.extend(hop.jumps)
        hops.append(_without_jumps(hop))
    return tuple(hops)


def _without_jumps(target: Target) -> Target:
    return replace(target, jumps=())


def _config_port(value: str | None, host: str) -> int:
    if value is None:
        return 22
    try:
        return parse_int(value, minimum=1, maximum=65535)
    except ValueError:
        raise BadInputError(f"~/.ssh/config sets an invalid Port {value!r} for {host!r}") from None


def _known_hosts_files(value: str | None) -> tuple[Path, ...]:
    if not value:
        return (default_known_hosts(),)
    return tuple(Path(p).expanduser() for p in value.split())


def _yes(value: str | None) -> bool:
    return (value or "").strip().lower() in ("yes", "true")


def _expand_includes(path: Path, base: Path, depth: int) -> str:
    """The text of ``path`` with every ``Include`` line replaced by the files it names."""
    if depth > _MAX_INCLUDE_DEPTH:
        raise OSError(f"Include nests deeper than {_MAX_INCLUDE_DEPTH} levels in {path}")
    lines: list[str] = []
    for line in split_lines(path.read_bytes().decode("utf-8")):
        match = _INCLUDE.match(line)
        if not match:
            lines.append(line)
            continue
        for pattern in match.group(1).split():
            full = Path(pattern).expanduser()
            if not full.is_absolute():
                full = base / full
            for name in sorted(glob.glob(str(full))):
                included = Path(name)
                if included.is_file():
                    lines.append(_expand_includes(included, base, depth + 1))
    return "\n".join(lines) + "\n"
