"""A thousand fake GPUs on one host: ``sandbox up --nodes 128 --gpus-per-node 8`` starts, runs
one step of 1,024 tasks, and ``sandbox down`` leaves no daemon behind.

It runs beside the test sandbox, with its own state folder and ports, on the machine's own
release (the other releases' roots deselect it, see tests/conftest.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.runner import LocalRunner
from tests.conftest import TEST_PORT_BASE

NODES, GPUS = 128, 8
#: Below 65000 and clear of the test sandboxes of every release (17810, 18810, 19810, 20810).
PORT_BASE = TEST_PORT_BASE + 6000


def _daemons_of(state_dir: Path) -> list[int]:
    """Processes whose command line names the state folder (every daemon of that sandbox)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(state_dir).encode() in cmdline and int(entry.name) != os.getpid():
                found.append(int(entry.name))
    return found


def test_a_thousand_gpus_start_run_and_stop(sandbox: object, tmp_path: Path) -> None:
    state = tmp_path / "big"
    argv = ["sandbox", "up", "--state-dir", str(state), "--port-base", str(PORT_BASE)]
    argv += ["--nodes", str(NODES), "--gpus-per-node", str(GPUS)]
    started = time.monotonic()
    try:
        result = CliRunner().invoke(cli, argv)
        took = time.monotonic() - started
        assert result.exit_code == 0, result.output
        assert f"nodes n[1-{NODES}] with gpu:h100:{GPUS}" in result.stderr
        print(f"\n{NODES} x {GPUS} sandbox up in {took:.1f} s")
        env = {"SLURM_CONF": str(state / "etc" / "slurm.conf")}
        runner = LocalRunner(env=env)
        nodes = runner.run(["sinfo", "-h", "-N", "-p", "batch", "-o", "%N %t %G"]).stdout
        rows = [line.split() for line in nodes.splitlines()]
        assert len(rows) == NODES
        assert all(state_ == "idle" and gres == f"gpu:h100:{GPUS}" for _, state_, gres in rows)
        step = runner.run(
            ["srun", "-N", str(NODES), f"--ntasks-per-node={GPUS}", "-t", "5",
             "bash", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"'],
            timeout=300,
        )  # fmt: skip
        ranks = [line.split() for line in step.stdout.splitlines()]
        assert sorted(int(rank) for rank, _ in ranks) == list(range(NODES * GPUS))
        assert len({node for _, node in ranks}) == NODES
    finally:
        down = CliRunner().invoke(cli, ["sandbox", "down", "--state-dir", str(state)])
    assert down.exit_code == 0, down.output
    assert _daemons_of(state) == []
