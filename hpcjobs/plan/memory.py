"""Per-GPU memory of one parallel layout: model states, activations and an allowance.

* Model states, Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models" (SC '20), section 3.1 and figure 1: mixed-precision Adam keeps ``2Ψ``
  bytes of fp16/bf16 parameters, ``2Ψ`` of gradients and ``KΨ`` of optimizer states (fp32
  master weights, momentum and variance: ``K = 12``) for ``Ψ`` parameters. ZeRO stage 1
  (P_os) divides the optimizer states by the data-parallel degree ``Nd``, stage 2 (P_os+g)
  the gradients too, stage 3 (P_os+g+p) the parameters too. Plain fp32 training keeps
  ``4Ψ + 4Ψ + 8Ψ`` (weights, gradients, Adam's two moments).
* Activations, Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (arXiv:2205.05198), section 4 and table 2: one layer stores
  ``s·b·h·(34 + 5·a·s/h)`` bytes (16-bit activations) without parallelism;
  ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` with tensor parallelism ``t``;
  ``s·b·h/t·(34 + 5·a·s/h)`` with tensor and sequence parallelism; ``s·b·h·(10 + 24/t)`` and
  ``s·b·h·34/t`` with selective recomputation; ``2·s·b·h`` (the layer's input) with full
  recomputation. With 1F1B pipelining the first stage holds ``p`` micro-batches of ``l/p``
  layers: ``l`` layers' worth in all.

See docs/plan.md for the assumptions added here (logits, the full-recomputation working set,
fp32 activations, the allowance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hpcjobs.plan.model import ModelSpec, Recompute

Precision = Literal["bf16", "fp16", "fp32"]
PRECISIONS: tuple[Precision, ...] = ("bf16", "fp16", "fp32")

#: Fixed per-GPU allowance: CUDA context, cuBLAS/NCCL workspaces and communication buffers.
FIXED_ALLOWANCE_BYTES = 2 * 1024**3
#: Allowance for allocator fragmentation and temporary buffers, as a share of the rest.
FRAGMENTATION = 0.10


@dataclass(frozen=True)
class Layout:
    """One way to spread the training over GPUs.

    ``tp`` tensor-, ``pp`` pipeline-, ``dp`` data-parallel degrees (``tp·pp·dp`` GPUs),
    ``micro_batch`` sequences per micro-batch, ZeRO stage ``zero``, activation recomputation
    ``recompute``, and sequence parallelism ``sp`` (only with ``tp > 1``).
    """

    tp: int
    pp: int
    dp: int
    micro_batch: int
    zero: int
    recompute: Recompute
    sp: bool

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self) -> str:
        sp = ",sp" if self.sp else ""
        return (
            f"tp={self.tp},pp={self.pp},dp={self.dp},mb={self.micro_batch}{sp} "
            f"zero={self.zero} recompute={self.recompute}"
        )


@dataclass(frozen=True)
class Memory:
    """Bytes per GPU (the fullest GPU: the first pipeline stage)."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    allowance: int

    @property
    def model_states(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    @property
    def total(self) -> int:
        return self.model_states + self.activations + self.allowance


def state_bytes_per_param(precision: Precision) -> tuple[int, int, int]:
    """Bytes per parameter for (parameters, gradients, optimizer states) with Adam."""
    if precision == "fp32":
        return 4, 4, 8
    return 2, 2, 12  # ZeRO paper, section 3.1: K = 12


def model_state_bytes(
    params: float, precision: Precision, zero: int, dp: int
) -> tuple[float, float, float]:
    """(parameters, gradients, optimizer states) in bytes for ``params`` parameters on one GPU
    of a data-parallel group of ``dp``, with ZeRO stage ``zero`` (0-3)."""
    p_bytes, g_bytes, k = state_bytes_per_param(precision)
    parameters, gradients, optimizer = p_bytes * params, g_bytes * params, k * params
    if zero >= 1:
        optimizer /= dp
    if zero >= 2:
        gradients /= dp
    if zero >= 3:
        parameters /= dp
    return parameters, gradients, optimizer


def layer_activation_bytes(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    *,
    tp: int = 1,
    sp: bool = False,
    recompute: Recompute = "none",
) -> float:
    """Activation bytes one transformer layer keeps for one micro-batch (16-bit values),
    Korthikanti et al. 2022, table 2."""
    s, b, h, a, t = seq_len, micro_batch, hidden, heads, tp
    sbh = float(s) * b * h
    if recompute == "full":
        return 2 * sbh / (t if sp else 1)
    attention = 0.0 if recompute == "selective" else 5 * a * s / (h * t)
    if sp:
        return sbh * (34 / t + attention)
    return sbh * (10 + 24 / t + attention)


def activation_bytes(
    model: ModelSpec, layout: Layout, precision: Precision, micro_batches: int
) -> float:
    """Activation bytes on the first pipeline stage (the fullest GPU).

    It holds ``min(pp, micro_batches)`` micro-batches of ``layers/pp`` layers (1F1B), plus,
    counted on every GPU to stay on the safe side, the fp32 logits of one micro-batch
    (``4·s·b·V/t``) and, with full recomputation, one layer's full activations (the layer
    being recomputed).
    """
    shape = model.shape
    per_layer = layer_activation_bytes(
        shape.seq_len,
        layout.micro_batch,
        shape.hidden,
        shape.heads,
        tp=layout.tp,
        sp=layout.sp,
        recompute=layout.recompute,
    )
    in_flight = min(layout.pp, micro_batches)
    layers_per_stage = shape.layers / layout.pp
    total = per_layer * layers_per_stage * in_flight
    if layout.recompute == "full":
        total += layer_activation_bytes(
            shape.seq_len, layout.micro_batch, shape.hidden, shape.heads, tp=layout.tp, sp=layout.sp
        )
    if precision == "fp32":
        total *= 2  # the table counts 16-bit activations
    total += 4.0 * shape.seq_len * layout.micro_batch * shape.vocab / layout.tp
    return total


def gpu_memory(
    model: ModelSpec, layout: Layout, precision: Precision, micro_batches: int
) -> Memory:
    """The memory one GPU needs for ``layout``: model states of its ``params/(tp·pp)``
    parameters, its activations, and the allowance (:data:`FIXED_ALLOWANCE_BYTES` plus
    :data:`FRAGMENTATION` of the rest)."""
    local = model.params / (layout.tp * layout.pp)
    parameters, gradients, optimizer = model_state_bytes(local, precision, layout.zero, layout.dp)
    activations = activation_bytes(model, layout, precision, micro_batches)
    rest = parameters + gradients + optimizer + activations
    allowance = FIXED_ALLOWANCE_BYTES + FRAGMENTATION * rest
    return Memory(
        parameters=round(parameters),
        gradients=round(gradients),
        optimizer=round(optimizer),
        activations=round(activations),
        allowance=round(allowance),
    )


__all__ = [
    "FIXED_ALLOWANCE_BYTES",
    "FRAGMENTATION",
    "PRECISIONS",
    "Layout",
    "Memory",
    "Precision",
    "activation_bytes",
    "gpu_memory",
    "layer_activation_bytes",
    "model_state_bytes",
    "state_bytes_per_param",
]
