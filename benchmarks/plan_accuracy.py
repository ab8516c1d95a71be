"""How well `hpcjobs plan --from-run` predicts a step time at another size, on the sandbox.

Run A trains `examples/ddp_train.py` (an MLP of 2,372 parameters, 16 samples per rank per step,
DDP over gloo) on 1 node x 2 ranks. `plan --from-run A` takes the FLOP/s that run achieved and
predicts the step time on 2 nodes x 2 ranks. Run B measures it. The example keeps 16 samples per
rank, so B's global batch is twice A's; the plan is made for A's batch on B's GPUs and scaled by
the batch ratio. The error is printed beside the figures, not asserted: the model is tiny and a
step is mostly the simulated work (`--step-time`) and gloo's all-reduce, which the plan counts
only through the inter-node bandwidth of the site config.

Needs a running sandbox: `hpcjobs sandbox up && eval "$(hpcjobs sandbox env)"`.

    python benchmarks/plan_accuracy.py [--steps 60] [--step-time 0.05]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).absolute().parent
HPCJOBS = str(BIN / "hpcjobs")
ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "examples" / "ddp_train.py")
PARAMS = 2372  # IN 32 -> HIDDEN 64 -> OUT 4, with biases
PER_RANK_BATCH = 16


def run(nodes: int, ranks_per_node: int, args: argparse.Namespace, work: Path) -> str:
    """Submit the example, wait for it, return its job id."""
    argv = [HPCJOBS, "--site", "sandbox", "submit", "--wait", "-J", f"acc-{nodes}x{ranks_per_node}",
            "--output-dir", str(work / f"{nodes}x{ranks_per_node}"), "-N", str(nodes),
            "--gpus-per-node", str(ranks_per_node), "-t", "10:00", "--",
            sys.executable, TRAIN, "--steps", str(args.steps), "--step-time", str(args.step_time),
            "--checkpoint-every", "10"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=work)
    if proc.returncode != 0:
        raise SystemExit(f"run {nodes}x{ranks_per_node} failed:\n{proc.stderr}")
    return proc.stdout.split()[0]


def plan(job_id: str, gpus: int, global_batch: int) -> dict[str, object]:
    argv = [HPCJOBS, "--site", "sandbox", "plan", "--from-run", job_id, "--params", str(PARAMS),
            "--seq-len", "1", "--tokens", "1e6", "--global-batch", str(global_batch),
            "--gpus", str(gpus), "--layout", "tp=1,pp=1", "--zero", "0", "--recompute", "none",
            "--precision", "fp32", "--json"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"plan failed:\n{proc.stderr}")
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--step-time", type=float, default=0.05)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        raise SystemExit('no sandbox: run `eval "$(hpcjobs sandbox env)"` first')
    work = Path(tempfile.mkdtemp(prefix="hpcjobs-plan-accuracy-", dir="/tmp"))
    work.chmod(0o755)
    small = run(1, 2, args, work)
    batch_a = 2 * PER_RANK_BATCH
    predicted = plan(small, 4, batch_a)
    from_run = predicted["from_run"]
    assert isinstance(from_run, dict)
    layouts = predicted["layouts"]
    assert isinstance(layouts, list)
    scale = (4 * PER_RANK_BATCH) / batch_a
    predicted_b = float(layouts[0]["step_s"]["total"]) * scale
    big = run(2, 2, args, work)
    measured = plan(big, 4, 4 * PER_RANK_BATCH)["from_run"]
    assert isinstance(measured, dict)
    measured_b = float(measured["step_s"])
    error = (predicted_b - measured_b) / measured_b
    print(f"{'':34}{'step (s)':>10}")
    print(f"{'run A, 1 node x 2 ranks (measured)':34}{float(from_run['step_s']):>10.4f}")
    print(f"{'run B, 2 nodes x 2 ranks (plan)':34}{predicted_b:>10.4f}")
    print(f"{'run B, 2 nodes x 2 ranks (measured)':34}{measured_b:>10.4f}")
    print(f"prediction error: {error:+.1%} (jobs {small}, {big}; {args.steps} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
