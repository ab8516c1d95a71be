"""Find site config files by name or path.

Search order for a name: ``$HPCJOBS_SITE_PATH`` folders, the user folder
(``~/.config/hpcjobs/sites``), ``/etc/hpcjobs/sites``, then the built-in ``site-configs/``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpcjobs.errors import ConfigError
from hpcjobs.resources import site_configs_dir

SUFFIXES = (".yaml", ".yml")


def user_config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hpcjobs"


def search_dirs() -> list[tuple[str, Path]]:
    """The folders searched for named sites, first match wins, each with a label."""
    dirs: list[tuple[str, Path]] = []
    for entry in os.environ.get("HPCJOBS_SITE_PATH", "").split(os.pathsep):
        if entry.strip():
            dirs.append(("HPCJOBS_SITE_PATH", Path(entry).expanduser()))
    dirs.append(("user", user_config_dir() / "sites"))
    dirs.append(("system", Path("/etc/hpcjobs/sites")))
    dirs.append(("built-in", site_configs_dir()))
    return dirs


def looks_like_path(value: str) -> bool:
    return os.sep in value or value.endswith(SUFFIXES) or value.startswith(".")


def locate_site(value: str) -> Path:
    """Resolve ``--site NAME|PATH`` to an existing, readable file."""
    if looks_like_path(value):
        path = Path(value).expanduser()
        if not path.exists():
            raise ConfigError(
                f"site config file '{path}' does not exist",
                hint="check the path, or pass a site name from 'hpcjobs site list'",
            )
        if not path.is_file():
            raise ConfigError(f"site config '{path}' is not a file")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"site config file '{path}' is not readable (permission denied)")
        return path.resolve()
    for _, folder in search_dirs():
        for suffix in SUFFIXES:
            candidate = folder / f"{value}{suffix}"
            if candidate.is_file():
                return candidate.resolve()
    raise ConfigError(
        f"no site config named {value!r}",
        hint="list the known sites with 'hpcjobs site list', or pass a path to a YAML file",
    )
