"""The supervisor as it travels to the job: a zipapp that runs on a bare python3."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpcjobs.jobs.supervisorapp import (
    supervisor_app,
    supervisor_name,
    supervisor_path,
    write_supervisor,
)

#: Interpreters to try the zipapp on besides this one: the oldest the project supports first.
OLD_PYTHONS = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3")))


def test_the_same_sources_give_the_same_bytes_and_name() -> None:
    assert supervisor_app() == supervisor_app()
    assert supervisor_name().startswith("supervisor-") and supervisor_name().endswith(".pyz")
    assert supervisor_path("/out") == Path("/out/.hpcjobs") / supervisor_name()


def test_it_holds_only_the_supervisor_package() -> None:
    with zipfile.ZipFile(__import__("io").BytesIO(supervisor_app())) as archive:
        names = archive.namelist()
    assert "__main__.py" in names
    assert all(n == "__main__.py" or n.startswith("hpcjobs_supervisor/") for n in names)
    assert "hpcjobs_supervisor/supervise.py" in names


def test_written_private(tmp_path: Path) -> None:
    path = write_supervisor(tmp_path / "out" / ".hpcjobs" / supervisor_name())
    assert path.read_bytes() == supervisor_app()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("python", [sys.executable, *OLD_PYTHONS[:1]])
def test_it_runs_isolated_from_any_installed_hpcjobs(tmp_path: Path, python: str) -> None:
    app = write_supervisor(tmp_path / supervisor_name())
    help_text = subprocess.run(
        [python, "-I", str(app), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--policy" in help_text
    bad = subprocess.run(
        [python, "-I", str(app), "--script", "x", "--policy", "{}", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "cannot read its policy" in bad.stderr
    agent = subprocess.run(
        [python, "-I", str(app), "agent", "--help"], capture_output=True, text=True, check=True
    )
    assert "--shared" in agent.stdout


@pytest.mark.parametrize("python", ["python3", "/opt/conda/bin/python3.12", "python3.11"])
def test_the_sites_python_runs_the_supervisor(python: str) -> None:
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    site = load_site("sandbox")
    site = site.model_copy(update={"setup": site.setup.model_copy(update={"python": python})})
    script = render_job(parse_spec({"command": ["python", "t.py"]}), site).script
    assert f"export HPCJOBS_PYTHON={python}\n" in script
    assert 'exec "$HPCJOBS_PYTHON" -E -s "$hpcjobs_supervisor"' in script


@pytest.mark.parametrize("python", ["python3 -u", "", "py;rm", "-python3", "$(id)"])
def test_setup_python_is_a_command_or_a_path(python: str) -> None:
    from pydantic import ValidationError

    from hpcjobs.config.models import Setup

    with pytest.raises(ValidationError):
        Setup(python=python)
