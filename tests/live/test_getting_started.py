"""The first minutes of a new user, on the real sandbox: `sandbox env`, then `submit`.

After ``eval "$(hpcjobs sandbox env)"`` a plain ``hpcjobs submit`` (no ``--site``) must reach the
sandbox; without it, Slurm's "Could not establish a configuration source" must come with a hint.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hpcjobs.errors import EXIT_SLURM
from hpcjobs.sandbox.cluster import Sandbox

HPCJOBS = str(Path(sys.executable).absolute().parent / "hpcjobs")


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a login-like bash with the test's (scrubbed) environment and a HOME
    of its own (the default output dirs are under it)."""
    home = cwd / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env={**os.environ, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_submit_without_site_after_sandbox_env(sandbox: Sandbox, shared_tmp: Path) -> None:
    out = shared_tmp / "getting-started"
    hpcjobs = shlex.quote(HPCJOBS)
    script = (
        "set -e\n"
        f'eval "$({hpcjobs} sandbox env --state-dir {shlex.quote(str(sandbox.state_dir))})"\n'
        'echo "site=$HPCJOBS_SITE conf=$SLURM_CONF" >&2\n'
        f"{hpcjobs} submit --wait --json -J getting-started --output-dir {shlex.quote(str(out))}"
        " -- printenv SLURMD_NODENAME\n"
    )
    proc = bash(script, shared_tmp)
    assert proc.returncode == 0, proc.stderr
    assert f"site=sandbox conf={sandbox.layout.slurm_conf}" in proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    log = (out / f"slurm-{job_id}.out").read_text()
    assert any(line.strip() in ("n1", "n2", "n3") for line in log.splitlines()), log


def test_forgotten_sandbox_env_gets_a_hint(sandbox: Sandbox, shared_tmp: Path) -> None:
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("this host has a system slurm.conf, so Slurm finds a config anyway")
    proc = bash(f"{shlex.quote(HPCJOBS)} --site sandbox submit -- true", shared_tmp)
    assert proc.returncode == EXIT_SLURM, proc.stderr
    assert "Could not establish a configuration source" in proc.stderr
    assert "Hint: Slurm cannot find the cluster config: SLURM_CONF is not set" in proc.stderr
    assert 'eval "$(hpcjobs sandbox env)"' in proc.stderr
    assert "Traceback" not in proc.stderr
