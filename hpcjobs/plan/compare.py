"""One table over several plans: the best layout of each partition (or GPU) and node count.

Each row is a plan's first layout that fits, failure-free and with the interruptions expected at
its size (:mod:`hpcjobs.plan.faults`). Among the rows that fit, the fastest (fewest days with
interruptions) and the cheapest (lowest cost with them, where every fitting row has a price in
one currency) are marked.
The scaling efficiency of a row is its speed per GPU against the same partition's row with the
fewest nodes: ``(days_0 x GPUs_0) / (days x GPUs)``. At 100 % more nodes shorten the run in
proportion; below it each added GPU-hour buys less, and where it drops is where adding nodes
stops paying.
"""

from __future__ import annotations

from typing import Any


def compare_rows(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the comparison, in the order of ``plans`` (the JSON of ``plan``, one each)."""
    rows = [_row(plan) for plan in plans]
    base: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["days"] is None:
            continue
        first = base.setdefault(row["target"], row)
        if row["gpus"] < first["gpus"]:
            base[row["target"]] = row
    for row in rows:
        smallest = base.get(row["target"])
        if row["days"] is None or smallest is None:
            continue
        row["scaling_efficiency"] = (smallest["days"] * smallest["gpus"]) / (
            row["days"] * row["gpus"]
        )
    fitting = [row for row in rows if row["with_interruptions"]["days"] is not None]
    _mark(fitting, "days", "fastest")
    currencies = {row["currency"] for row in fitting}
    if len(currencies) == 1 and None not in currencies:
        _mark(fitting, "cost", "cheapest")
    return rows


def _mark(rows: list[dict[str, Any]], key: str, mark: str) -> None:
    """Mark the rows with the least ``key`` with interruptions (all of them on a tie)."""
    if not rows:
        return
    least = min(row["with_interruptions"][key] for row in rows)
    for row in rows:
        if row["with_interruptions"][key] <= least * (1 + 1e-9):
            row["marks"].append(mark)


def _row(plan: dict[str, Any]) -> dict[str, Any]:
    inputs = plan["inputs"]
    row: dict[str, Any] = {
        "target": inputs["partition"],
        "gpu": plan["hardware"]["gpu"],
        "nodes": inputs["nodes"],
        "gpus": inputs["gpus"],
        "layout": None,
        "days": None,
        "gpu_hours": None,
        "cost": None,
        "currency": None,
        "mfu": None,
        "scaling_efficiency": None,
        "notes": list(plan["notes"]),
        "marks": [],
        "with_interruptions": {"days": None, "cost": None, "expected": None},
    }
    fits = [item for item in plan["layouts"] if item["fits"]]
    if not fits:
        return row
    best = fits[0]
    training = best["training"]
    row.update(
        layout=f"tp={best['tp']} pp={best['pp']} dp={best['dp']} mb={best['micro_batch']} "
        f"z{best['zero']} {best['recompute']}" + (" sp" if best["sequence_parallel"] else ""),
        days=training["days"],
        gpu_hours=training["gpu_hours"],
        mfu=best["mfu"],
    )
    if best["cost"] is not None:
        row.update(cost=best["cost"]["total"], currency=best["cost"]["currency"])
    faults = best["interruptions"]
    row["with_interruptions"] = {
        "days": faults["days"],
        "cost": faults["cost"],
        "expected": faults["expected"],
    }
    return row


__all__ = ["compare_rows"]
