"""Step time of one layout, and what the whole run costs.

One iteration (one optimizer step over the global batch) takes:

* **compute**: its FLOPs (:meth:`ModelSpec.flops`, recomputation included) over
  ``n · peak · efficiency``, where the efficiency (``--mfu``) is the share of the dense peak the
  run's kernels achieve on the FLOPs it executes;
* **pipeline bubble**: compute × ``(p - 1)/m`` for ``m`` micro-batches per pipeline
  (Narayanan et al. 2021, section 2.2.1, 1F1B schedule);
* **data-parallel gradient all-reduce**, not overlapped with compute: a ring all-reduce sends
  ``2·(d - 1)/d`` times the GPU's gradient bytes (ZeRO-3 also all-gathers the parameters:
  ``3·(d - 1)/d``), over NVLink when the data-parallel group is inside one node, else over the
  GPU's inter-node bandwidth.

An **achieved rate** ``X`` (``--achieved-tflops``, ``--from-run``) is end to end instead: it is
what a whole iteration achieved, bubble and communication included, as the Megatron-LM paper
measures its "achieved teraFLOP/s per GPU". The step is then ``F / (n·X)``, with nothing added
on top. The whole run is ``ceil(tokens / (global batch · s))`` iterations; end-to-end time in
the paper's approximation (eq. 4) is ``8·T·P / (n·X)``, which the achieved-rate step gives
exactly when ``F = 8·P`` per token (full recomputation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcjobs.plan.memory import Layout, Precision, state_bytes_per_param
from hpcjobs.plan.model import ModelSpec


@dataclass(frozen=True)
class Hardware:
    """What the planner needs to know of the GPUs and their nodes."""

    model: str
    peak_flops: float
    memory_bytes: int
    gpus_per_node: int
    nvlink_domain: int
    internode_bytes_s: float
    nvlink_bytes_s: float | None = None
    max_time_s: int | None = None


@dataclass(frozen=True)
class StepTime:
    compute_s: float
    bubble_s: float
    allreduce_s: float
    #: True when the step came from an achieved rate: bubble and all-reduce are inside it.
    end_to_end: bool = False

    @property
    def total_s(self) -> float:
        return self.compute_s + self.bubble_s + self.allreduce_s


@dataclass(frozen=True)
class RunCost:
    iterations: int
    total_s: float
    gpu_hours: float
    chunks: int | None
    #: GPU-hours of the spare nodes held beside the run, idle (recovery without a queue).
    spare_gpu_hours: float = 0.0

    @property
    def days(self) -> float:
        return self.total_s / 86400


def allreduce_bytes(model: ModelSpec, layout: Layout, precision: Precision) -> float:
    """Bytes one GPU sends per iteration for data-parallel gradient reduction."""
    d = layout.dp
    if d == 1:
        return 0.0
    _, grad_bytes, _ = state_bytes_per_param(precision)
    local = model.params / (layout.tp * layout.pp) * grad_bytes
    factor = 3.0 if layout.zero >= 3 else 2.0
    return factor * (d - 1) / d * local


def dp_within_node(layout: Layout, gpus_per_node: int) -> bool:
    """Whether the data-parallel group fits in one node (ranks ordered tp, then dp, then pp)."""
    return layout.tp * layout.dp <= gpus_per_node


def step_time(
    model: ModelSpec,
    layout: Layout,
    hardware: Hardware,
    *,
    global_batch: int,
    precision: Precision,
    efficiency: float,
    achieved_flops: float | None = None,
) -> StepTime:
    """The time of one iteration over ``global_batch`` sequences on ``layout.gpus`` GPUs: at
    ``efficiency`` x peak for the compute, plus bubble and all-reduce; or, with
    ``achieved_flops`` (an end-to-end rate per GPU), the iteration's FLOPs at that rate."""
    flops = model.flops(global_batch, layout.recompute)
    if achieved_flops is not None:
        return StepTime(flops / (layout.gpus * achieved_flops), 0.0, 0.0, end_to_end=True)
    micro_batches = global_batch // (layout.dp * layout.micro_batch)
    compute = flops / (layout.gpus * hardware.peak_flops * efficiency)
    bubble = compute * (layout.pp - 1) / micro_batches
    bandwidth = hardware.internode_bytes_s
    if dp_within_node(layout, hardware.gpus_per_node) and hardware.nvlink_bytes_s:
        bandwidth = hardware.nvlink_bytes_s
    allreduce = allreduce_bytes(model, layout, precision) / bandwidth
    return StepTime(compute, bubble, allreduce)


def run_cost(
    step_s: float, iterations: int, gpus: int, max_time_s: int | None, spare_gpus: int = 0
) -> RunCost:
    """Total time, GPU-hours and the number of time-limit chunks (None: no limit); with
    ``spare_gpus`` (the GPUs of spare nodes), the GPU-hours they are held for."""
    total = step_s * iterations
    chunks = None if not max_time_s else max(1, math.ceil(total / max_time_s))
    return RunCost(iterations, total, total * gpus / 3600, chunks, total * spare_gpus / 3600)


def end_to_end_seconds(tokens: float, params: float, gpus: int, flops_per_gpu: float) -> float:
    """Narayanan et al. 2021, eq. (4): ``8·T·P / (n·X)`` (full recomputation)."""
    return 8 * tokens * params / (gpus * flops_per_gpu)


__all__ = [
    "Hardware",
    "RunCost",
    "StepTime",
    "allreduce_bytes",
    "dp_within_node",
    "end_to_end_seconds",
    "run_cost",
    "step_time",
]
