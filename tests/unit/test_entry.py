"""The ``hpcjobs`` command's entry point: one for the console script and ``python -m hpcjobs``.

It raises the collector's young-generation threshold for the command alone; a training script
that imports hpcjobs keeps Python's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

from hpcjobs.__main__ import GC_YOUNG_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]

_THRESHOLD_AFTER_MAIN = (
    "import contextlib, gc, io, sys\n"
    "import hpcjobs.__main__ as entry\n"
    "sys.argv = ['hpcjobs', '--version']\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n"
    "        entry.main()\n"
    "    except SystemExit as exc:\n"
    "        assert exc.code in (0, None), exc.code\n"
    "print(gc.get_threshold()[0], gc.get_freeze_count() > 0)\n"
)


def _python(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=True, timeout=60
    )
    return out.stdout.strip()


def test_the_console_script_and_python_m_share_one_entry() -> None:
    with (ROOT / "pyproject.toml").open("rb") as handle:
        scripts = tomllib.load(handle)["project"]["scripts"]
    assert scripts["hpcjobs"] == "hpcjobs.__main__:main"
    assert _python("-m", "hpcjobs", "--version").startswith("hpcjobs, version ")


def test_the_command_raises_the_threshold_and_freezes_its_objects_as_it_ends() -> None:
    assert _python("-c", _THRESHOLD_AFTER_MAIN) == f"{GC_YOUNG_THRESHOLD} True"


def test_importing_hpcjobs_keeps_pythons_threshold() -> None:
    default = _python("-c", "import gc; print(gc.get_threshold()[0])")
    assert _python("-c", "import gc, hpcjobs, hpcjobs.cli; print(gc.get_threshold()[0])") == default
