"""torchrun on 2 sandbox nodes: c10d rendezvous, per-worker binding, a real gloo all_reduce."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hpcjobs.config.loader import load_site
from hpcjobs.script.jobspec import JobSpec, RequeuePolicy
from hpcjobs.script.render import render_job
from tests.live.test_binding import reports, submit, wait_done

VENV_BIN = Path(sys.executable).absolute().parent
PYTHON = str(VENV_BIN / "python")
TORCHRUN = str(VENV_BIN / "torchrun")

WORKER = r"""
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value, op=dist.ReduceOp.SUM)
report = {
    "rank": rank,
    "world": world,
    "sum": value.item(),
    "local_rank": os.environ["LOCAL_RANK"],
    "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "hca": os.environ.get("NCCL_IB_HCA"),
    "affinity": sorted(os.sched_getaffinity(0)),
    "node": os.environ.get("SLURMD_NODENAME"),
}
with open(os.path.join(sys.argv[1], "report-%d.json" % rank), "w") as f:
    json.dump(report, f)
dist.barrier()  # no rank tears the group down while a peer still uses it
dist.destroy_process_group()
"""


def test_torchrun_gloo_all_reduce(shared_tmp: Path, slurm_env: dict[str, str]) -> None:
    site = load_site("sandbox")
    worker = shared_tmp / "worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    spec = JobSpec(
        name="torchrun-gloo",
        nodes=2,
        gpus_per_node=4,
        launcher="torchrun",
        torchrun=TORCHRUN,
        time="00:05:00",
        output_dir=str(shared_tmp),
        requeue=RequeuePolicy(lead_time=30),
        env={"OMP_NUM_THREADS": "1"},
        command=[PYTHON, str(worker), str(shared_tmp)],
    )
    rendered = render_job(spec, site)
    plan = rendered.binding
    assert plan is not None
    assert "--ntasks-per-node=1" in rendered.sbatch_args
    job_id = submit(rendered, shared_tmp, slurm_env)
    log = shared_tmp / f"slurm-{job_id}.out"
    try:
        # Eight torch processes start on two cores: allow for a loaded machine.
        wait_done(job_id, slurm_env, timeout=180)
    except BaseException:
        print(log.read_text(encoding="utf-8") if log.exists() else "(no log)")
        raise
    rows = reports(shared_tmp)
    assert len(rows) == 8, log.read_text(encoding="utf-8")
    world = 8
    assert sorted(int(str(r["rank"])) for r in rows) == list(range(world))
    for row in rows:
        assert row["world"] == world
        assert row["sum"] == world * (world + 1) / 2, json.dumps(row)
        expected = plan.rank(int(str(row["local_rank"])))
        assert row["cuda"] == expected.cuda_visible_devices
        assert row["hca"] == expected.nccl_ib_hca
        assert row["affinity"] == list(expected.cpus)
    assert len({r["node"] for r in rows}) == 2  # two nodes: which two is the scheduler's choice
