"""The layouts to consider, which fit, and which is fastest.

Tensor parallelism ``tp`` divides the GPUs per node and stays within the NVLink domain (and
divides the attention heads); pipeline parallelism ``pp`` divides the layers; the data-parallel
degree is what is left; the micro-batch divides the per-replica batch. ZeRO stages 2 and 3 are
not combined with pipeline parallelism (DeepSpeed refuses it), ZeRO is not tried without data
parallelism, and sequence parallelism only with ``tp > 1``. A few thousand layouts at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hpcjobs.errors import BadInputError
from hpcjobs.plan.memory import Layout, Memory, Precision, gpu_memory
from hpcjobs.plan.model import RECOMPUTES, ModelSpec, Recompute
from hpcjobs.plan.timing import Hardware, RunCost, StepTime, run_cost, step_time

#: Micro-batch sizes tried when none is given.
MICRO_BATCHES = (1, 2, 4, 8)

#: How close two step times must be (relative) to count as a tie.
TIE = 1e-6


@dataclass(frozen=True)
class Fixed:
    """Layout choices the user fixed (None: free)."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    zero: int | None = None
    recompute: Recompute | None = None
    sp: bool | None = None

    @property
    def any(self) -> bool:
        return any(getattr(self, name) is not None for name in self.__dataclass_fields__)


@dataclass(frozen=True)
class Request:
    """What to plan: the model, the hardware, the GPUs and the training run."""

    model: ModelSpec
    hardware: Hardware
    gpus: int
    global_batch: int
    tokens: int
    precision: Precision
    efficiency: float
    fixed: Fixed = Fixed()
    #: An end-to-end rate per GPU (FLOP/s) that replaces the step model (``--achieved-tflops``).
    achieved_flops: float | None = None
    #: GPUs of the spare nodes held beside the run (``--spare-nodes`` x GPUs per node).
    spare_gpus: int = 0


@dataclass(frozen=True)
class Candidate:
    """One evaluated layout."""

    layout: Layout
    micro_batches: int
    memory: Memory
    step: StepTime
    cost: RunCost
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return not self.notes

    def sort_key(self, best_step: float = 0.0) -> tuple[float, int, int, bool, int]:
        step = self.step.total_s
        bucket = round(step / best_step / TIE) if best_step else 0
        return (
            float(bucket) if best_step else step,
            self.layout.zero,
            RECOMPUTES.index(self.layout.recompute),
            not self.layout.sp,
            self.memory.total,
        )


@dataclass
class Result:
    """The evaluated layouts, best first: those that fit, then the others."""

    candidates: list[Candidate] = field(default_factory=list)
    evaluated: int = 0

    @property
    def fitting(self) -> list[Candidate]:
        return [c for c in self.candidates if c.fits]


def _divisors(n: int, limit: int) -> list[int]:
    """The divisors of ``n`` up to ``limit`` (a layer count or an NVLink domain: small)."""
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _pick(value: int | None, options: list[int]) -> list[int]:
    return [value] if value is not None else options


def evaluate(request: Request, layout: Layout) -> Candidate:
    """Memory, step time and cost of ``layout``; ``notes`` say why it does not fit or run."""
    model, hw = request.model, request.hardware
    micro_batches = request.global_batch // (layout.dp * layout.micro_batch)
    memory = gpu_memory(model, layout, request.precision, micro_batches)
    step = step_time(
        model,
        layout,
        hw,
        global_batch=request.global_batch,
        precision=request.precision,
        efficiency=request.efficiency,
        achieved_flops=request.achieved_flops,
    )
    iterations = -(-request.tokens // (request.global_batch * model.shape.seq_len))
    cost = run_cost(step.total_s, iterations, layout.gpus, hw.max_time_s, request.spare_gpus)
    notes = []
    if memory.total > hw.memory_bytes:
        notes.append(
            f"needs {memory.total / 1e9:.1f} GB per GPU, more than the "
            f"{hw.memory_bytes / 1e9:.1f} GB the {hw.model} has"
        )
    domain = min(hw.nvlink_domain, hw.gpus_per_node)
    if layout.tp > domain:
        notes.append(f"tp={layout.tp} spans more GPUs than one NVLink domain ({domain})")
    if model.shape.heads % layout.tp:
        notes.append(f"tp={layout.tp} does not divide the {model.shape.heads} attention heads")
    if layout.pp > 1 and layout.zero >= 2:
        notes.append("ZeRO stage 2/3 with pipeline parallelism is not supported by DeepSpeed")
    return Candidate(layout, micro_batches, memory, step, cost, tuple(notes))


def check_layout(request: Request, layout: Layout) -> None:
    """Refuse a layout that cannot run at all (wrong GPU count, batch that does not divide).

    Raises:
        BadInputError: It cannot.
    """
    if layout.gpus != request.gpus:
        raise BadInputError(
            f"layout tp={layout.tp} x pp={layout.pp} x dp={layout.dp} = {layout.gpus} GPUs, "
            f"but {request.gpus} GPUs are planned",
            hint="make tp*pp*dp equal the GPU count, or leave dp out",
        )
    if layout.pp > request.model.shape.layers:
        raise BadInputError(
            f"pp={layout.pp} is more than the model's {request.model.shape.layers} layers"
        )
    if request.global_batch % (layout.dp * layout.micro_batch):
        raise BadInputError(
            f"global batch {request.global_batch} is not a multiple of dp x micro-batch "
            f"({layout.dp} x {layout.micro_batch})",
            hint="change --global-batch, --micro-batch or the layout",
        )
    if layout.sp and layout.tp == 1:
        raise BadInputError("sequence parallelism needs tp > 1")


def layouts(request: Request) -> list[Layout]:
    """Every layout the search considers, within the user's fixed choices."""
    fixed, hw, shape, n = request.fixed, request.hardware, request.model.shape, request.gpus
    domain = max(1, min(hw.nvlink_domain, hw.gpus_per_node or 1))
    result = []
    tps = [t for t in _divisors(n, domain) if shape.heads % t == 0]
    for tp in _pick(fixed.tp, tps):
        if n % tp:
            continue
        pps = [p for p in _divisors(n // tp, shape.layers) if shape.layers % p == 0]
        for pp in _pick(fixed.pp, pps):
            if (n // tp) % pp:
                continue
            dp = n // (tp * pp)
            if fixed.dp is not None and fixed.dp != dp:
                continue
            per_replica = request.global_batch // dp if request.global_batch % dp == 0 else 0
            mbs = [b for b in MICRO_BATCHES if per_replica and per_replica % b == 0]
            zeros = [0] if dp == 1 else ([0, 1] if pp > 1 else [0, 1, 2, 3])
            sps = [True, False] if tp > 1 else [False]
            for mb in _pick(fixed.micro_batch, mbs):
                if not per_replica or per_replica % mb:
                    continue  # the global batch does not split into dp x mb
                for zero in _pick(fixed.zero, zeros):
                    for recompute in [fixed.recompute] if fixed.recompute else RECOMPUTES:
                        for sp in [fixed.sp] if fixed.sp is not None else sps:
                            result.append(Layout(tp, pp, dp, mb, zero, recompute, sp))
    return result


def search(request: Request) -> Result:
    """Evaluate every layout; best first (fitting ones by step time, then the rest).

    Raises:
        BadInputError: No layout is possible at all (for example a global batch that no
            data-parallel degree divides), or a fully fixed layout cannot run.
    """
    fixed = request.fixed
    if fixed.tp is not None and fixed.pp is not None:
        tp, pp = fixed.tp, fixed.pp
        if request.gpus % (tp * pp):
            raise BadInputError(
                f"tp={tp} x pp={pp} does not divide the {request.gpus} GPUs planned",
                hint="pick tp and pp whose product divides the GPU count",
            )
        dp = request.gpus // (tp * pp)
        check_layout(
            request,
            Layout(tp, pp, fixed.dp or dp, fixed.micro_batch or 1, 0, "none", bool(fixed.sp)),
        )
    options = layouts(request)
    if not options:
        raise BadInputError(
            f"no layout of {request.gpus} GPUs matches: the global batch "
            f"{request.global_batch} must be a multiple of dp x micro-batch, tp must divide "
            f"the GPUs per node and the {request.model.shape.heads} heads, pp the "
            f"{request.model.shape.layers} layers",
            hint="change --global-batch, --micro-batch, the GPU count or --layout",
        )
    candidates = [evaluate(request, layout) for layout in options]
    fitting = [c for c in candidates if c.fits]
    best = min((c.step.total_s for c in fitting), default=0.0)
    fitting.sort(key=lambda c: c.sort_key(best))
    others = sorted(
        (c for c in candidates if not c.fits), key=lambda c: (c.memory.total, c.step.total_s)
    )
    return Result(fitting + others, len(candidates))


def distinct(candidates: list[Candidate], count: int) -> list[Candidate]:
    """The first ``count`` candidates with different (tp, pp, dp, micro-batch)."""
    seen: set[tuple[int, int, int, int]] = set()
    chosen = []
    for cand in candidates:
        key = (cand.layout.tp, cand.layout.pp, cand.layout.dp, cand.layout.micro_batch)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(cand)
        if len(chosen) == count:
            break
    return chosen


__all__ = [
    "MICRO_BATCHES",
    "Candidate",
    "Fixed",
    "Request",
    "Result",
    "check_layout",
    "distinct",
    "evaluate",
    "layouts",
    "search",
]
