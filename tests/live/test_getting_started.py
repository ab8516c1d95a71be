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
    assert f"site={sandbox.layout.site_file} conf={sandbox.layout.slurm_conf}" in proc.stderr
    job_id = json.loads(proc.stdout)["job_id"]
    log = (out / f"slurm-{job_id}.out").read_text()
    assert any(line.strip() in ("n1", "n2", "n3") for line in log.splitlines()), log


@pytest.mark.slow
def test_a_sandbox_of_8_x_8_takes_a_job_of_its_size(sandbox: Sandbox, shared_tmp: Path) -> None:
    """docs/sandbox.md's sized sandbox, as written: `up --nodes 8 --gpus-per-node 8`, `eval
    "$(hpcjobs sandbox env)"`, then a job of 8 nodes x 8 GPUs (the built-in site, 3 x 4,
    refused it), beside the test sandbox."""
    state = Path("/tmp") / f"hpcjobs-test-sized-{os.getpid()}"
    settings = sandbox.saved_settings()
    assert settings is not None
    out = shared_tmp / "sized"
    hpcjobs, where = shlex.quote(HPCJOBS), shlex.quote(str(state))
    script = (
        "set -e\n"
        f"{hpcjobs} sandbox up --state-dir {where} --port-base {settings.port_base + 200} "
        "--nodes 8 --gpus-per-node 8\n"
        f'eval "$({hpcjobs} sandbox env --state-dir {where})"\n'
        f"{hpcjobs} submit -N 8 --gpus-per-node 8 --wait --json -J sized "
        f"--output-dir {shlex.quote(str(out))} -- printenv SLURMD_NODENAME\n"
    )
    try:
        proc = bash(script, shared_tmp)
        assert proc.returncode == 0, proc.stderr
        job_id = json.loads(proc.stdout)["job_id"]
        log = (out / f"slurm-{job_id}.out").read_text()
        assert {f"n{i}" for i in range(1, 9)} <= {line.strip() for line in log.splitlines()}, log
        env = {**os.environ, "SLURM_CONF": str(state / "etc" / "slurm.conf")}
        shown = subprocess.run(
            ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True
        ).stdout
        assert "NumNodes=8" in shown and "gres/gpu=64" in shown, shown
    finally:
        subprocess.run(
            [HPCJOBS, "sandbox", "down", "--purge", "--state-dir", str(state)],
            capture_output=True,
            timeout=300,
            check=False,
        )


def test_forgotten_sandbox_env_gets_a_hint(sandbox: Sandbox, shared_tmp: Path) -> None:
    if Path("/etc/slurm/slurm.conf").exists():
        pytest.skip("this host has a system slurm.conf, so Slurm finds a config anyway")
    proc = bash(f"{shlex.quote(HPCJOBS)} --site sandbox submit -- true", shared_tmp)
    assert proc.returncode == EXIT_SLURM, proc.stderr
    assert "Could not establish a configuration source" in proc.stderr
    assert "Hint: Slurm cannot find the cluster config: SLURM_CONF is not set" in proc.stderr
    assert 'eval "$(hpcjobs sandbox env)"' in proc.stderr
    assert "Traceback" not in proc.stderr
