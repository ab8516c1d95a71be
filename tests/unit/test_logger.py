"""The command line's log settings reach submit-side loggers without importing logging early."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from hpcjobs import logger as hpclogger


def _run(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (pytest's own handlers sit on this one's root logger)."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )


@pytest.mark.parametrize(
    ("verbosity", "level"),
    [(0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG), (5, logging.DEBUG),
     (-1, logging.ERROR), (-2, logging.CRITICAL), (-9, logging.CRITICAL)],
)  # fmt: skip
def test_the_level_follows_verbosity_within_bounds(verbosity: int, level: int) -> None:
    out = _run(
        "import logging\n"
        "from hpcjobs.logger import configure\n"
        f"configure({verbosity})\n"  # logging is loaded: applied at once
        "root = logging.getLogger()\n"
        "print(root.level, root.handlers[0].formatter._fmt, root.handlers[0].stream.name)\n"
    )
    assert out.stdout.split(" ", 1) == [str(level), f"{hpclogger.FORMAT} <stderr>\n"]


def test_the_constants_are_logging_s_own() -> None:
    assert (hpclogger.DEBUG, hpclogger.WARNING, hpclogger.CRITICAL) == (
        logging.DEBUG,
        logging.WARNING,
        logging.CRITICAL,
    )


def test_a_render_does_not_load_logging_and_a_warning_still_shows_its_level_and_name() -> None:
    """In a fresh interpreter: configure() waits, the first logger applies it."""
    code = (
        "import sys\n"
        "from hpcjobs.logger import configure, logger\n"
        "configure(0)\n"
        "assert 'logging' not in sys.modules\n"
        "logger('hpcjobs.x').info('hidden')\n"
        "logger('hpcjobs.x').warning('shown')\n"
    )
    assert _run(code).stderr == "WARNING hpcjobs.x: shown\n"


def test_the_command_renders_without_logging() -> None:
    code = (
        "import sys\n"
        "from hpcjobs.cli import main\n"
        "sys.argv = ['hpcjobs', '--site', 'sandbox', 'render', '-N', '1', '--', 'true']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "assert 'logging' not in sys.modules, 'a render imported logging'\n"
    )
    _run(code)
