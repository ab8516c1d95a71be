"""What interruptions cost a planned run, and what spare nodes or shorter checkpoints would save.

A run of ``G`` GPUs is interrupted on average once per ``MTTF`` hours. Unless told otherwise
(``--mttf HOURS``), the plan takes Meta's measurement of its research clusters, one interruption
per 7.9 hours at 1,024 GPUs (:data:`SOURCE`), scaled in inverse proportion to the GPUs: each GPU
fails at the same rate, so twice the GPUs fail twice as often. (The same study measured 1.8 hours
at 16,384 GPUs, 3.7 times better than that scaling: at large sizes the estimate errs on the
pessimistic side.)

Each interruption costs wall time: the work since the last checkpoint, on average half the
checkpoint interval, and getting going again: restarting the program from the checkpoint
(``restart``), plus, without spare nodes, waiting in the queue for the next allocation
(``requeue``). With spare nodes the program runs again inside the job within seconds
(docs/requeue.md, "Spare nodes"), so the queue wait is gone (at best: the spares cover the faults
of nodes, not every cause). The redone work and the restart are paid for (the allocation is
held); the queue wait costs days, not money (no GPU is held while the job waits). The run's
wall time ``T`` then solves ``T = T0 + (T / MTTF) x c``:
``T = T0 / (1 - c / MTTF)``, with ``T0`` the failure-free time and ``c`` the cost of one
interruption; when ``c >= MTTF`` the run never finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpcjobs.contract import causes

#: The reference measurement, and where it comes from.
REFERENCE_MTTF_H = 7.9
REFERENCE_GPUS = 1024
SOURCE = (
    "Kokolis et al., 'Revisiting Reliability in Large-Scale Machine Learning Research "
    "Clusters' (Meta, arXiv:2410.21680): mean time to failure 7.9 h at 1,024 GPUs, scaled in "
    "inverse proportion to the GPUs"
)
#: Defaults of what one interruption costs; each is a flag of ``plan``.
CHECKPOINT_MINUTES = 30.0
RESTART_MINUTES = 5.0
REQUEUE_MINUTES = 10.0


@dataclass(frozen=True)
class FaultModel:
    """How often the run is interrupted and what each interruption costs, in hours."""

    mttf_h: float
    checkpoint_h: float
    restart_h: float
    requeue_h: float
    source: str

    def per_interruption_h(self, spares: bool) -> float:
        """Wall hours one interruption costs: half a checkpoint interval of work, the restart,
        and the queue unless spare nodes take over inside the job."""
        return self.checkpoint_h / 2 + self.restart_h + (0.0 if spares else self.requeue_h)


def fault_model(
    gpus: int,
    *,
    mttf_h: float | None = None,
    checkpoint_minutes: float = CHECKPOINT_MINUTES,
    restart_minutes: float = RESTART_MINUTES,
    requeue_minutes: float = REQUEUE_MINUTES,
) -> FaultModel:
    """The model for a run of ``gpus`` GPUs: ``mttf_h`` if given, else the reference scaled."""
    if mttf_h is None:
        mttf = REFERENCE_MTTF_H * REFERENCE_GPUS / gpus
        source = SOURCE
    else:
        mttf, source = mttf_h, "given (--mttf)"
    return FaultModel(
        mttf, checkpoint_minutes / 60, restart_minutes / 60, requeue_minutes / 60, source
    )


#: Causes of a stop that count as an interruption in measured history: a time limit is
#: planned for (the plan's chunks) and a cancel is the user's choice.
NOT_INTERRUPTIONS = (causes.TIMEOUT, causes.CANCELLED)


def measured_fault_model(
    chains: list[dict[str, Any]], gpus: int, *, since: str
) -> tuple[FaultModel | None, str]:
    """A model from past chains (``report --json``'s chain objects), and what was measured.

    The rate is the chains' interruptions over their allocated GPU-hours, so MTTF at ``gpus``
    GPUs is ``GPU-hours / (interruptions x gpus)``; each interruption costs, on average, the
    wall time between the stop and the next run's start (``requeue``), the next run's start-up
    until its first step (``restart``) and the steps redone (half of ``checkpoint``). None when
    the chains had no interruption: nothing to measure a rate from.
    """
    gpu_hours = sum(float(chain.get("allocated_gpu_hours") or 0.0) for chain in chains)
    stops = [
        stop
        for chain in chains
        for stop in chain.get("interruptions") or []
        if stop.get("cause") not in NOT_INTERRUPTIONS
    ]
    count = len(stops)
    what = (
        f"{count} interruption(s) in {gpu_hours:,.1f} GPU-hours of {len(chains)} chain(s) "
        f"since {since}"
    )
    if not count or gpu_hours <= 0:
        return None, what
    waited = sum(float(stop.get("resume_latency_s") or 0.0) for stop in stops)
    redone = startup = 0.0
    for chain in chains:
        runs = chain.get("runs") or []
        for stop in chain.get("interruptions") or []:
            if stop.get("cause") in NOT_INTERRUPTIONS:
                continue
            run = _resumed_run(runs, stop)  # the run after it: its start-up and steps redone
            if run is not None:
                parts = run.get("parts_s") or {}
                redone += float(parts.get("redone") or 0.0)
                startup += float(parts.get("startup") or 0.0)
    mttf = gpu_hours / (count * gpus)
    model = FaultModel(
        mttf_h=mttf,
        checkpoint_h=2 * redone / count / 3600,
        restart_h=startup / count / 3600,
        requeue_h=waited / count / 3600,
        source=f"measured: {what}",
    )
    return model, what


def _resumed_run(runs: list[dict[str, Any]], stop: dict[str, Any]) -> dict[str, Any] | None:
    """The run that began when ``stop`` resumed: of its job, the one starting nearest then."""
    at = stop.get("resumed_at")
    mine = [r for r in runs if r.get("job_id") == stop.get("resumed_job_id")]
    if at is None or not mine:
        return None
    return min(mine, key=lambda r: abs(float(r.get("start") or 0.0) - float(at)))


def with_interruptions(total_s: float, model: FaultModel, *, spares: bool) -> dict[str, Any]:
    """The run's expected interruptions and its wall time with them (None: it never ends)."""
    base_h = total_s / 3600
    cost_h = model.per_interruption_h(spares)
    if cost_h >= model.mttf_h:
        return {"expected": None, "per_interruption_h": cost_h, "total_s": None, "days": None}
    hours = base_h / (1 - cost_h / model.mttf_h)
    return {
        "expected": hours / model.mttf_h,
        "per_interruption_h": cost_h,
        "total_s": hours * 3600,
        "days": hours / 24,
    }


def interruption_data(
    total_s: float,
    gpus: int,
    model: FaultModel,
    *,
    spare_nodes: int,
    gpus_per_node: int,
    gpu_hour_price: float | None,
) -> dict[str, Any]:
    """The plan's interruption figures (GPU-hours and cost count the spares' GPUs too): as
    planned, and what one spare node (if none is planned) or a checkpoint interval of a third
    would change."""
    spares = spare_nodes > 0

    def priced(figures: dict[str, Any], held_gpus: int, waiting_h: float) -> dict[str, Any]:
        """GPU-hours and cost: the allocation's time, without the queue waits (no GPU is
        held, nothing is billed while a requeued job waits)."""
        total = figures["total_s"]
        if total is None:
            figures.update(gpu_hours=None, cost=None)
            return figures
        held_s = total - figures["expected"] * waiting_h * 3600
        hours = held_s * held_gpus / 3600
        figures["gpu_hours"] = hours
        figures["cost"] = None if gpu_hour_price is None else hours * gpu_hour_price
        return figures

    held = gpus + spare_nodes * gpus_per_node
    shorter = FaultModel(
        model.mttf_h, model.checkpoint_h / 3, model.restart_h, model.requeue_h, model.source
    )
    waiting = 0.0 if spares else model.requeue_h
    what_if = {
        "checkpoint_interval_third": priced(
            with_interruptions(total_s, shorter, spares=spares), held, waiting
        )
    }
    if not spares:  # at best: every interruption recovered inside the job
        what_if["one_spare_node"] = priced(
            with_interruptions(total_s, model, spares=True), gpus + gpus_per_node, 0.0
        )
    return {
        "mttf_h": model.mttf_h,
        "source": model.source,
        "checkpoint_interval_h": model.checkpoint_h,
        "restart_h": model.restart_h,
        "requeue_h": 0.0 if spares else model.requeue_h,
        **priced(with_interruptions(total_s, model, spares=spares), held, waiting),
        "what_if": what_if,
    }


__all__ = [
    "CHECKPOINT_MINUTES",
    "NOT_INTERRUPTIONS",
    "REFERENCE_GPUS",
    "REFERENCE_MTTF_H",
    "REQUEUE_MINUTES",
    "RESTART_MINUTES",
    "SOURCE",
    "FaultModel",
    "fault_model",
    "interruption_data",
    "measured_fault_model",
    "with_interruptions",
]
