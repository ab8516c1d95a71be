"""The terminal form of a chain's report (a string; the CLI prints it)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from hpcjobs.report.build import ChainReport
from hpcjobs.report.goodput import BADPUT_PARTS, LABELS
from hpcjobs.report.money import format_money
from hpcjobs.texttable import table

if TYPE_CHECKING:
    from hpcjobs.report.gpu import GpuSummary


def report_text(report: ChainReport) -> str:
    """Several lines: totals, the goodput breakdown, time not running, steps, runs, notes."""
    runs = "1 run" if len(report.runs) == 1 else f"{len(report.runs)} runs"
    lines = [
        f"Chain {report.root} ({report.name or '-'}): {runs}, jobs {', '.join(report.job_ids)}"
        + (f"; result {report.result}" if report.result else "")
    ]
    gpus = sorted({run.gpus for run in report.runs})
    gpu_text = "/".join(str(g) for g in gpus) if gpus else "0"
    lines.append(
        f"Allocated: {report.allocated_gpu_hours:.3f} GPU-hours ({gpu_text} GPUs), "
        f"{report.allocated_cpu_hours:.3f} CPU-hours, {_dur(report.allocated_s)} "
        f"{report.unit}-time"
    )
    cost, cost_note = report.pricing()
    if cost is not None:
        lines.append(_cost_line(cost))
    if report.has_progress:
        lines.append(_breakdown_table(report, cost))
    gaps = ", ".join(_dur(g) for g in report.gaps_s) or "none"
    lines.append(
        f"Not running (wall clock): queue wait {_dur(report.queue_wait_s)}, gaps between runs "
        f"{gaps}"
    )
    steps = _steps_line(report)
    if steps is not None:
        lines.append(steps)
    lines.append(_runs_table(report))
    if report.gpu is not None:
        lines.append(_gpu_table(report.gpu))
    for note in [*report.notes, *([cost_note] if cost_note else [])]:
        lines.append(f"Note: {note}")
    return "\n".join(lines)


def _cost_line(cost: dict[str, Any]) -> str:
    """What the allocation cost, and how much of it was badput."""
    text = f"Cost: {format_money(cost['allocated'])} {cost['currency']} allocated"
    if cost["badput"] is not None:
        text += (
            f", of which badput {format_money(cost['badput'])} {cost['currency']} "
            f"(at the partitions' prices)"
        )
    return text


def _breakdown_table(report: ChainReport, cost: dict[str, Any] | None) -> str:
    """The table of goodput and each badput part: share, time and (with prices) cost."""
    parts = cost["parts"] if cost is not None else None
    rows = [["goodput", _pct(report.share("goodput")), _dur(report.part_s("goodput"))]]
    rows += [
        [f"badput: {LABELS[part]}", _pct(report.share(part)), _dur(report.part_s(part))]
        for part in BADPUT_PARTS
    ]
    headers = ["PART", "SHARE", f"{report.unit.upper()}-TIME"]
    if parts is not None and cost is not None:
        for row, part in zip(rows, ("goodput", *BADPUT_PARTS), strict=True):
            row.append(format_money(parts[part]))
        headers.append(f"COST {cost['currency']}")
    return table(headers, rows)


def _runs_table(report: ChainReport) -> str:
    """The table of runs: job, start, length, GPUs, how it ended, goodput, CPU and memory."""
    headers = ["RUN", "JOB", "START", "ELAPSED", "GPUS", "STATE", "CAUSE", "GOODPUT"]
    headers += ["CPU EFF", "PEAK MEM"]
    rows = []
    for number, run in enumerate(report.runs):
        share = None
        if run.parts is not None and run.elapsed_s > 0:
            share = run.parts.seconds["goodput"] / run.elapsed_s
        memory = "-"
        if run.peak_memory is not None:
            memory = f"{run.peak_memory[0] / 2**30:.2f} GiB ({run.peak_memory[1] or '?'})"
        rows.append(
            [
                str(number),
                run.job_id,
                datetime.fromtimestamp(run.start).strftime("%Y-%m-%d %H:%M:%S"),
                _dur(run.elapsed_s) + (" (running)" if run.running else ""),
                f"{run.gpus}" + ("*" if run.gpus_source == "request" else ""),
                run.state,
                run.cause or "-",
                _pct(share),
                _pct(run.cpu_efficiency),
                memory,
            ]
        )
    return table(headers, rows)


def _gpu_table(gpu: GpuSummary) -> str:
    """The table of GPUs from telemetry: mean utilisation, memory, and which sat idle."""
    gpu_rows = [
        [
            g.host,
            str(g.index),
            _pct(None if g.mean_util is None else g.mean_util / 100),
            "-" if g.max_mem_used_mib is None else f"{g.max_mem_used_mib:.0f} MiB",
            "-" if g.mem_total_mib is None else f"{g.mem_total_mib:.0f} MiB",
            "IDLE" if g.idle else "",
        ]
        for g in gpu.gpus
    ]
    return table(["HOST", "GPU", "MEAN UTIL", "MAX MEM", "TOTAL MEM", ""], gpu_rows)


def _steps_line(report: ChainReport) -> str | None:
    """Steps redone and step times (with progress reports), and the event log's steps lost."""
    lost = steps_lost_text(report)
    if not report.has_progress:
        return None if lost is None else f"Steps lost (event log): {lost}"
    stats = report.step_stats()
    text = f"Steps: redone {report.redone_steps}"
    if lost is not None:
        text += f" (event log: {lost})"
    text += f"; step time median {_sec(stats['median_s'])}, p90 {_sec(stats['p90_s'])}"
    if stats["slowest_rank"] is not None and stats["ranks"] > 1:
        text += (
            f"; slowest rank {stats['slowest_rank']} on {stats['slowest_node'] or '?'} "
            f"({_sec(stats['slowest_rank_median_s'])})"
        )
    return text


def steps_lost_text(report: ChainReport) -> str | None:
    """The event log's steps lost: ``12``, ``12, 2 stops unknown`` (the stops whose loss is
    unknown are not in the sum), ``unknown at 2 stops``; None without stops."""
    lost, unknown = report.steps_lost_event_log, report.stops_with_unknown_loss
    stops = "1 stop" if unknown == 1 else f"{unknown} stops"
    if lost is None:
        return f"unknown at {stops}" if unknown else None
    return f"{lost}, {stops} unknown" if unknown else str(lost)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _sec(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _dur(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.2f} h"
