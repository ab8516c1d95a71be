"""`hpcjobs --help` must stay fast: it may not import the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("submitit", "paramiko", "torch", "cryptography")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import contextlib, io\n"
        "from hpcjobs.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
    )
    loaded = _modules_after(code)
    for name in HEAVY:
        assert name not in loaded, f"'hpcjobs --help' imported {name}"
