"""From what ``hpcjobs plan`` was given to a :class:`~hpcjobs.plan.search.Request`.

Counts such as ``--params`` and ``--tokens`` may be written ``70000000000``, ``70B``,
``1.5T``, ``300e9``: ASCII digits, an optional fraction, exponent and one of the suffixes
``K M B G T`` (powers of 1000), and must come out as a whole number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcjobs.errors import BadInputError
from hpcjobs.plan.catalogue import CatalogueGpu, catalogue_gpu
from hpcjobs.plan.memory import Precision
from hpcjobs.plan.model import (
    ModelShape,
    ModelSpec,
    Recompute,
    assumed_shape,
    check_shape,
    read_model_config,
)
from hpcjobs.plan.search import Fixed
from hpcjobs.plan.timing import Hardware
from hpcjobs.safetext import parse_int

if TYPE_CHECKING:
    from hpcjobs.config.models import Partition, Price, SiteConfig

#: The largest parameter or token count accepted (10^18).
MAX_QUANTITY = 10**18

_QUANTITY = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:[eE]([0-9]{1,2}))?([KMBGT]?)")
_SUFFIX = {"": 0, "K": 3, "M": 6, "B": 9, "G": 9, "T": 12}
_LAYOUT_KEYS = ("tp", "pp", "dp", "mb", "sp")


def parse_quantity(text: str, what: str) -> int:
    """A whole count written ``70B``, ``1.5T``, ``300e9`` or in digits.

    Raises:
        BadInputError: It is not such a count, not whole, zero, or above 10^18.
    """
    hint = f"for example {what} 70B, {what} 1.5T, {what} 300e9 or {what} 7000000000"
    match = _QUANTITY.fullmatch(text.strip().upper()) if text.isascii() else None
    if not match:
        raise BadInputError(f"{what} {text!r} is not a count", hint=hint)
    whole, fraction, exponent, suffix = match.groups()
    if len(whole) > 19:
        raise BadInputError(f"{what} {text[:30]!r} is more than {MAX_QUANTITY:.0e}", hint=hint)
    power = int(exponent or 0) + _SUFFIX[suffix]
    fraction = fraction or ""
    digits = int(whole + fraction)
    shift = power - len(fraction)
    scale: int = pow(10, abs(shift))
    if shift >= 0:
        value = digits * scale
    elif digits % scale:
        raise BadInputError(f"{what} {text!r} is not a whole number", hint=hint)
    else:
        value = digits // scale
    if not 1 <= value <= MAX_QUANTITY:
        raise BadInputError(f"{what} {text!r} must be between 1 and {MAX_QUANTITY:.0e}", hint=hint)
    return value


def parse_layout(text: str) -> Fixed:
    """``tp=8,pp=4`` (also ``dp=``, ``mb=``, ``sp=on|off``) as fixed layout choices.

    Raises:
        BadInputError: An unknown key, a repeated key, or a bad value.
    """
    hint = "for example --layout tp=8,pp=4 or --layout tp=4,pp=2,dp=16,mb=1,sp=on"
    values: dict[str, int | bool] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().lower()
        if not sep or key not in _LAYOUT_KEYS:
            raise BadInputError(
                f"--layout {text!r}: {item.strip()!r} is not one of "
                + ", ".join(f"{k}=N" for k in _LAYOUT_KEYS),
                hint=hint,
            )
        if key in values:
            raise BadInputError(f"--layout {text!r}: {key} is given twice", hint=hint)
        value = value.strip()
        if key == "sp":
            if value.lower() not in ("on", "off", "1", "0", "true", "false"):
                raise BadInputError(f"--layout: sp must be on or off, not {value!r}", hint=hint)
            values[key] = value.lower() in ("on", "1", "true")
            continue
        try:
            values[key] = parse_int(value, minimum=1, maximum=2**20)
        except ValueError as exc:
            raise BadInputError(f"--layout: {key} {exc}", hint=hint) from None
    return Fixed(
        tp=_opt_int(values.get("tp")),
        pp=_opt_int(values.get("pp")),
        dp=_opt_int(values.get("dp")),
        micro_batch=_opt_int(values.get("mb")),
        sp=None if "sp" not in values else bool(values["sp"]),
    )


def _opt_int(value: int | bool | None) -> int | None:
    return None if value is None or isinstance(value, bool) else value


def resolve_model(
    *,
    params: str | None,
    layers: int | None,
    hidden: int | None,
    heads: int | None,
    vocab: int | None,
    seq_len: int | None,
    model_config: Path | None,
) -> ModelSpec:
    """The model from ``--params``, the shape flags and/or ``--model-config`` (flags win over
    the file; ``--params`` overrides the count the shape implies).

    Raises:
        BadInputError: Neither a parameter count nor a whole shape, or a bad value.
    """
    shape_values: dict[str, int] = {}
    if model_config is not None:
        shape_values.update(read_model_config(model_config))
    given = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "vocab": vocab,
        "seq_len": seq_len,
    }
    shape_values.update({k: v for k, v in given.items() if v is not None})
    count = parse_quantity(params, "--params") if params is not None else None
    if "seq_len" not in shape_values:
        raise BadInputError(
            "the sequence length is not known",
            hint="give --seq-len (or max_position_embeddings in --model-config)",
        )
    shape_keys = ("layers", "hidden", "heads", "vocab")
    if all(k in shape_values for k in shape_keys):
        shape = check_shape(ModelShape(**shape_values))
        return ModelSpec(count if count is not None else shape.params, shape)
    if count is None:
        missing = ", ".join(f"--{k}" for k in shape_keys if k not in shape_values)
        raise BadInputError(
            f"the model is not known: give --params, or its whole shape (missing {missing})",
            hint="for example --params 70B --seq-len 4096, or --model-config config.json",
        )
    if any(k in shape_values for k in shape_keys):
        missing = ", ".join(f"--{k}" for k in shape_keys if k not in shape_values)
        raise BadInputError(
            f"the model's shape is incomplete (missing {missing})",
            hint="give all of --layers --hidden --heads --vocab, or only --params",
        )
    shape = check_shape(assumed_shape(count, shape_values["seq_len"]))
    return ModelSpec(count, shape, shape_assumed=True)


@dataclass(frozen=True)
class Resources:
    """Where the plan runs: the partition (None for a catalogue GPU), its GPU facts, the GPU
    count, its price, and notes (a size beyond the partition is planned, and said)."""

    partition: Partition | None
    hardware: Hardware
    gpus: int
    nodes: int
    label: str
    price: Price | None = None
    notes: tuple[str, ...] = ()

    @property
    def gpu_hour_price(self) -> float | None:
        """The price of one GPU-hour, in ``price.currency``; None without a price."""
        return None if self.price is None else self.price.per_gpu_hour(self.hardware.gpus_per_node)


def resolve_resources(
    site: SiteConfig | None,
    *,
    partition: str | None,
    gpu_type: str | None,
    gpus: int | None,
    nodes: int | None,
    precision: Precision,
    gpu: str | None = None,
) -> Resources:
    """The partition (``-p``, else the first with ``--gpu-type``, else the default) and its GPU
    facts, or a catalogue GPU (``--gpu``); and the GPUs (``--gpus``, or ``--nodes`` x GPUs per
    node). A count beyond the partition's ``max_nodes`` is planned, with a note.

    Raises:
        BadInputError: No such partition or GPU, no GPU facts, a GPU count that is not whole
            nodes, or fp32 without a TF32 rate.
    """
    if gpu is not None:
        if partition is not None or gpu_type is not None:
            raise BadInputError(
                "give --gpu (a GPU of the built-in catalogue) or -p/--gpu-type (a partition of "
                "the site), not both"
            )
        return _catalogue_resources(catalogue_gpu(gpu), gpus=gpus, nodes=nodes, precision=precision)
    if site is None:
        raise BadInputError("no site config to plan a partition of", hint="give --site NAME")
    part = _pick_partition(site, partition, gpu_type)
    facts = site.gpu_facts_for(part)
    if facts is None or part.gpus_per_node < 1:
        raise BadInputError(
            f"partition {part.name!r} of site {site.name!r} has no GPU facts",
            hint="add 'gpu:' (model, bf16_tflops, memory_bytes, nvlink_domain, "
            "internode_gbit_s) to its topology or partition, or plan on a catalogue GPU with "
            "--gpu H100; see docs/site-config.md",
        )
    per_node = part.gpus_per_node
    gpus, node_count = _gpu_count(gpus, nodes, per_node, where=f"partition {part.name}")
    notes = []
    if node_count > part.max_nodes:
        notes.append(
            f"{node_count} nodes is more than partition {part.name!r} allows ({part.max_nodes}): "
            "planned as if it were larger"
        )
    if precision == "fp32":
        if facts.tf32_tflops is None:
            raise BadInputError(
                f"partition {part.name!r} has no tf32_tflops for fp32 training",
                hint="add gpu.tf32_tflops to the site config, or plan with --precision bf16",
            )
        peak = facts.tf32_tflops
    else:
        peak = facts.bf16_tflops
    hardware = Hardware(
        model=facts.model,
        peak_flops=peak * 1e12,
        memory_bytes=facts.memory_bytes,
        gpus_per_node=per_node,
        nvlink_domain=facts.nvlink_domain,
        internode_bytes_s=facts.internode_gbit_s * 1e9 / 8,
        nvlink_bytes_s=None if facts.nvlink_gbyte_s is None else facts.nvlink_gbyte_s * 1e9,
        max_time_s=part.max_time_seconds,
    )
    return Resources(part, hardware, gpus, node_count, part.name, part.price, tuple(notes))


def _catalogue_resources(
    entry: CatalogueGpu, *, gpus: int | None, nodes: int | None, precision: Precision
) -> Resources:
    if precision == "fp32":
        raise BadInputError(
            "the catalogue has no TF32 rates: plan catalogue GPUs with --precision bf16 or fp16"
        )
    per_node = entry.gpus_per_node
    gpus, node_count = _gpu_count(gpus, nodes, per_node, where=f"{entry.key} nodes")
    hardware = Hardware(
        model=entry.model,
        peak_flops=entry.bf16_tflops * 1e12,
        memory_bytes=entry.memory_bytes,
        gpus_per_node=per_node,
        nvlink_domain=entry.nvlink_domain,
        internode_bytes_s=entry.internode_gbit_s * 1e9 / 8,
        nvlink_bytes_s=None if entry.nvlink_gbyte_s is None else entry.nvlink_gbyte_s * 1e9,
        max_time_s=None,
    )
    return Resources(None, hardware, gpus, node_count, f"{entry.key} (catalogue)")


#: The most GPUs a plan is made for: ten times the largest training runs published.
MAX_GPUS = 10**6


def _gpu_count(
    gpus: int | None, nodes: int | None, per_node: int, *, where: str
) -> tuple[int, int]:
    if (gpus is None) == (nodes is None):
        raise BadInputError(
            "give the GPUs to plan for: --gpus N or --nodes N (one of them)",
            hint=f"for example --nodes 16 ({16 * per_node} GPUs on {where})",
        )
    if nodes is not None:
        gpus = nodes * per_node
    assert gpus is not None
    if gpus > MAX_GPUS:
        raise BadInputError(
            f"{gpus:,} GPUs is more than hpcjobs plans for ({MAX_GPUS:,})",
            hint="plan for fewer nodes or GPUs",
        )
    if gpus > per_node and gpus % per_node:
        raise BadInputError(
            f"--gpus {gpus} is not a whole number of {per_node}-GPU nodes",
            hint=f"use a multiple of {per_node}, or at most {per_node}",
        )
    return gpus, max(1, gpus // per_node)


def spare_nodes_for(res: Resources, spare_nodes: int | None) -> tuple[int, str | None]:
    """The spare nodes to plan with (``--spare-nodes``, else the partition's default), and a
    note when the run's nodes and its spares are more than the partition allows."""
    part = res.partition
    spares = (part.spare_nodes if part is not None else 0) if spare_nodes is None else spare_nodes
    if part is not None and spares and res.nodes + spares > part.max_nodes:
        return spares, (
            f"{res.nodes} nodes and {spares} spare node(s) are more than partition "
            f"{part.name!r} allows ({part.max_nodes})"
        )
    return spares, None


#: Most plans one comparison makes (each searches a few thousand layouts).
MAX_COMPARED = 64


@dataclass(frozen=True)
class Target:
    """One thing a comparison plans on: a site partition (None: the default) or a catalogue
    GPU."""

    partition: str | None = None
    gpu: str | None = None


def parse_node_counts(text: str) -> list[int]:
    """``16``, ``16,32,64`` or a doubling range ``16-128`` (16, 32, 64, 128).

    Raises:
        BadInputError: Not counts, a range that runs backwards, or too many.
    """
    hint = "for example -N 16, -N 16,32,64 or -N 16-128 (doubling from 16 to 128)"
    low, dash, high = text.partition("-")
    if dash:
        first = parse_quantity(low, "--nodes")
        last = parse_quantity(high, "--nodes")
        if last < first:
            raise BadInputError(f"--nodes {text!r} runs backwards", hint=hint)
        counts: list[int] = []
        count = first
        while count <= last and len(counts) <= MAX_COMPARED:
            counts.append(count)
            count *= 2
        if counts[-1] != last:
            counts.append(last)
    else:
        counts = [parse_quantity(part, "--nodes") for part in text.split(",")]
    counts = list(dict.fromkeys(counts))
    if len(counts) > MAX_COMPARED:
        raise BadInputError(f"--nodes {text!r}: more than {MAX_COMPARED} node counts", hint=hint)
    return counts


def parse_targets(
    site: SiteConfig | None, partitions: str | None, gpus: str | None
) -> list[Target]:
    """What to plan on: ``--partitions a,b`` (``all``: every partition with GPU facts),
    ``--gpu H100,A100`` (catalogue GPUs), both, or neither (one target: ``-p`` or the default).

    Raises:
        BadInputError: An unknown partition or GPU, or too many.
    """
    targets: list[Target] = []
    if partitions and site is None:
        raise BadInputError("no site config to take --partitions from", hint="give --site NAME")
    if partitions and site is not None:
        if partitions.strip() == "all":
            names = [p.name for p in site.partitions if site.gpu_facts_for(p) is not None]
            if not names:
                raise BadInputError(f"site {site.name!r} has no partition with GPU facts")
        else:
            names = [site.partition(n.strip()).name for n in partitions.split(",")]
        targets += [Target(partition=name) for name in dict.fromkeys(names)]
    if gpus:
        keys = [catalogue_gpu(name).key for name in gpus.split(",")]
        targets += [Target(gpu=key) for key in dict.fromkeys(keys)]
    if len(targets) > MAX_COMPARED:
        raise BadInputError(f"more than {MAX_COMPARED} partitions and GPUs to compare")
    return targets or [Target()]


def _pick_partition(site: SiteConfig, partition: str | None, gpu_type: str | None) -> Partition:
    if gpu_type is None:
        return site.partition(partition)
    matching = [
        p for p in site.partitions if p.gpu_type == gpu_type and site.gpu_facts_for(p) is not None
    ]
    if partition is not None:
        part = site.partition(partition)
        if part.gpu_type != gpu_type:
            raise BadInputError(
                f"partition {part.name!r} has GPU type {part.gpu_type!r}, not {gpu_type!r}"
            )
        return part
    if not matching:
        known = sorted({p.gpu_type for p in site.partitions if p.gpu_type})
        raise BadInputError(
            f"site {site.name!r} has no partition with GPU type {gpu_type!r} and GPU facts "
            f"(GPU types: {', '.join(known) or 'none'})"
        )
    default = site.default_partition
    return default if default in matching else matching[0]


#: The slowest rate a plan is made for (1,000 FLOP/s): below it step times stop being numbers.
MIN_TFLOPS = 1e-9


def efficiency_from(
    *, mfu: float | None, achieved_tflops: float | None, peak_flops: float
) -> float:
    """The share of peak the run achieves: ``--mfu``, or ``--achieved-tflops`` / peak.

    Raises:
        BadInputError: Both are given, or a value is not a finite number in range.
    """
    if mfu is not None and achieved_tflops is not None:
        raise BadInputError("give --mfu or --achieved-tflops, not both")
    if achieved_tflops is not None:
        if not math.isfinite(achieved_tflops) or achieved_tflops < MIN_TFLOPS:
            raise BadInputError(
                f"--achieved-tflops must be at least {MIN_TFLOPS:g} (got {achieved_tflops:g})",
                hint="give the TFLOP/s one GPU achieves, for example --achieved-tflops 400",
            )
        value = achieved_tflops * 1e12 / peak_flops
        if value > 1:
            raise BadInputError(
                f"--achieved-tflops {achieved_tflops:g} is more than the GPU's peak "
                f"({peak_flops / 1e12:g} TFLOP/s)"
            )
        return value
    value = 0.4 if mfu is None else mfu
    if not math.isfinite(value) or not 1e-15 <= value <= 1:
        raise BadInputError(f"--mfu must be in (0, 1] (got {value})", hint="for example --mfu 0.4")
    return value


def positive(value: float | None, flag: str) -> float | None:
    """``value`` when it is a finite number above 0 (None passes through).

    Raises:
        BadInputError: It is not.
    """
    if value is not None and not (math.isfinite(value) and 0 < value < 1e9):
        raise BadInputError(f"{flag} must be a number above 0 (got {value:g})")
    return value


def not_negative(value: float | None, flag: str) -> float | None:
    """``value`` when it is a finite number of at least 0 (None passes through).

    Raises:
        BadInputError: It is not.
    """
    if value is not None and not (math.isfinite(value) and 0 <= value < 1e9):
        raise BadInputError(f"{flag} must be a number of at least 0 (got {value:g})")
    return value


def recompute_value(value: str | None) -> Recompute | None:
    """``--recompute`` as the planner's value."""
    if value is None:
        return None
    if value == "none":
        return "none"
    if value == "selective":
        return "selective"
    if value == "full":
        return "full"
    raise BadInputError(f"--recompute must be none, selective or full, not {value!r}")


__all__ = [
    "MAX_QUANTITY",
    "Resources",
    "efficiency_from",
    "parse_layout",
    "parse_quantity",
    "recompute_value",
    "resolve_model",
    "resolve_resources",
    "spare_nodes_for",
]
