"""Options shared by the commands that talk to Slurm: ``--host`` and the runner it selects.

Most commands take their options from here (``render``, ``status``, ``site list`` and
``sandbox --help`` among them), so what checking a value or making a runner needs is imported
where it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from hpcjobs.errors import BadInputError

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.runner import Runner

F = TypeVar("F", bound=Callable[..., Any])

HOST_METAVAR = "[USER@]HOST[:PORT]"


def _check_host(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    from hpcjobs.remote.hostspec import SITE_LOGIN_HOSTS, parse_host_spec

    if value != SITE_LOGIN_HOSTS:
        try:
            parse_host_spec(value)
        except BadInputError as exc:
            message = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
            raise click.BadParameter(message) from None
    return value


if TYPE_CHECKING:
    _IntType = click.ParamType[int]
else:  # click < 8.2 has no generic ParamType
    _IntType = click.ParamType


class Count(_IntType):
    """A whole-number flag written in ASCII digits, within bounds (``hpcjobs.safetext``).

    Unlike ``click.INT`` it refuses ``١٠``, ``1_000``, `` 5`` and ``+5``, and numbers beyond
    :data:`~hpcjobs.safetext.MAX_COUNT`; a bad value exits 2 naming the flag.
    """

    name = "integer"

    def __init__(self, minimum: int = 0, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from hpcjobs.safetext import MAX_COUNT, check_int

        maximum = MAX_COUNT if self.maximum is None else self.maximum
        try:
            return check_int(value, minimum=self.minimum, maximum=maximum, text_ok=True)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


if TYPE_CHECKING:
    _RangeType = click.ParamType[tuple[int, int]]
else:
    _RangeType = click.ParamType


class NodeRange(_RangeType):
    """``-N``: a node count (``4``) or an elastic range (``2-4``, Slurm's own syntax), as
    (fewest, most); both ASCII digits, at least 1, the first not above the second."""

    name = "N or MIN-MAX"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, int]:
        from hpcjobs.safetext import MAX_COUNT, check_int

        if isinstance(value, tuple):
            return value
        text = str(value)
        first, dash, last = text.partition("-")
        try:
            low = check_int(first, minimum=1, maximum=MAX_COUNT, text_ok=True)
            high = check_int(last, minimum=1, maximum=MAX_COUNT, text_ok=True) if dash else low
        except ValueError as exc:
            self.fail(f"{text!r}: {exc} (a node count, or MIN-MAX such as 2-4)", param, ctx)
        if low > high:
            self.fail(f"{text!r}: the fewest nodes come first, as in {high}-{low}", param, ctx)
        return low, high


def host_option(function: F) -> F:
    """The ``--host`` option: run the command on a login node over SSH instead of here."""
    decorator = click.option(
        "--host",
        "host",
        envvar="HPCJOBS_HOST",
        metavar=HOST_METAVAR,
        callback=_check_host,
        help="Run on this login node over SSH: [user@]host[:port], a Host alias from "
        "~/.ssh/config, or @site for the site config's login_hosts. Default: run here.  "
        "[env: HPCJOBS_HOST]",
    )
    return decorator(function)


def make_runner(
    host: str | None,
    site: SiteConfig | Path | str | None = None,
    local_env: Mapping[str, str] | None = None,
    *,
    remote_env: Mapping[str, str] | None = None,
) -> Runner:
    """The runner for a command: local when ``host`` is None, else SSH to ``host``.

    Inside a click command the SSH connection is closed when the command ends; elsewhere,
    call ``close()`` on the returned runner (an :class:`~hpcjobs.remote.runner.SshRunner`).
    Nothing connects before the first command runs.

    Args:
        host: The ``--host`` value, or None to run here.
        site: The site config (or its name or path): its ``login_hosts`` and pinned
            ``host_keys`` are used for SSH.
        local_env: Variables for local commands (for example ``SLURM_CONF``).
        remote_env: Variables for remote commands.

    Raises:
        BadInputError: ``host`` is malformed.
        ConfigError: The site config cannot be loaded, or a pinned key is malformed.
        TransportError: The SSH client config cannot be read.
    """
    from hpcjobs.runner import LocalRunner

    if host is None:
        return LocalRunner(env=dict(local_env or {}))
    from hpcjobs.remote.runner import connect_runner

    login_hosts, host_keys = site_ssh_settings(site)
    runner = connect_runner(
        host, site_login_hosts=login_hosts, pinned_host_keys=host_keys, env=remote_env
    )
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(runner.close)
    return runner


def site_ssh_settings(
    site: SiteConfig | Path | str | None,
) -> tuple[list[str], list[str]]:
    """The site's ``login_hosts`` and pinned ``host_keys``; empty lists without a site."""
    if site is None:
        return [], []
    if isinstance(site, Path | str):
        from hpcjobs.config.loader import load_site

        site = load_site(site)
    return list(site.login_hosts), list(site.host_keys)
