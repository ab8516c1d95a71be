"""Plans as JSON-ready data: memory in bytes, times in seconds, rates in FLOP/s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hpcjobs.plan.model import ModelSpec
from hpcjobs.plan.search import Candidate, Request
from hpcjobs.plan.timing import Hardware

if TYPE_CHECKING:
    from hpcjobs.plan.inputs import Resources


def candidate_data(request: Request, cand: Candidate) -> dict[str, Any]:
    """One layout with its memory breakdown, step time and training cost."""
    layout, memory, step, cost = cand.layout, cand.memory, cand.step, cand.cost
    model_flops = request.model.model_flops(request.global_batch)
    flops = request.model.flops(request.global_batch, layout.recompute)
    peak = request.hardware.peak_flops * layout.gpus
    return {
        "tp": layout.tp,
        "pp": layout.pp,
        "dp": layout.dp,
        "micro_batch": layout.micro_batch,
        "micro_batches_per_pipeline": cand.micro_batches,
        "zero": layout.zero,
        "recompute": layout.recompute,
        "sequence_parallel": layout.sp,
        "fits": cand.fits,
        "notes": list(cand.notes),
        "memory_bytes": {
            "parameters": memory.parameters,
            "gradients": memory.gradients,
            "optimizer": memory.optimizer,
            "activations": memory.activations,
            "allowance": memory.allowance,
            "total": memory.total,
            "available": request.hardware.memory_bytes,
        },
        "step_s": {
            "compute": step.compute_s,
            "pipeline_bubble": step.bubble_s,
            "dp_allreduce": step.allreduce_s,
            "total": step.total_s,
        },
        "flops_per_iteration": flops,
        "model_flops_per_iteration": model_flops,
        "achieved_flops_per_gpu": flops / step.total_s / layout.gpus,
        "mfu": model_flops / step.total_s / peak,
        "training": {
            "iterations": cost.iterations,
            "total_s": cost.total_s,
            "days": cost.days,
            "gpu_hours": cost.gpu_hours,
            "spare_gpu_hours": cost.spare_gpu_hours,
            "time_limit_chunks": cost.chunks,
        },
    }


def cost_data(res: Resources, cand: Candidate) -> dict[str, Any] | None:
    """What the run costs at the partition's price: its GPU-hours and its spares' (None
    without a price)."""
    price = res.gpu_hour_price
    if price is None or res.price is None:
        return None
    run = cand.cost.gpu_hours * price
    spares = cand.cost.spare_gpu_hours * price
    per_node = res.hardware.gpus_per_node
    others = {
        name: converted
        for name in ("reserved", "on_demand")
        if (rate := getattr(res.price, name)) is not None
        and (converted := res.price.per_gpu_hour(per_node, rate)) is not None
    }
    return {
        "currency": res.price.currency,
        "gpu_hour_price": price,
        "run": run,
        "spare_nodes": spares,
        "total": run + spares,
        # The same GPU-hours at the provider's other rates, per GPU-hour, for comparison.
        "at_other_rates": {
            name: (cand.cost.gpu_hours + cand.cost.spare_gpu_hours) * rate
            for name, rate in others.items()
        },
    }


def model_data(model: ModelSpec) -> dict[str, Any]:
    shape = model.shape
    return {
        "params": model.params,
        "layers": shape.layers,
        "hidden": shape.hidden,
        "heads": shape.heads,
        "vocab": shape.vocab,
        "seq_len": shape.seq_len,
        "shape_assumed": model.shape_assumed,
    }


def hardware_data(hw: Hardware) -> dict[str, Any]:
    return {
        "gpu": hw.model,
        "peak_flops_per_gpu": hw.peak_flops,
        "memory_bytes": hw.memory_bytes,
        "gpus_per_node": hw.gpus_per_node,
        "nvlink_domain": hw.nvlink_domain,
        "internode_bytes_per_s": hw.internode_bytes_s,
        "nvlink_bytes_per_s": hw.nvlink_bytes_s,
        "max_time_s": hw.max_time_s,
    }


__all__ = ["candidate_data", "cost_data", "hardware_data", "model_data"]
