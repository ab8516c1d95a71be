"""Host keys: read ``known_hosts`` files and pinned keys, judge a server's key, record new ones.

A server's key is accepted only when an entry for its name holds exactly that key. A name with
no entry is *unknown*; a name whose entries all hold other keys has a *changed* key. Both are
refused: the first can be trusted on purpose (``hpcjobs ssh trust``), the second never is.
``@revoked`` entries are honoured; ``@cert-authority`` entries are ignored (host certificates
are not supported). Hashed names (``|1|salt|hash``), ``*``/``?`` patterns and ``!`` negation
work as in OpenSSH. Parsing needs no paramiko: keys are compared as raw public-key blobs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from hpcjobs.atomicfile import PRIVATE, PRIVATE_DIR
from hpcjobs.errors import ConfigError, TransportError
from hpcjobs.logger import logger
from hpcjobs.remote.hostspec import login_key_names
from hpcjobs.textlines import split_lines

if TYPE_CHECKING:
    from hpcjobs.remote.sshconfig import Target

log = logger(__name__)

#: The system-wide known hosts files OpenSSH reads (``GlobalKnownHostsFile``).
GLOBAL_KNOWN_HOSTS = (Path("/etc/ssh/ssh_known_hosts"), Path("/etc/ssh/ssh_known_hosts2"))

#: The host-key algorithms the transport may negotiate for each recorded key type.
_ALGORITHMS = {
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"),
}

_KEY_TYPE = re.compile(r"(ssh|ecdsa|sk)-[a-z0-9@.-]+")


class Verdict(Enum):
    """What the known keys say about a server's key."""

    TRUSTED = "trusted"
    UNKNOWN = "unknown"
    CHANGED = "changed"
    REVOKED = "revoked"


@dataclass(frozen=True)
class KnownKey:
    """One host key entry from a ``known_hosts`` file or from the site config."""

    patterns: tuple[str, ...]
    key_type: str
    blob: bytes
    source: str
    revoked: bool = False
    pinned: bool = False

    @property
    def fingerprint(self) -> str:
        """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
        return fingerprint(self.blob)

    def matches(self, name: str) -> bool:
        """Whether this entry applies to host ``name`` (as
        :func:`~hpcjobs.remote.hostspec.format_host_port` writes it)."""
        return host_matches(self.patterns, name)


@dataclass(frozen=True)
class Judgement:
    """The verdict on a server key, and the entries that led to it."""

    verdict: Verdict
    entries: tuple[KnownKey, ...] = ()


class UnknownHostKeyError(TransportError):
    """The server's key is not recorded anywhere. Carries it so it can be shown and trusted."""

    def __init__(self, host: str, key_name: str, key_type: str, fingerprint_text: str) -> None:
        super().__init__(
            f"the host key of {host} is not known: it presents {key_type} {fingerprint_text}. "
            "hpcjobs refuses hosts it cannot verify",
            hint=f"if that fingerprint is the one your admins publish for this host, trust it "
            f"with 'hpcjobs ssh trust {host}' (or ask them to pin it in the site config's "
            "host_keys)",
        )
        self.key_name = key_name
        self.key_type = key_type
        self.fingerprint = fingerprint_text


class ChangedHostKeyError(TransportError):
    """The server presents a different key than the one recorded. Always refused."""

    def __init__(
        self,
        host: str,
        key_name: str,
        key_type: str,
        fingerprint_text: str,
        recorded: Sequence[KnownKey],
        *,
        revoked: bool = False,
    ) -> None:
        where = "; ".join(f"{k.source} has {k.key_type} {k.fingerprint}" for k in recorded)
        if revoked:
            message = (
                f"the host key of {host} ({key_type} {fingerprint_text}) is REVOKED ({where}). "
                "hpcjobs refuses to connect"
            )
        else:
            message = (
                f"the host key of {host} has CHANGED: it presents {key_type} {fingerprint_text}, "
                f"but {where}. Someone may be intercepting the connection; hpcjobs refuses it"
            )
        pinned = any(k.pinned for k in recorded)
        if pinned:
            hint = "the site config pins this host's key: ask your admins to check the login "
            hint += "node and update host_keys if it was really replaced"
        else:
            files = sorted({k.source.rsplit(":", 1)[0] for k in recorded})
            hint = (
                "ask your admins whether the host key was replaced. Only if they confirm it, "
                f"remove the old entry with \"ssh-keygen -R '{key_name}' -f {files[0]}\" and "
                f"run 'hpcjobs ssh trust {host}'"
                if files
                else "ask your admins whether the host key was replaced"
            )
        super().__init__(message, hint=hint)
        self.key_name = key_name
        self.key_type = key_type
        self.fingerprint = fingerprint_text
        self.recorded = tuple(recorded)


class KnownHosts:
    """The keys hpcjobs trusts: pinned keys, then system and user ``known_hosts`` files."""

    def __init__(self, entries: Iterable[KnownKey] = ()) -> None:
        self.entries: list[KnownKey] = list(entries)

    @classmethod
    def load(
        cls,
        files: Sequence[Path],
        *,
        pinned: Sequence[str] = (),
        login_hosts: Sequence[str] = (),
        global_files: Sequence[Path] = GLOBAL_KNOWN_HOSTS,
    ) -> KnownHosts:
        """Read the pinned keys and the ``known_hosts`` files.

        Args:
            files: The user's ``known_hosts`` files (missing ones are skipped).
            pinned: ``known_hosts`` lines from the site config. A line without host names
                (``ssh-ed25519 AAAA...``) applies to every host in ``login_hosts``.
            login_hosts: The site's login hosts, ``[user@]host[:port]``.
            global_files: The system files (default ``/etc/ssh/ssh_known_hosts``).

        Raises:
            ConfigError: A pinned line is malformed.
            TransportError: A ``known_hosts`` file exists but cannot be read.
        """
        store = cls(parse_pinned(pinned, login_hosts))
        for path in [*global_files, *files]:
            store.entries.extend(read_known_hosts(path))
        return store

    def judge(self, name: str, key_type: str, blob: bytes) -> Judgement:
        """Judge the key ``blob`` of type ``key_type`` that host ``name`` presented."""
        entries = [e for e in self.entries if e.matches(name)]
        revoked = [e for e in entries if e.revoked and e.blob == blob]
        if revoked:
            return Judgement(Verdict.REVOKED, tuple(revoked))
        valid = [e for e in entries if not e.revoked]
        matching = [e for e in valid if e.blob == blob]
        if matching:
            return Judgement(Verdict.TRUSTED, tuple(matching))
        if valid:
            return Judgement(Verdict.CHANGED, tuple(valid))
        return Judgement(Verdict.UNKNOWN)

    def known_types(self, name: str) -> list[str]:
        """The key types recorded for ``name``, in file order, without repeats."""
        types: list[str] = []
        for entry in self.entries:
            if not entry.revoked and entry.key_type not in types and entry.matches(name):
                types.append(entry.key_type)
        return types

    def preferred_algorithms(self, name: str, offered: Sequence[str]) -> list[str]:
        """``offered`` host-key algorithms, reordered so the recorded types come first.

        The server then shows the key we have on record, rather than another type that would
        look unknown or changed.
        """
        first: list[str] = []
        for key_type in self.known_types(name):
            for algorithm in _ALGORITHMS.get(key_type, (key_type,)):
                if algorithm in offered and algorithm not in first:
                    first.append(algorithm)
        return first + [a for a in offered if a not in first]


@dataclass(frozen=True)
class TrustSources:
    """Where trusted host keys come from, besides each target's ``UserKnownHostsFile``.

    Attributes:
        pinned: ``known_hosts`` lines from the site config (``host_keys``).
        login_hosts: The site's login hosts; pinned lines without host names apply to them.
        global_files: System-wide ``known_hosts`` files (default :data:`GLOBAL_KNOWN_HOSTS`).
    """

    pinned: tuple[str, ...] = ()
    login_hosts: tuple[str, ...] = ()
    global_files: tuple[Path, ...] | None = None

    def store_for(self, target: Target) -> KnownHosts:
        """All keys trusted for ``target``."""
        return KnownHosts.load(
            target.known_hosts_files,
            pinned=self.pinned,
            login_hosts=self.login_hosts,
            global_files=GLOBAL_KNOWN_HOSTS if self.global_files is None else self.global_files,
        )


def fingerprint(blob: bytes) -> str:
    """The SHA256 fingerprint of a public key blob, formatted like OpenSSH."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")
    return f"SHA256:{digest}"


def host_matches(patterns: Sequence[str], name: str) -> bool:
    """OpenSSH host matching: a hashed name or ``*``/``?`` pattern, ``!`` negates."""
    lowered = name.lower()
    positive = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        body = pattern[1:] if negated else pattern
        if body.startswith("|1|"):
            hit = _hashed_matches(body, name)
        else:
            hit = _glob(body.lower()).fullmatch(lowered) is not None
        if hit and negated:
            return False
        positive = positive or hit
    return positive


def hash_host(name: str, salt: bytes | None = None) -> str:
    """``|1|salt|hash``: the hashed form OpenSSH writes with ``HashKnownHosts yes``."""
    salt = salt if salt is not None else secrets.token_bytes(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def parse_line(line: str, source: str) -> KnownKey | None:
    """Parse one ``known_hosts`` line; None for blanks, comments, CA and unusable lines.

    Raises:
        ValueError: The line is malformed (bad fields or key data).
    """
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    fields = text.split()
    marker = fields.pop(0) if fields[0].startswith("@") else None
    if marker == "@cert-authority":
        return None
    if marker not in (None, "@revoked"):
        raise ValueError(f"unknown marker {marker!r}")
    if len(fields) < 3:
        raise ValueError("expected: host-names key-type base64-key [comment]")
    names, key_type, data = fields[0], fields[1], fields[2]
    blob = decode_key(key_type, data)
    return KnownKey(tuple(names.split(",")), key_type, blob, source, revoked=marker is not None)


def decode_key(key_type: str, data: str) -> bytes:
    """Decode a base64 public key and check that it says it is a ``key_type`` key.

    Raises:
        ValueError: Not base64, or the blob holds another key type.
    """
    if not _KEY_TYPE.fullmatch(key_type):
        raise ValueError(f"unknown key type {key_type!r}")
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("key data is not valid base64") from exc
    if len(blob) < 4:
        raise ValueError("key data is too short")
    (length,) = struct.unpack(">I", blob[:4])
    if blob[4 : 4 + length].decode("ascii", "replace") != key_type:
        raise ValueError(f"key data is not a {key_type} key")
    return blob


def parse_pinned(lines: Sequence[str], login_hosts: Sequence[str] = ()) -> list[KnownKey]:
    """Parse the site config's ``host_keys`` (``known_hosts`` lines).

    A line that starts with a key type has no host names: it applies to every login host.

    Raises:
        ConfigError: A line is malformed, or has no host names and no login hosts are set.
        BadInputError: A login host is malformed (as ``--host`` would find it).
    """
    names = login_key_names(login_hosts)
    entries: list[KnownKey] = []
    for index, line in enumerate(lines):
        source = f"site config host_keys[{index}]"
        try:
            entry = parse_pinned_line(line, names, source)
        except ValueError as exc:
            raise ConfigError(
                f"{source} is not a valid known_hosts line: {exc}",
                hint=PINNED_HINT,
            ) from exc
        if entry is not None:
            entries.append(entry)
    return entries


#: How to write a pinned host key line.
PINNED_HINT = (
    "copy the line from the login node's /etc/ssh/ssh_host_*_key.pub, prefixed with its host "
    "names, or from 'ssh-keyscan HOST'"
)


def parse_pinned_line(line: str, login_names: Sequence[str], source: str) -> KnownKey | None:
    """One pinned ``host_keys`` line; a line without host names applies to ``login_names``.

    Raises:
        ValueError: The line is malformed, or names no host and ``login_names`` is empty.
    """
    text = line.strip()
    if _KEY_TYPE.fullmatch(text.split(" ", 1)[0]):
        if not login_names:
            raise ValueError("it names no host and the site config has no login_hosts")
        text = f"{','.join(login_names)} {text}"
    entry = parse_line(text, source)
    if entry is None:
        return None
    return KnownKey(entry.patterns, entry.key_type, entry.blob, source, entry.revoked, True)


def read_known_hosts(path: Path) -> list[KnownKey]:
    """The usable entries of one ``known_hosts`` file; malformed lines are skipped.

    Raises:
        TransportError: The file exists but cannot be read.
    """
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise TransportError(
            f"cannot read known hosts file {path}: {exc.strerror or exc}",
            hint="check the file's owner and permissions",
        ) from exc
    entries: list[KnownKey] = []
    for number, line in enumerate(split_lines(text), start=1):
        try:
            entry = parse_line(line, f"{path}:{number}")
        except ValueError as exc:
            log.debug("skipping %s:%d: %s", path, number, exc)
            continue
        if entry is not None:
            entries.append(entry)
    return entries


def append_known_host(
    path: Path, name: str, key_type: str, blob: bytes, *, hashed: bool = False
) -> str:
    """Record a host key: append one line to ``path``, created 0600 (its folder 0700).

    Returns:
        The line written (without the newline).
    """
    host = hash_host(name) if hashed else name
    line = f"{host} {key_type} {base64.b64encode(blob).decode('ascii')}"
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, PRIVATE)
    with os.fdopen(fd, "ab") as handle:
        prefix = b""
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            prefix = b"\n"
        handle.write(prefix + line.encode("ascii") + b"\n")
    return line


def _hashed_matches(pattern: str, name: str) -> bool:
    parts = pattern.split("|")
    if len(parts) != 4:
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        expected = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    actual = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return hmac.compare_digest(actual, expected)


def _glob(pattern: str) -> re.Pattern[str]:
    regex = "".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern)
    return re.compile(regex, re.DOTALL)
