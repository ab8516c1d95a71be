"""The model to plan for: its shape, parameter count and FLOPs per iteration.

Formulas from Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM" (SC '21), section 5.1 and appendix: a GPT-style transformer with
``l`` layers, hidden size ``h``, ``a`` attention heads, vocabulary ``V`` and sequence length
``s`` has ``P = 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h))`` parameters, and one iteration over
``B`` sequences takes ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` FLOPs with full activation
recomputation (eq. 3). See docs/plan.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hpcjobs.errors import BadInputError
from hpcjobs.safetext import check_int

Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")

#: The largest model config file read (a Hugging Face config.json is a few KiB).
MAX_CONFIG_BYTES = 1024 * 1024

#: Largest accepted layer count, hidden size, heads, vocabulary and sequence length.
MAX_DIMENSION = 2**24

#: config.json key -> ModelShape field.
HF_KEYS = {
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "vocab_size": "vocab",
    "max_position_embeddings": "seq_len",
}


@dataclass(frozen=True)
class ModelShape:
    """A GPT-style transformer: layers ``l``, hidden size ``h``, heads ``a``, vocabulary ``V``,
    sequence length ``s``."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int

    @property
    def params(self) -> int:
        """Narayanan et al. 2021, eq. (2): ``12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h))``."""
        n, h, v, s = self.layers, self.hidden, self.vocab, self.seq_len
        return 12 * n * h * h + 13 * n * h + (v + s) * h

    def flops(self, batch: int, recompute: Recompute) -> float:
        """FLOPs of one iteration (forward and backward) over ``batch`` sequences.

        * full recomputation: ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))`` (Narayanan et al.
          2021, eq. 3: each layer's forward pass runs twice, the logit layer's once);
        * none: ``72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))`` (the same derivation with three
          passes per layer instead of four);
        * selective (Korthikanti et al. 2022): none, plus the recomputed attention-score
          products ``QKᵀ`` and ``softmax·V``: ``4·B·s²·h`` per layer.
        """
        b, s, n, h, v = batch, self.seq_len, self.layers, self.hidden, self.vocab
        if recompute == "full":
            return 96.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
        base = 72.0 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
        if recompute == "selective":
            return base + 4.0 * b * s * s * h * n
        return base


@dataclass(frozen=True)
class ModelSpec:
    """What the planner knows of the model: its parameter count, and maybe its shape.

    ``shape_assumed`` says the shape was derived from the parameter count alone
    (:func:`assumed_shape`), so activation memory is a rough estimate.
    """

    params: int
    shape: ModelShape
    shape_assumed: bool = False

    def flops(self, batch: int, recompute: Recompute) -> float:
        """FLOPs of one iteration: from the shape, or ``6·P`` (``8·P`` with full
        recomputation) per token when only the parameter count is known."""
        if self.shape_assumed:
            per_token = 8.0 if recompute == "full" else 6.0
            return per_token * self.params * batch * self.shape.seq_len
        return self.shape.flops(batch, recompute)

    def model_flops(self, batch: int) -> float:
        """FLOPs of one iteration without recomputation (what MFU counts)."""
        return self.flops(batch, "none")


def assumed_shape(params: int, seq_len: int, vocab: int = 50257) -> ModelShape:
    """A plausible shape for a ``params``-parameter model: ``h ≈ 128·l`` (GPT-3's aspect
    ratio), ``h`` a multiple of 1024 (heads of size 128, so tp up to 8 divides them), the
    layers a multiple of 8 (from 8 up), ``P ≈ 12·l·h²``."""
    hidden = max(1024, round((128 * params / 12) ** (1 / 3) / 1024) * 1024)
    layers = max(1, round(params / (12 * hidden * hidden)))
    if layers >= 8:
        layers = round(layers / 8) * 8
    return ModelShape(layers, hidden, hidden // 128, vocab, seq_len)


def check_shape(shape: ModelShape) -> ModelShape:
    """``shape`` if its dimensions are sane.

    Raises:
        BadInputError: A dimension is out of range, or the heads do not divide the hidden size.
    """
    for name in ("layers", "hidden", "heads", "vocab", "seq_len"):
        value = getattr(shape, name)
        try:
            check_int(value, minimum=1, maximum=MAX_DIMENSION)
        except ValueError as exc:
            raise BadInputError(f"model {name.replace('_', '-')}: {exc}") from None
    if shape.hidden % shape.heads:
        raise BadInputError(
            f"hidden size {shape.hidden} is not a multiple of the {shape.heads} attention heads"
        )
    return shape


def read_model_config(path: Path) -> dict[str, int]:
    """The shape fields of a Hugging Face style ``config.json``.

    Reads ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size`` and
    ``max_position_embeddings`` (as ``layers``, ``hidden``, ``heads``, ``vocab``, ``seq_len``);
    other keys are ignored. Nothing in the file is executed or imported.

    Raises:
        BadInputError: The file is missing, too large, not a JSON object, lacks a key, or a
            value is not a whole number in range.
    """
    hint = "give a model config.json with " + ", ".join(HF_KEYS)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise BadInputError(f"cannot read model config {path}: {exc.strerror}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise BadInputError(
            f"model config {path} is larger than {MAX_CONFIG_BYTES} bytes", hint=hint
        )
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInputError(f"model config {path} is not valid JSON: {exc}", hint=hint) from None
    if not isinstance(data, dict):
        raise BadInputError(f"model config {path} is not a JSON object", hint=hint)
    values: dict[str, int] = {}
    for key, field in HF_KEYS.items():
        if key not in data:
            if field == "seq_len":
                continue  # --seq-len may give it
            raise BadInputError(f"model config {path} has no {key!r}", hint=hint)
        try:
            values[field] = check_int(data[key], minimum=1, maximum=MAX_DIMENSION)
        except ValueError as exc:
            raise BadInputError(f"model config {path}: {key} {exc}", hint=hint) from None
    return values


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number")


def tokens_per_iteration(batch: int, seq_len: int) -> int:
    """Tokens in one iteration over ``batch`` sequences."""
    return batch * seq_len


def iterations_for(tokens: int, batch: int, seq_len: int) -> int:
    """Iterations needed to train on ``tokens`` tokens (the last one may be partial)."""
    return math.ceil(tokens / tokens_per_iteration(batch, seq_len))


__all__ = [
    "RECOMPUTES",
    "ModelShape",
    "ModelSpec",
    "Recompute",
    "assumed_shape",
    "check_shape",
    "iterations_for",
    "read_model_config",
]
