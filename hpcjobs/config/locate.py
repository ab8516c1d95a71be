"""Find site config files by name, by path, or by the hostname of this machine.

``$HPCJOBS_SITE`` (:data:`SITE_ENV`, the environment default of ``--site``) names the site to use.
Search order for a name: ``$HPCJOBS_SITE_PATH`` folders, the user folder
(``~/.config/hpcjobs/sites``), ``/etc/hpcjobs/sites``, then the built-in ``site-configs/``.
This module stays light because the root CLI imports it to resolve ``--site``: no pydantic, and
what only matching this machine's names needs (the hostname, the YAML parser, the sandbox hint)
is imported there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from hpcjobs.config import SITE_ENV
from hpcjobs.config.problems import suggest
from hpcjobs.errors import ConfigError
from hpcjobs.resources import site_configs_dir

SUFFIXES = (".yaml", ".yml")

SYSTEM_SITES_DIR = Path("/etc/hpcjobs/sites")


class SiteEntry(NamedTuple):
    """A site config file found in one of the search folders."""

    name: str
    path: Path
    source: str
    shadowed_by: Path | None = None

    @property
    def active(self) -> bool:
        """Whether ``--site NAME`` picks this file (no earlier folder has the same name)."""
        return self.shadowed_by is None


def user_config_dir() -> Path:
    """``$XDG_CONFIG_HOME/hpcjobs``, or ``~/.config/hpcjobs``."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hpcjobs"


def user_config_file() -> Path:
    """The user's own config file, layered over the site config."""
    return user_config_dir() / "config.yaml"


def search_dirs() -> list[tuple[str, Path]]:
    """The folders searched for named sites, first match wins, each with a label."""
    dirs: list[tuple[str, Path]] = []
    for entry in os.environ.get("HPCJOBS_SITE_PATH", "").split(os.pathsep):
        if entry.strip():
            dirs.append(("HPCJOBS_SITE_PATH", Path(entry).expanduser()))
    dirs.append(("user", user_config_dir() / "sites"))
    dirs.append(("system", SYSTEM_SITES_DIR))
    dirs.append(("built-in", site_configs_dir()))
    return dirs


def looks_like_path(value: str) -> bool:
    """Whether ``--site`` got a file path rather than a site name."""
    return os.sep in value or value.endswith(SUFFIXES) or value.startswith(".")


def locate_path(path: Path) -> Path:
    """Check that ``path`` is a readable file and return it resolved.

    Raises:
        ConfigError: The file does not exist, is not a file, or cannot be read.
    """
    path = path.expanduser()
    if not path.exists():
        raise ConfigError(
            f"site config file '{path}' does not exist",
            hint="check the path, or pass a site name from 'hpcjobs site list'",
        )
    if not path.is_file():
        raise ConfigError(
            f"site config '{path}' is not a file",
            hint="pass the path of a YAML file, or a site name from 'hpcjobs site list'",
        )
    if not os.access(path, os.R_OK):
        raise ConfigError(
            f"site config file '{path}' is not readable (permission denied)",
            hint=f"ask its owner to make it readable (chmod a+r {path}), or use another site",
        )
    return path.resolve()


def locate_site(value: str | Path) -> Path:
    """Resolve ``--site NAME|PATH`` to an existing, readable file.

    Args:
        value: A site name (searched in :func:`search_dirs`) or a path to a YAML file. A
            :class:`~pathlib.Path` is always taken as a path.

    Raises:
        ConfigError: No such site, or the file cannot be used.
    """
    if isinstance(value, Path) or looks_like_path(value):
        return locate_path(Path(value))
    for _, folder in search_dirs():
        for suffix in SUFFIXES:
            candidate = folder / f"{value}{suffix}"
            if candidate.is_file():
                return candidate.resolve()
    names = sorted({entry.name for entry in list_sites()})
    raise ConfigError(
        f"no site config named {value!r}" + suggest(value, names),
        hint="list the known sites with 'hpcjobs site list', or pass a path to a YAML file",
    )


def list_sites() -> list[SiteEntry]:
    """Every site config file in the search folders, in search order.

    A name found in more than one folder is listed each time; all but the first are marked
    as shadowed.
    """
    entries: list[SiteEntry] = []
    first: dict[str, Path] = {}
    for label, folder in search_dirs():
        for path in _site_files(folder):
            name = path.stem
            entries.append(SiteEntry(name, path, label, shadowed_by=first.get(name)))
            first.setdefault(name, path)
    return entries


def host_names(hostname: str | None = None) -> list[str]:
    """The names this machine is known by: ``hostname`` if given, else short name and FQDN."""
    if hostname is not None:
        return [hostname]
    import socket

    names = [socket.gethostname()]
    try:
        fqdn = socket.getfqdn()
    except OSError:  # pragma: no cover - resolver failure
        fqdn = names[0]
    if fqdn not in names:
        names.append(fqdn)
    return names


def select_site_for_host(hostname: str | None = None) -> Path:
    """The first site (in search order) whose ``hostnames`` patterns match this host.

    Args:
        hostname: The name to match; default: this machine's hostname and FQDN.

    Raises:
        ConfigError: No site matches.
    """
    names = host_names(hostname)
    for entry in list_sites():
        if entry.active and _patterns_match(_hostname_patterns(entry.path), names):
            return entry.path.resolve()
    from hpcjobs.slurm.classify import SANDBOX_ENV_COMMAND

    raise ConfigError(
        f"no site config matches this host ({', '.join(names)})",
        hint=f"pass --site NAME (see 'hpcjobs site list'), set {SITE_ENV}, or add a "
        f"'hostnames' pattern to your site config; for the local sandbox run "
        f"'{SANDBOX_ENV_COMMAND}', which sets SLURM_CONF and {SITE_ENV} (the sandbox's site)",
    )


def _site_files(folder: Path) -> list[Path]:
    try:
        return sorted(
            p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file() and p.stem
        )
    except OSError:
        return []


def _hostname_patterns(path: Path) -> list[str]:
    """The ``hostnames`` list of a site file; empty when the file cannot be read or parsed.

    Read with the same bounds as any site config (:func:`~hpcjobs.config.yamlfile.read_yaml_file`):
    a FIFO, a huge file or an alias bomb among the site files cannot stall site selection.
    """
    from hpcjobs.config.yamlfile import read_yaml_file

    data = read_yaml_file(path).data
    patterns = data.get("hostnames") if isinstance(data, dict) else None
    if not isinstance(patterns, list):
        return []
    return [p for p in patterns if isinstance(p, str)]


def _patterns_match(patterns: Iterable[str], names: list[str]) -> bool:
    for pattern in patterns:
        try:
            if any(re.fullmatch(pattern, name) for name in names):
                return True
        except re.error:
            continue
    return False
