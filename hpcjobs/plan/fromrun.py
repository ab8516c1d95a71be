"""The step time an earlier hpcjobs run measured, from what the run left on disk.

A run submitted here has a record (``record.json``, found through the job index) naming its
checkpoint folder, GPUs and variables. Its step time comes from, in this order:

1. its checkpoints: each ``COMPLETE`` marker holds the step and the time it was written, so
   two checkpoints of the run give ``(t₂ - t₁) / (step₂ - step₁)`` (steady state: start-up is
   left out, checkpoint writes are in);
2. its event log and progress file: the run's ``start`` event, and the step and modification
   time of ``PROGRESS`` (``CheckpointDir.note_progress``): start-up is included, so the step
   time is an upper bound.

A run planned with ``hpcjobs plan --apply`` also carries its global batch, sequence length and
recomputation in ``HPCJOBS_PLAN_*`` variables; otherwise the plan's own values are assumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hpcjobs.errors import BadInputError
from hpcjobs.jobs.chain import chain_file, checkpoint_step, read_chain
from hpcjobs.jobs.records import find_record, read_record
from hpcjobs.plan.model import RECOMPUTES, ModelSpec, Recompute
from hpcjobs.safetext import parse_int

_HINT = (
    "--from-run needs a run submitted from here with a checkpoint folder in which the "
    "training loop saved at least two checkpoints (hpcjobs.runtime.checkpoint), or called "
    "note_progress(step) every step; give --mfu or --achieved-tflops instead"
)


@dataclass(frozen=True)
class MeasuredRun:
    """What a finished run measured."""

    job_id: str
    step_s: float
    steps: int
    gpus: int
    how: str
    env: dict[str, str]

    def plan_value(self, name: str) -> str | None:
        """The run's ``HPCJOBS_PLAN_<name>`` variable, if it has one."""
        return self.env.get(f"HPCJOBS_PLAN_{name}")


def measure_run(job_id: str, *, index_dir: Path | None = None) -> MeasuredRun:
    """The measured step time of ``job_id``.

    Raises:
        BadInputError: The job is unknown here, or left nothing to time its steps by.
    """
    path = find_record(job_id, index_dir=index_dir)
    if path is None:
        raise BadInputError(f"--from-run {job_id}: no hpcjobs record of that job here", hint=_HINT)
    record = read_record(path)
    spec = record.get("spec")
    if not isinstance(spec, dict):
        raise BadInputError(f"--from-run {job_id}: its record {path} has no job spec", hint=_HINT)
    env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
    gpus = _int(spec.get("nodes"), 1) * (
        _int(spec.get("gpus_per_node"), 0) or _int(spec.get("ntasks_per_node"), 1)
    )
    folder = spec.get("checkpoint_dir")
    if not isinstance(folder, str) or not folder:
        raise BadInputError(f"--from-run {job_id}: the run had no checkpoint folder", hint=_HINT)
    root = Path(folder).expanduser()
    timed = _from_checkpoints(root, job_id) or _from_progress(root, job_id, record)
    if timed is None:
        raise BadInputError(
            f"--from-run {job_id}: nothing to time its steps by in {root} "
            "(fewer than two checkpoints and no progress file)",
            hint=_HINT,
        )
    step_s, steps, how = timed
    return MeasuredRun(job_id, step_s, steps, gpus, how, env)


def _int(value: Any, default: int) -> int:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )


def _from_checkpoints(root: Path, job_id: str) -> tuple[float, int, str] | None:
    points: dict[str, list[tuple[int, float]]] = {}
    if not root.is_dir():
        return None
    for entry in sorted(root.glob("step-*")):
        marker = entry / "COMPLETE"
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        step, when = data.get("step"), data.get("time")
        if not isinstance(step, int) or not isinstance(when, int | float):
            continue
        points.setdefault(str(data.get("job_id")), []).append((step, float(when)))
    series = points.get(job_id) or max(points.values(), key=len, default=[])
    series.sort()
    if len(series) < 2 or series[-1][0] <= series[0][0] or series[-1][1] <= series[0][1]:
        return None
    steps = series[-1][0] - series[0][0]
    step_s = (series[-1][1] - series[0][1]) / steps
    how = f"{len(series)} checkpoints, steps {series[0][0]}-{series[-1][0]}"
    return step_s, steps, how


def _from_progress(
    root: Path, job_id: str, record: dict[str, Any]
) -> tuple[float, int, str] | None:
    progress = root / "PROGRESS"
    try:
        text = progress.read_text(encoding="utf-8").strip()
        mtime = progress.stat().st_mtime
    except OSError:
        return None
    if not text.isdigit():
        return None
    output_dir = (record.get("spec") or {}).get("output_dir")
    if not isinstance(output_dir, str):
        return None
    try:
        chain = read_chain(chain_file(Path(output_dir).expanduser(), job_id))
    except (OSError, ValueError, BadInputError):
        return None
    starts = [e for e in chain.events if e.event == "start" and e.job_id == job_id]
    if not starts:
        return None
    start = starts[-1]
    first = checkpoint_step(start.number("checkpoint"))
    if first is None:
        return None  # resumed from a checkpoint whose step is unknown: no count of steps
    first_step = first + 1  # -1: no checkpoint, from step 0
    steps = int(text) + 1 - first_step
    if steps < 1 or mtime <= start.time:
        return None
    how = f"progress to step {text} since the run's start (start-up included: an upper bound)"
    return (mtime - start.time) / steps, steps, how


def achieved_flops_per_gpu(
    run: MeasuredRun, model: ModelSpec, *, global_batch: int, recompute: Recompute
) -> tuple[float, dict[str, Any]]:
    """FLOP/s per GPU the run achieved: its iteration's FLOPs over step time x GPUs.

    The run's global batch, sequence length and recomputation come from its
    ``HPCJOBS_PLAN_*`` variables when it has them, else from the plan (``global_batch``,
    the model's sequence length, ``recompute``).

    Returns:
        The rate, and what it was computed from (JSON-ready).
    """

    def number(name: str, default: int) -> int:
        value = run.plan_value(name)
        try:
            return default if value is None else parse_int(value, minimum=1)
        except ValueError:
            return default

    batch = number("GLOBAL_BATCH", global_batch)
    seq_len = number("SEQ_LEN", model.shape.seq_len)
    named = run.plan_value("RECOMPUTE")
    run_recompute: Recompute = recompute
    for option in RECOMPUTES:
        if named == option:
            run_recompute = option
    run_model = replace(model, shape=replace(model.shape, seq_len=seq_len))
    flops = run_model.flops(batch, run_recompute)
    rate = flops / (run.step_s * run.gpus)
    basis = {
        "job_id": run.job_id,
        "step_s": run.step_s,
        "steps_timed": run.steps,
        "gpus": run.gpus,
        "timed_by": run.how,
        "global_batch": batch,
        "seq_len": seq_len,
        "recompute": run_recompute,
        "flops_per_iteration": flops,
        "achieved_flops_per_gpu": rate,
    }
    return rate, basis


__all__ = ["MeasuredRun", "achieved_flops_per_gpu", "measure_run"]
