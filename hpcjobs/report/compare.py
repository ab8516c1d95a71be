"""``hpcjobs report --compare A B``: two chains side by side, and what differed in their jobs.

The figures come from the two :class:`~hpcjobs.report.build.ChainReport`; the differences from
the two submission records (:mod:`hpcjobs.jobs.records`) and the scripts kept next to them: the
command, every NCCL/UCX/Gloo variable with its origin (the comment the renderer writes after each
value), binding on or off, nodes, GPUs per node, ranks per node, the launcher and the partition.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.records import find_record, read_record
from hpcjobs.report.build import ChainReport
from hpcjobs.report.goodput import BADPUT_PARTS, LABELS
from hpcjobs.report.money import money_digits
from hpcjobs.texttable import table

_TUNING = re.compile(r"^export ((?:NCCL|UCX|GLOO)_\w+)=(.*?)(?:\s+#\s*(.*))?$")
_SPEC_KEYS = (
    "command", "nodes", "gpus_per_node", "ntasks_per_node", "launcher", "bind", "partition",
)  # fmt: skip


def compare_reports(
    a: ChainReport, b: ChainReport, differences: list[dict[str, str]]
) -> dict[str, Any]:
    """JSON-ready rows: each figure for A and B and the change from A to B."""
    sa, sb = a.step_stats(), b.step_stats()
    rows = [
        _row("step time median (s)", sa["median_s"], sb["median_s"], 3),
        _row("step time p90 (s)", sa["p90_s"], sb["p90_s"], 3),
        _row("goodput (%)", _pct(a.goodput), _pct(b.goodput), 1, better="higher"),
        _row("allocated GPU-hours", a.allocated_gpu_hours, b.allocated_gpu_hours, 3),
        _row("runs", len(a.runs), len(b.runs), 0),
    ]
    ca, cb = a.cost(), b.cost()
    if ca is not None and cb is not None and ca["currency"] == cb["currency"]:
        currency = ca["currency"]
        digits = money_digits(ca["allocated"], cb["allocated"])
        rows.append(_row(f"cost allocated ({currency})", ca["allocated"], cb["allocated"], digits))
        digits = money_digits(ca["badput"], cb["badput"])
        rows.append(_row(f"cost of badput ({currency})", ca["badput"], cb["badput"], digits))
    rows += [
        _row(f"badput: {LABELS[p]} (%)", _pct(a.share(p)), _pct(b.share(p)), 1)
        for p in BADPUT_PARTS
    ]
    rows.append(_row("not running (s)", a.not_running_s, b.not_running_s, 1))
    return {"a": a.root, "b": b.root, "rows": rows, "differences": differences}


def compare_text(data: dict[str, Any]) -> str:
    a, b = str(data["a"]), str(data["b"])
    body = [
        [r["what"], str(r["a"]), str(r["b"]), str(r["change"]), r.get("direction") or "-"]
        for r in data["rows"]
    ]
    lines = [
        f"Before/after: chain {a} vs chain {b}",
        table(["FIGURE", a, b, "CHANGE", "DIRECTION"], body),
    ]
    if data["differences"]:
        diff = [[d["what"], d["a"], d["b"]] for d in data["differences"]]
        lines += ["What differed in the jobs:", table(["WHAT", a, b], diff)]
    else:
        lines.append("What differed in the jobs: nothing hpcjobs rendered (or no records here)")
    return "\n".join(lines)


def script_differences(a: str, b: str, host: str | None = None) -> list[dict[str, str]]:
    """What differed between the two jobs as rendered, from their local submission records."""
    sides = []
    for root in (a, b):
        path = find_record(root, host=host)
        if path is None:
            return []
        try:
            record = read_record(path)
        except HpcJobsError:
            return []
        script = path.parent / str(record.get("script") or "job.sh")
        sides.append((record.get("spec") or {}, _tuning(script)))
    out = []
    (spec_a, vars_a), (spec_b, vars_b) = sides
    for key in _SPEC_KEYS:
        if spec_a.get(key) != spec_b.get(key):
            out.append({"what": key, "a": _show(spec_a.get(key)), "b": _show(spec_b.get(key))})
    for name in sorted(set(vars_a) | set(vars_b)):
        if vars_a.get(name) != vars_b.get(name):
            out.append({"what": name, "a": vars_a.get(name, "(unset)"),
                        "b": vars_b.get(name, "(unset)")})  # fmt: skip
    return out


def tuning_vars(text: str) -> dict[str, str]:
    """NCCL/UCX/Gloo variables a rendered script exports: name -> "value (origin)"."""
    out = {}
    for line in text.splitlines():
        match = _TUNING.match(line.strip())
        if match:
            value = match.group(2)
            out[match.group(1)] = value + (f" ({match.group(3)})" if match.group(3) else "")
    return out


def _tuning(path: Path) -> dict[str, str]:
    try:
        return tuning_vars(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _row(
    what: str,
    a: float | int | None,
    b: float | int | None,
    digits: int,
    *,
    better: str = "lower",
) -> dict[str, Any]:
    """One figure of A and B, the change, and its direction: ``better``, ``worse`` or ``same``
    (None when a side is unknown; ``better`` says which way is good)."""
    change: str = "-"
    direction = None
    if a is not None and b is not None:
        delta = b - a
        change = f"{delta:+.{digits}f}"
        if a and digits:
            change += f" ({delta / a * 100:+.0f} %)"
        if round(delta, digits) == 0:
            direction = "same"
        else:
            direction = "better" if (delta < 0) == (better == "lower") else "worse"
    return {
        "what": what,
        "a": _fmt(a, digits),
        "b": _fmt(b, digits),
        "change": change,
        "direction": direction,
    }


def _fmt(value: float | int | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> float | None:
    return None if value is None else value * 100


def _show(value: Any) -> str:
    if isinstance(value, list):
        return shlex.join(str(item) for item in value)
    return "(default)" if value is None else str(value)
