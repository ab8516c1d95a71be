"""Discovering the live sandbox yields a draft that validates and can be used as is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cli_env(slurm_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: the sandbox's SLURM_CONF and an empty home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCJOBS_"))}
    env.update(slurm_env)
    env["HOME"] = str(tmp_path)
    env["XDG_CONFIG_HOME"] = str(tmp_path / ".config")
    env["PY"] = sys.executable
    return env


def sh(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_discover_then_validate_then_use(
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slurm_version: str
) -> None:
    script = (
        '"$PY" -m hpcjobs site discover > x.yaml && "$PY" -m hpcjobs site validate x.yaml'
        ' && "$PY" -m hpcjobs --site x.yaml site show --json > shown.json'
    )
    proc = sh(script, cli_env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "x.yaml: ok" in proc.stdout
    assert "Traceback" not in proc.stderr
    shown = json.loads((tmp_path / "shown.json").read_text())
    assert shown["name"] == "sandbox"

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    draft = load_site(tmp_path / "x.yaml")
    builtin = load_site("sandbox")
    keys = ("gpu_type", "gpus_per_node", "cpus_per_node", "sockets_per_node", "memory_mb")
    keys += ("max_nodes", "max_time", "nodes", "priority_tier", "preemptible")
    for name in ("batch", "urgent"):
        got, want = draft.partition(name), builtin.partition(name)
        assert {k: getattr(got, k) for k in keys} == {k: getattr(want, k) for k in keys}
    assert draft.default_partition.name == "batch"
    assert draft.slurm.preempt_send_user_signal is True
    # The version the sandbox's own sinfo reports, whichever release it runs.
    assert draft.slurm.version == slurm_version


def test_discover_with_probed_node(cli_env: dict[str, str], tmp_path: Path) -> None:
    script = (
        '"$PY" -m hpcjobs site discover --name probed --probe-node n2 -o p.yaml'
        ' && "$PY" -m hpcjobs site validate p.yaml'
        ' && "$PY" -m hpcjobs --site p.yaml site show --json'
    )
    proc = sh(script, cli_env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert shown["name"] == "probed"
    topo = shown["topologies"]["n2-node"]
    gpus = sorted(g for domain in topo["numa"] for g in domain["gpus"])
    assert gpus == [0, 1, 2, 3]
    cpus = ",".join(domain["cpus"] for domain in topo["numa"])
    assert cpus == "0-1"  # the host's two real CPUs
    assert all(p["topology"] == "n2-node" for p in shown["partitions"])
