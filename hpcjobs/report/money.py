"""What a chain's allocation cost, and what each of its badput parts cost, at the site's prices.

A run is priced at its partition's rate (``partitions[].price`` in the site config): its
allocated GPU-hours x the price per GPU-hour, or, for a run without GPUs, its node-hours x the
price per node-hour. Each part of the goodput breakdown costs its GPU-time the same way, so the
parts' costs add up to the allocated cost. A chain with a run on a partition without a price, or
with prices in more than one currency, gets no cost (and a note says why): costs are never
guessed or converted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hpcjobs.report.goodput import BADPUT_PARTS, PARTS

if TYPE_CHECKING:
    from hpcjobs.config.models import SiteConfig
    from hpcjobs.report.build import RunReport


@dataclass(frozen=True)
class Rate:
    """One partition's price: per GPU-hour (None: no GPUs or no price that way) and per
    node-hour, in ``currency``."""

    currency: str
    gpu_hour: float | None
    node_hour: float | None


def site_rates(site: SiteConfig) -> dict[str, Rate]:
    """Partition name -> its rate, for the partitions that have a price."""
    return {
        part.name: Rate(part.price.currency, part.gpu_hour_price, part.price.node_hour)
        for part in site.partitions
        if part.price is not None
    }


def format_money(amount: float) -> str:
    """Cents, and four decimals below one unit (a short test run costs fractions of a cent)."""
    return f"{amount:,.2f}" if abs(amount) >= 1 or amount == 0 else f"{amount:.4f}"


def money_digits(*amounts: float | None) -> int:
    """Decimals :func:`format_money` would give the largest of ``amounts``."""
    known = [abs(a) for a in amounts if a is not None]
    return 2 if not known or max(known) >= 1 else 4


def chain_cost(
    runs: Sequence[RunReport], rates: Mapping[str, Rate], has_progress: bool
) -> tuple[dict[str, Any] | None, str | None]:
    """``(cost, note)``: the chain's cost as JSON-ready data, or None and why not."""
    if not runs:
        return None, None
    currencies: set[str] = set()
    allocated = 0.0
    parts = dict.fromkeys(PARTS, 0.0)
    for run in runs:
        rate = rates.get(run.partition)
        per_second = _per_second(run, rate)
        if rate is None:
            where = f"partition {run.partition!r}" if run.partition else "an unknown partition"
            return None, f"no cost: run {run.job_id} ran on {where}, which has no price"
        if per_second is None:
            unit = "GPU-hour" if rate.gpu_hour is not None else "node-hour"
            what = "GPUs" if rate.gpu_hour is not None else "nodes"
            return None, (
                f"no cost: partition {run.partition!r} is priced per {unit}, and accounting "
                f"gives run {run.job_id} no {what}"
            )
        currencies.add(rate.currency)
        allocated += run.elapsed_s * per_second
        if run.parts is not None:
            for part, seconds in run.parts.seconds.items():
                parts[part] += seconds * per_second
    if len(currencies) > 1:
        return None, f"no cost: the runs were priced in {', '.join(sorted(currencies))}"
    (currency,) = currencies
    return {
        "currency": currency,
        "allocated": allocated,
        "parts": parts if has_progress else None,
        "goodput": parts["goodput"] if has_progress else None,
        "badput": sum(parts[p] for p in BADPUT_PARTS) if has_progress else None,
    }, None


def _per_second(run: RunReport, rate: Rate | None) -> float | None:
    """What one second of the run costs: its GPUs (the mean over its sizes) at the GPU-hour
    price, or, without GPUs, its nodes at the node-hour price."""
    if rate is None:
        return None
    if run.gpus > 0:
        return None if rate.gpu_hour is None else run.weight * rate.gpu_hour / 3600
    return None if rate.node_hour is None else run.nodes * rate.node_hour / 3600


__all__ = ["Rate", "chain_cost", "format_money", "money_digits", "site_rates"]
