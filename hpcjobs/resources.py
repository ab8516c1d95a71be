"""Where the built-in templates and site configs live.

In a wheel they are packaged under ``hpcjobs/_data/``; in a source checkout (editable install)
they are the top-level ``templates/`` and ``site-configs/`` folders next to the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    packaged = _PACKAGE_DIR / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / name


def templates_dir() -> Path:
    """The folder of built-in job templates."""
    return _data_dir("templates")


def site_configs_dir() -> Path:
    """The folder of built-in site configs."""
    return _data_dir("site-configs")
