"""Rendered scripts at run time (under bash, with stand-ins for Slurm's commands).

Covers the signal block (forward, keep waiting, report the program's status), the per-rank
binding (numactl, the taskset fallback, a memory node the host lacks) and the rank variables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.jobs.supervisorapp import write_supervisor
from hpcjobs.script.jobspec import JobSpec
from hpcjobs.script.render import RenderedJob, render_job

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "jobs" / "fakebin"

PROGRAM = """\
import json, os, signal, subprocess, sys, time
mode, out, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
rank = os.environ.get("RANK", "0")
def handler(sig, frame):
    open(os.path.join(out, "got-%s-%s" % (rank, signal.Signals(sig).name)), "w").close()
    sys.exit(3 if sig == signal.SIGUSR2 else 5)
if mode == "handle":
    signal.signal(signal.SIGUSR2, handler)
    signal.signal(signal.SIGTERM, handler)
show = ""
try:
    show = subprocess.run(["numactl", "--show"], capture_output=True, text=True).stdout
except OSError:
    pass
policy = dict(line.split(":", 1) for line in show.splitlines() if ":" in line)
report = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK",
          "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES",
          "NCCL_IB_HCA", "UCX_NET_DEVICES", "HPCJOBS_RESTART_COUNT")}
report["affinity"] = sorted(os.sched_getaffinity(0))
report["policy"] = policy.get("policy", "").strip()
report["membind"] = policy.get("membind", "").split()
with open(os.path.join(out, "started-%s" % rank), "w") as f:
    json.dump(report, f)
deadline = time.time() + seconds
while time.time() < deadline:
    time.sleep(0.02)
"""


@pytest.fixture
def sandbox_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SiteConfig:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return load_site("sandbox")


def host_has_cpus_0_and_1() -> bool:
    return {0, 1} <= os.sched_getaffinity(0)


def write_script(rendered: RenderedJob, folder: Path) -> Path:
    """The job's script in ``folder``, and its supervisor where the script runs it from (as
    'hpcjobs submit' writes them)."""
    assert rendered.supervisor is not None
    write_supervisor(rendered.supervisor)
    script = folder / "job.sh"
    script.write_text(rendered.script, encoding="utf-8")
    return script


def start(rendered: RenderedJob, folder: Path, path: str | None = None) -> subprocess.Popen[str]:
    script = write_script(rendered, folder)
    env = {
        "PATH": f"{FAKEBIN}{os.pathsep}{path or os.environ['PATH']}",
        "HOME": str(folder),
        "SLURM_JOB_ID": "4242",
        "SLURM_RESTART_COUNT": "2",
    }
    return subprocess.Popen(
        ["bash", str(script)],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_started(folder: Path, count: int, proc: subprocess.Popen[str]) -> list[dict[str, object]]:
    deadline = time.monotonic() + 20
    while len(list(folder.glob("started-*"))) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            _out, err = proc.communicate()
            pytest.fail(f"ranks did not start (exit {proc.returncode}): {err}")
        time.sleep(0.02)
    time.sleep(0.1)  # let the reports be written completely
    rows = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("started-*"))]
    return rows


def job(folder: Path, mode: str, seconds: float, **fields: object) -> JobSpec:
    program = folder / "program.py"
    program.write_text(PROGRAM, encoding="utf-8")
    out = folder / "out"
    out.mkdir(exist_ok=True)
    data: dict[str, object] = {
        "name": "run",
        "output_dir": str(folder / "run"),
        "command": [sys.executable, str(program), mode, str(out), str(seconds)],
        **fields,
    }
    return JobSpec.model_validate(data)


@pytest.mark.parametrize(
    ("launcher", "sig", "status"),
    [("none", signal.SIGUSR2, 0), ("none", signal.SIGTERM, 5), ("srun", signal.SIGUSR2, 0)],
)
def test_signal_is_forwarded_then_the_requeue_policy_decides(
    sandbox_site: SiteConfig, tmp_path: Path, launcher: str, sig: signal.Signals, status: int
) -> None:
    """The warning signal reaches every rank once; the job then continues (exit 0: its standby
    now depends on this job's end); a plain SIGTERM is a cancellation (program's status, and
    the standby is cancelled)."""
    spec = job(tmp_path, "handle", 30, launcher=launcher, gpus_per_node=2)
    proc = start(render_job(spec, sandbox_site), tmp_path)
    ranks = 1 if launcher == "none" else 2
    wait_started(tmp_path / "out", ranks, proc)
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == status, err
    name = sig.name.removeprefix("SIG")
    # The warning goes to the processes that listen for it; SIGTERM on to the launcher.
    said = "received (the warning): delivering it" if name != "TERM" else "received, forwarding it"
    assert f"SIG{name} {said}" in err
    got = sorted(p.name for p in (tmp_path / "out").glob("got-*"))
    assert got == [f"got-{r}-{sig.name}" for r in range(ranks)]
    # The run's standby (job 5555 from the stub), submitted when the run began.
    (standby,) = (tmp_path / "sbatch.log").read_text().splitlines()
    assert "--dependency=afternotok:4242 --kill-on-invalid-dep=yes" in standby
    updates = (tmp_path / "scontrol.log").read_text()
    assert "update jobid=4242 Requeue=0" in updates
    if sig == signal.SIGUSR2:
        assert "update jobid=5555 Dependency=afterany:4242" in updates
        assert not (tmp_path / "scancel.log").exists()
    else:
        assert "Dependency=afterany" not in updates
        assert "5555" in (tmp_path / "scancel.log").read_text()


def test_programs_without_a_handler_ignore_the_warning(
    sandbox_site: SiteConfig, tmp_path: Path
) -> None:
    spec = job(tmp_path, "ignore", 1.5, launcher="srun", gpus_per_node=2)
    proc = start(render_job(spec, sandbox_site), tmp_path)
    wait_started(tmp_path / "out", 2, proc)
    proc.send_signal(signal.SIGUSR2)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err  # they ran to the end instead of dying of SIGUSR2


@pytest.mark.skipif(not host_has_cpus_0_and_1(), reason="needs CPUs 0 and 1")
def test_srun_ranks_get_planned_placement_and_variables(
    sandbox_site: SiteConfig, tmp_path: Path
) -> None:
    rendered = render_job(job(tmp_path, "ignore", 0, launcher="srun"), sandbox_site)
    proc = start(rendered, tmp_path)
    rows = wait_started(tmp_path / "out", 4, proc)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    plan = rendered.binding
    assert plan is not None
    for row in rows:
        local = int(str(row["LOCAL_RANK"]))
        expected = plan.rank(local)
        assert row["RANK"] == str(local) and row["WORLD_SIZE"] == "4"
        assert row["LOCAL_WORLD_SIZE"] == "4" and row["NODE_RANK"] == "0"
        assert row["MASTER_ADDR"] == "10.1.2.3"  # NodeAddr, not the node name
        assert row["MASTER_PORT"] == str(20000 + 4242 % 20000)
        assert row["CUDA_VISIBLE_DEVICES"] == expected.cuda_visible_devices
        assert row["NCCL_IB_HCA"] == expected.nccl_ib_hca
        assert row["UCX_NET_DEVICES"] == expected.ucx_net_devices
        assert row["affinity"] == list(expected.cpus)
        assert row["policy"] == "bind" and row["membind"] == ["0"]
        assert row["HPCJOBS_RESTART_COUNT"] == "2"


@pytest.mark.skipif(
    not host_has_cpus_0_and_1() or Path("/sys/devices/system/node/node1").exists(),
    reason="needs CPUs 0 and 1 and a host without memory node 1",
)
def test_missing_memory_node_degrades_to_cpu_binding(tmp_path: Path) -> None:
    data = load_site("sandbox").model_dump()
    data["topologies"]["sandbox-node"]["numa"][1]["memory_node"] = 1
    site = SiteConfig.model_validate(data)
    rendered = render_job(job(tmp_path, "ignore", 0, launcher="srun"), site)
    proc = start(rendered, tmp_path)
    rows = wait_started(tmp_path / "out", 4, proc)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert err.count("memory node 1 does not exist") == 1
    by_rank = {int(str(r["LOCAL_RANK"])): r for r in rows}
    assert [by_rank[i]["affinity"] for i in range(4)] == [[0], [0], [1], [1]]
    assert [by_rank[i]["membind"] for i in range(2)] == [["0"], ["0"]]
    assert [by_rank[i]["policy"] for i in (2, 3)] == ["default", "default"]


@pytest.mark.skipif(not host_has_cpus_0_and_1(), reason="needs CPUs 0 and 1")
def test_taskset_binds_cpus_when_numactl_is_missing(
    sandbox_site: SiteConfig, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name != "numactl" and not (bindir / name).exists():
                (bindir / name).symlink_to(Path(folder) / name)
    rendered = render_job(job(tmp_path, "ignore", 0, launcher="srun"), sandbox_site)
    proc = start(rendered, tmp_path, path=str(bindir))
    rows = wait_started(tmp_path / "out", 4, proc)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert err.count("numactl is not installed") == 1
    by_rank = {int(str(r["LOCAL_RANK"])): r for r in rows}
    assert [by_rank[i]["affinity"] for i in range(4)] == [[0], [0], [1], [1]]


def test_torchrun_workers_bind_by_local_rank(sandbox_site: SiteConfig, tmp_path: Path) -> None:
    spec = job(tmp_path, "ignore", 0, launcher="torchrun", torchrun=str(FAKEBIN / "torchrun"))
    rendered = render_job(spec, sandbox_site)
    proc = start(rendered, tmp_path)
    rows = wait_started(tmp_path / "out", 4, proc)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    plan = rendered.binding
    assert plan is not None
    for row in rows:
        expected = plan.rank(int(str(row["LOCAL_RANK"])))
        assert row["CUDA_VISIBLE_DEVICES"] == expected.cuda_visible_devices
        assert row["NCCL_IB_HCA"] == expected.nccl_ib_hca
        if host_has_cpus_0_and_1():
            assert row["affinity"] == list(expected.cpus)


def test_partial_allocation_binds_the_gpus_slurm_gave(
    sandbox_site: SiteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two GPUs that happen to be 2 and 3: the ranks take NUMA 1's CPU and NIC."""
    monkeypatch.setenv("FAKE_GPUS", "2,3")
    rendered = render_job(
        job(tmp_path, "ignore", 0, launcher="srun", gpus_per_node=2), sandbox_site
    )
    script = write_script(rendered, tmp_path)
    env = {
        "PATH": f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SLURM_JOB_ID": "1",
        "FAKE_GPUS": "2,3",
    }
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("started-*"))]
    assert [r["CUDA_VISIBLE_DEVICES"] for r in rows] == ["2", "3"]
    assert [r["NCCL_IB_HCA"] for r in rows] == ["=mlx5_1:1", "=mlx5_1:1"]
    if host_has_cpus_0_and_1():
        assert [r["affinity"] for r in rows] == [[1], [1]]
