"""A non-editable install finds its templates and site configs: build the wheel, install it
into a clean virtualenv, and render a job there, far from the source tree."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hpcjobs.jobs.supervisorapp import supervisor_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_renders_a_job_from_a_clean_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    (wheel,) = dist.glob("hpcjobs-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "hpcjobs/_data/templates/job.sh.j2" in names
    assert "hpcjobs/_data/templates/blocks/launch.sh.j2" in names
    assert "hpcjobs/runtime/supervisor/supervise.py" in names  # the job's supervisor
    assert "hpcjobs/_data/site-configs/dgx-h100-ib.yaml" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        timeout=900,
        capture_output=True,
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    render = subprocess.run(
        [str(venv / "bin" / "hpcjobs"), "--site", "dgx-h100-ib", "render", "-N", "2", "--",
         "python", "train.py"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert render.returncode == 0, render.stderr
    assert render.stdout.startswith("#!/bin/bash")
    assert "NCCL_IB_HCA" in render.stdout
    # The launch block came from the wheel, and the supervisor built from the installed
    # package is the same archive as the one built from the sources.
    assert '--policy "$hpcjobs_policy"' in render.stdout
    assert f"/.hpcjobs/{supervisor_name()}" in render.stdout
    sites = subprocess.run(
        [str(venv / "bin" / "hpcjobs"), "site", "list"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sites.returncode == 0, sites.stderr
    assert "site-packages/hpcjobs/_data/site-configs" in sites.stdout
