"""The sandbox is a real Slurm: multi-node steps run, accounting records them."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.errors import SandboxError
from hpcjobs.runner import LocalRunner
from hpcjobs.sandbox import procs
from hpcjobs.sandbox.cluster import Sandbox
from hpcjobs.sandbox.layout import Settings


def test_nodes_idle_with_gpus(sandbox: Sandbox, slurm_env: dict[str, str]) -> None:
    out = LocalRunner(env=slurm_env).run(["sinfo", "-h", "-N", "-o", "%N %G %P"]).stdout
    rows = {tuple(line.split()) for line in out.splitlines()}
    for node in ("n1", "n2", "n3"):
        assert (node, "gpu:h100:4", "batch*") in rows
        assert (node, "gpu:h100:4", "urgent") in rows


def test_two_node_srun_through_runner(sandbox: Sandbox, slurm_env: dict[str, str]) -> None:
    runner = LocalRunner(env=slurm_env)
    result = runner.run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=2",
            "--gpus-per-node=2",
            "-J",
            "hpcjobs-live-srun",
            "bash",
            "-c",
            'echo "$SLURMD_NODENAME $SLURM_PROCID $CUDA_VISIBLE_DEVICES"',
        ],
        timeout=120,
    )
    rows = sorted(tuple(line.split()) for line in result.stdout.splitlines())
    assert [r[1] for r in rows] == ["0", "1", "2", "3"]
    # Two distinct sandbox nodes, two tasks each (which two is the scheduler's choice).
    assert len({r[0] for r in rows}) == 2 and {r[0] for r in rows} <= {"n1", "n2", "n3"}
    assert sorted(r[0] for r in rows).count(rows[0][0]) == 2
    # Slurm hands each task its GPUs through CUDA_VISIBLE_DEVICES.
    assert all(r[2] == "0,1" for r in rows)


def test_sacct_sees_finished_two_node_job(sandbox: Sandbox, slurm_env: dict[str, str]) -> None:
    runner = LocalRunner(env=slurm_env)
    job_id = (
        runner.run(
            [
                "sbatch",
                "--parsable",
                "-N2",
                "-J",
                "hpcjobs-live-sacct",
                "-o",
                "/dev/null",
                "--wrap",
                "srun true",
            ],
        )
        .stdout.strip()
        .split(";")[0]
    )
    deadline = time.monotonic() + 90
    state = ""
    while time.monotonic() < deadline:
        out = runner.run(
            ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "JobID,State,NNodes,NodeList"],
            check=False,
        ).stdout.strip()
        if out:
            _, state, nnodes, nodelist = out.splitlines()[0].split("|")
            # slurmdbd may first record only the batch host; wait for the full node list.
            if state == "COMPLETED" and nodelist.startswith("n["):
                assert nnodes == "2"
                return
        time.sleep(0.5)
    pytest.fail(f"job {job_id} not COMPLETED in sacct within 90 s (last state {state!r})")


def test_status_reports_accounting(sandbox: Sandbox) -> None:
    info = sandbox.status()
    assert info.running
    assert info.accounting, info.accounting_detail
    assert {n.name for n in info.nodes} == {"n1", "n2", "n3"}
    assert {p["name"] for p in info.partitions} == {"batch", "urgent"}
    batch = next(p for p in info.partitions if p["name"] == "batch")
    assert batch["preempt_mode"] == "REQUEUE"


def test_status_and_env_commands(sandbox: Sandbox) -> None:
    runner = CliRunner()
    result = runner.invoke(
        cli, ["sandbox", "status", "--json", "--state-dir", str(sandbox.state_dir)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["accounting"] is True
    assert len(data["nodes"]) == 3
    env = runner.invoke(cli, ["sandbox", "env", "--state-dir", str(sandbox.state_dir)])
    assert env.exit_code == 0
    assert env.stdout.splitlines() == [
        f"export SLURM_CONF={sandbox.layout.slurm_conf}",
        f"export HPCJOBS_SITE={sandbox.layout.site_file}",
    ]


def test_up_is_idempotent(sandbox: Sandbox) -> None:
    before = sandbox.daemon_pids()
    sandbox.up(sandbox.saved_settings())
    assert sandbox.daemon_pids() == before


def test_refuses_taken_port(tmp_path: Path, sandbox: Sandbox) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        box = Sandbox(tmp_path / "other")
        # The taken port is the one MariaDB would use.
        with pytest.raises(SandboxError, match=f"port {port} .* in use"):
            box.up(Settings(port_base=port - 2))
        box.down(purge=True)
    assert not procs.sandbox_processes(tmp_path / "other")


@pytest.mark.slow
def test_second_sandbox_up_down_twice(tmp_path: Path, sandbox: Sandbox) -> None:
    """A second sandbox beside the test one: up twice, a job, down twice, nothing left."""
    state = Path("/tmp") / f"hpcjobs-test-second-{os.getpid()}"
    box = Sandbox(state)
    settings = Settings(port_base=sandbox.saved_settings().port_base + 100, nodes=2)  # type: ignore[union-attr]
    try:
        box.up(settings)
        box.up(settings)
        runner = LocalRunner(env=box.layout.client_env())
        runner.run(["sbatch", "-N2", "-o", "/dev/null", "--wrap", "srun sleep 300"])
        deadline = time.monotonic() + 60
        while "R" not in runner.run(["squeue", "-h", "-o", "%t"]).stdout.split():
            assert time.monotonic() < deadline, "job never started"
            time.sleep(0.3)
        assert len(procs.sandbox_processes(state)) > 6  # daemons plus slurmstepd and tasks
        assert box.down()
        assert box.down() == []
        assert procs.sandbox_processes(state) == []
        # The test sandbox is untouched.
        assert all(pid is not None for pid in sandbox.daemon_pids().values())
    finally:
        box.down(purge=True)
