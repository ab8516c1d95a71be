"""Parse and check the ``--host [user@]host[:port]`` argument."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from hpcjobs.errors import BadInputError
from hpcjobs.safetext import is_safe, parse_int

#: The ``--host`` value that means "the login hosts listed in the site config".
SITE_LOGIN_HOSTS = "@site"

# User names and IPv6 addresses are rare in a site config: strings, compiled on first use.
_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}"
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,252})")
_IPV6 = r"[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?"

_FORMAT_HINT = "use [user@]host[:port], for example alice@login1.cluster.example:22"


class HostSpec(NamedTuple):
    """A parsed host argument. ``user`` and ``port`` are None when not given."""

    host: str
    user: str | None = None
    port: int | None = None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and self.port is not None else self.host
        text = f"{self.user}@{host}" if self.user else host
        return f"{text}:{self.port}" if self.port is not None else text


def parse_host_spec(text: str) -> HostSpec:
    """Parse ``[user@]host[:port]``; an IPv6 address with a port goes in brackets.

    Args:
        text: The value of ``--host`` (or of a ``ProxyJump`` hop).

    Returns:
        The host, with user and port when they were given.

    Raises:
        BadInputError: The value is empty, has spaces or control characters, or any part is
            malformed (host names may hold letters, digits, ``.``, ``_`` and ``-``).
    """
    raw = text
    if not text or not is_safe(text) or any(ch.isspace() for ch in text):
        raise BadInputError(f"invalid host {raw!r}: empty, or contains spaces", hint=_FORMAT_HINT)
    user: str | None = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
        if not re.fullmatch(_USER, user):
            raise BadInputError(f"invalid user name in host {raw!r}", hint=_FORMAT_HINT)
    port: int | None = None
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not re.fullmatch(_IPV6, host):
            raise BadInputError(f"invalid bracketed address in host {raw!r}", hint=_FORMAT_HINT)
        if rest:
            if not rest.startswith(":"):
                raise BadInputError(f"invalid host {raw!r}", hint=_FORMAT_HINT)
            port = _port(rest[1:], raw)
    elif text.count(":") > 1:
        if not re.fullmatch(_IPV6, text):
            raise BadInputError(f"invalid address in host {raw!r}", hint=_FORMAT_HINT)
        host = text
    else:
        host, sep, port_text = text.partition(":")
        if sep:
            port = _port(port_text, raw)
        if not _HOST.fullmatch(host):
            raise BadInputError(
                f"invalid host name in {raw!r}",
                hint="host names may hold letters, digits, '.', '_' and '-'; " + _FORMAT_HINT,
            )
    return HostSpec(host=host, user=user, port=port)


def format_host_port(host: str, port: int) -> str:
    """``host`` for port 22, else ``[host]:port``: the form ``known_hosts`` files use."""
    return host if port == 22 else f"[{host}]:{port}"


def login_key_names(login_hosts: Sequence[str]) -> list[str]:
    """The ``known_hosts`` names of the site's login hosts (``host``, or ``[host]:port``).

    Raises:
        BadInputError: A login host is malformed (as ``--host`` would find it).
    """
    names = []
    for spec in login_hosts:
        parsed = parse_host_spec(spec)
        names.append(format_host_port(parsed.host, parsed.port or 22))
    return names


def _port(text: str, raw: str) -> int:
    try:
        return parse_int(text, minimum=1, maximum=65535)
    except ValueError:
        raise BadInputError(
            f"invalid port in host {raw!r}", hint="a port is a number 1-65535"
        ) from None
