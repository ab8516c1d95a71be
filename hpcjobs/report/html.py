"""The report as one self-contained HTML page: inline CSS and SVG, no script, no network.

Every string that comes from a user or a job (job names, ids, causes, notes, script
differences) goes through :func:`html.escape`.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from typing import Any

from hpcjobs.report.build import ChainReport
from hpcjobs.report.goodput import LABELS, PARTS, assign_reports
from hpcjobs.report.money import format_money

#: One colour per part of the breakdown (goodput green, badput warm to grey).
COLOURS = {
    "goodput": "#2e9d4f",
    "startup": "#f2a93b",
    "redone": "#d9534f",
    "checkpoint": "#5b8def",
    "stall": "#9b59b6",
    "warning": "#e67e22",
    "tail": "#8c8c8c",
    "spare": "#b5a58a",
    "shrunk": "#c9b3d9",
}
WAIT_COLOUR = "#d0d7de"
WIDTH = 900
LEFT = 90

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#1f2328;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left}
th{background:#f6f8fa}.big{font-size:28px;font-weight:600}
.note{color:#57606a;font-size:13px}.legend span{display:inline-block;margin-right:14px;
font-size:13px}.sw{display:inline-block;width:12px;height:12px;margin-right:4px;
vertical-align:middle}
svg text{font-size:11px;fill:#1f2328}
.better{color:#1a7f37;font-weight:600}.worse{color:#cf222e;font-weight:600}
"""


def report_page(reports: list[ChainReport], *, comparison: dict[str, Any] | None = None) -> str:
    """The whole page for one or more chains (and a comparison of two, if given)."""
    title = "hpcjobs report: " + ", ".join(r.root for r in reports)
    body = [f"<h1>{escape(title)}</h1>"]
    if comparison is not None:
        body.append(_comparison(comparison))
    for report in reports:
        body.append(chain_section(report))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def chain_section(report: ChainReport) -> str:
    root = escape(report.root)
    parts = [f'<section class="chain" id="chain-{root}">']
    parts.append(f"<h2>Chain {root} ({escape(report.name or '-')})</h2>")
    goodput = "unknown" if report.goodput is None else f"{report.goodput * 100:.1f} %"
    parts.append(
        f'<p><span class="big">goodput {escape(goodput)}</span> of '
        f"{report.allocated_gpu_hours:.3f} GPU-hours allocated "
        f"({report.allocated_cpu_hours:.3f} CPU-hours), {len(report.runs)} run(s)"
        + (f"; result: {escape(report.result)}" if report.result else "")
        + "</p>"
    )
    cost, cost_note = report.pricing()
    if cost is not None:
        currency = escape(cost["currency"])
        text = f"cost: {format_money(cost['allocated'])} {currency} allocated"
        if cost["badput"] is not None:
            text += f", of which badput {format_money(cost['badput'])} {currency}"
        parts.append(f'<p class="cost">{text} (at the partitions\' prices)</p>')
    if report.has_progress:
        parts.append(_breakdown(report))
    parts.append(_timeline(report))
    parts.append(_runs_table(report))
    for note in [*report.notes, *([cost_note] if cost_note else [])]:
        parts.append(f'<p class="note">Note: {escape(note)}</p>')
    parts.append("</section>")
    return "\n".join(parts)


def _breakdown(report: ChainReport) -> str:
    """A stacked bar of the allocated time, part by part, with a legend."""
    x = 0.0
    rects = []
    legend = []
    for part in PARTS:
        share = report.share(part) or 0.0
        width = share * (WIDTH - 2)
        if width > 0:
            rects.append(
                f'<rect class="part part-{part}" x="{x + 1:.2f}" y="1" width="{width:.2f}" '
                f'height="28" fill="{COLOURS[part]}"><title>{escape(LABELS[part])}: '
                f"{share * 100:.1f} %</title></rect>"
            )
        x += width
        legend.append(
            f'<span><i class="sw" style="background:{COLOURS[part]}"></i>'
            f"{escape(LABELS[part])} {share * 100:.1f} %</span>"
        )
    svg = (
        f'<svg class="breakdown" width="{WIDTH}" height="30" viewBox="0 0 {WIDTH} 30" '
        f'xmlns="http://www.w3.org/2000/svg"><rect x="0.5" y="0.5" width="{WIDTH - 1}" '
        f'height="29" fill="none" stroke="#57606a"/>{"".join(rects)}</svg>'
    )
    return f'<h3>Where the allocated time went</h3>{svg}<p class="legend">{"".join(legend)}</p>'


def _timeline(report: ChainReport) -> str:
    """Runs (coloured by part), queue wait and gaps, interruptions, and steps over time."""
    if not report.runs:
        return "<p>No run has started yet.</p>"
    first = report.runs[0].start - (report.queue_wait_s or 0.0)
    last = max(run.end for run in report.runs)
    span = max(last - first, 1.0)
    inner = WIDTH - LEFT - 10

    def xpos(t: float) -> float:
        return LEFT + (t - first) / span * inner

    out = [
        f'<svg class="timeline" width="{WIDTH}" height="190" viewBox="0 0 {WIDTH} 190" '
        'xmlns="http://www.w3.org/2000/svg">',
        '<text x="4" y="34">runs</text><text x="4" y="110">steps</text>',
    ]
    if report.queue_wait_s:
        out.append(_rect("wait", xpos(first), 20, xpos(report.runs[0].start) - xpos(first),
                         WAIT_COLOUR, f"queue wait {report.queue_wait_s:.1f} s"))  # fmt: skip
    for run, nxt in zip(report.runs, report.runs[1:], strict=False):
        if nxt.start > run.end:
            out.append(_rect("gap", xpos(run.end), 20, xpos(nxt.start) - xpos(run.end),
                             WAIT_COLOUR, f"not running {nxt.start - run.end:.1f} s"))  # fmt: skip
    for number, run in enumerate(report.runs):
        x0, x1 = xpos(run.start), xpos(run.end)
        label = f"run {number}: job {run.job_id}, {run.elapsed_s:.1f} s, {run.state}"
        if run.cause:
            label += f", ended by {run.cause}"
        out.append(
            f'<g class="run" data-run="{number}" data-job="{escape(run.job_id)}">'
            f'<rect x="{x0:.2f}" y="16" width="{max(x1 - x0, 1.0):.2f}" height="30" '
            f'fill="#ffffff" stroke="#1f2328"><title>{escape(label)}</title></rect>'
        )
        out += _run_segments(run, xpos)
        out.append(
            f'<text x="{x0 + 2:.2f}" y="60">{escape(run.job_id)}'
            f"{'' if run.index == 0 else '/' + str(run.index)}</text></g>"
        )
        if run.signal_at is not None:
            xs = xpos(run.signal_at)
            out.append(
                f'<line class="signal" x1="{xs:.2f}" y1="10" x2="{xs:.2f}" y2="50" '
                'stroke="#e67e22" stroke-dasharray="3,2"><title>warning signal</title></line>'
            )
    for stop in report.interruptions:
        xs = xpos(stop["ended_at"])
        cause = escape(str(stop["cause"]))
        lost = stop.get("steps_lost")
        if lost is not None:
            lost_text = f", {lost} steps lost"
        elif stop.get("resumed_at") is not None:
            lost_text = ", steps lost unknown"
        else:
            lost_text = ""
        out.append(
            f'<g class="interruption"><line x1="{xs:.2f}" y1="8" x2="{xs:.2f}" y2="170" '
            f'stroke="#d9534f" stroke-width="2"><title>{cause}{lost_text}</title></line>'
            f'<text x="{xs + 3:.2f}" y="12">{cause}</text></g>'
        )
    out.append(_steps(report, xpos))
    out.append(
        f'<text x="{LEFT}" y="186">{escape(_clock(first))}</text>'
        f'<text x="{WIDTH - 120}" y="186">{escape(_clock(last))}</text></svg>'
    )
    return "<h3>Timeline</h3>" + "".join(out)


def _run_segments(run: Any, xpos: Any) -> list[str]:
    if run.parts is None:
        return []
    p = run.parts
    if p.first_progress is None or p.last_progress is None:
        return [_rect("seg-startup", xpos(run.start), 17, xpos(run.end) - xpos(run.start),
                      COLOURS["startup"], "no progress in this run")]  # fmt: skip
    tail = "warning" if p.seconds["warning"] >= p.seconds["tail"] else "tail"
    # Steps redone come at the start of a run after a requeue, or in its middle after a
    # restart inside the job (spare nodes, an elastic size).
    redone_from = p.redone_from if p.redone_from is not None else p.first_progress
    redone_end = p.redone_until if p.redone_until is not None else redone_from
    progress = f"steps {p.first_step}-{p.last_step}: goodput {p.seconds['goodput']:.1f} s"
    return [
        _rect("seg-startup", xpos(run.start), 17, xpos(p.first_progress) - xpos(run.start),
              COLOURS["startup"], f"start-up {p.seconds['startup']:.1f} s"),
        _rect("seg-progress", xpos(p.first_progress), 17,
              xpos(redone_from) - xpos(p.first_progress), COLOURS["goodput"], progress),
        _rect("seg-redone", xpos(redone_from), 17,
              xpos(redone_end) - xpos(redone_from), COLOURS["redone"],
              f"{p.redone_steps} steps redone, {p.seconds['redone']:.1f} s"),
        _rect("seg-progress", xpos(redone_end), 17,
              xpos(p.last_progress) - xpos(redone_end), COLOURS["goodput"], progress),
        _rect("seg-tail", xpos(p.last_progress), 17, xpos(run.end) - xpos(p.last_progress),
              COLOURS[tail], f"after the last progress {run.end - p.last_progress:.1f} s"),
    ]  # fmt: skip


def _steps(report: ChainReport, xpos: Any) -> str:
    """The reference rank's step over time, as a polyline under the runs."""
    if not report.progress:
        return '<text x="100" y="110">no progress reported</text>'
    reports = [r for r in report.progress[min(report.progress)] if r.step is not None]
    if not reports:
        return ""
    top = max(r.step or 0 for r in reports) or 1
    lines = []
    bounds = [(run.start, run.end) for run in report.runs]
    for run_reports in assign_reports(reports, bounds):
        points = " ".join(
            f"{xpos(r.time):.1f},{170 - (r.step or 0) / top * 95:.1f}" for r in run_reports[-2000:]
        )
        if points:
            lines.append(
                f'<polyline class="steps" points="{points}" fill="none" stroke="#2e9d4f" '
                'stroke-width="1.5"/>'
            )
    return (
        "".join(lines) + f'<text x="{LEFT - 30}" y="80">{top}</text>'
        f'<text x="{LEFT - 30}" y="170">0</text>'
    )


def _rect(cls: str, x: float, y: float, width: float, colour: str, title: str) -> str:
    return (
        f'<rect class="{cls}" x="{x:.2f}" y="{y}" width="{max(width, 0.0):.2f}" height="28" '
        f'fill="{colour}"><title>{escape(title)}</title></rect>'
    )


def _runs_table(report: ChainReport) -> str:
    rows = []
    for number, run in enumerate(report.runs):
        good = "-"
        if run.parts is not None and run.elapsed_s > 0:
            good = f"{run.parts.seconds['goodput'] / run.elapsed_s * 100:.1f} %"
        cells = [str(number), run.job_id, _clock(run.start), f"{run.elapsed_s:.0f} s",
                 str(run.gpus), run.state, run.cause or "-", good]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(
        f"<th>{h}</th>"
        for h in ("run", "job", "start", "elapsed", "GPUs", "state", "cause", "goodput")
    )
    return f'<table class="runs"><tr>{head}</tr>{"".join(rows)}</table>'


def _comparison(data: dict[str, Any]) -> str:
    rows = []
    for row in data.get("rows", []):
        cells = [str(row["what"]), str(row["a"]), str(row["b"]), str(row["change"])]
        direction = row.get("direction") or "-"
        mark = {"better": "&#9650; better", "worse": "&#9660; worse"}.get(direction, direction)
        rows.append(
            "<tr>"
            + "".join(f"<td>{escape(c)}</td>" for c in cells)
            + f'<td class="{escape(direction)}">{mark}</td></tr>'
        )
    diffs = []
    for diff in data.get("differences", []):
        cells = [str(diff["what"]), str(diff["a"]), str(diff["b"])]
        diffs.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    a, b = escape(str(data.get("a", ""))), escape(str(data.get("b", "")))
    out = [f"<h2>Before/after: {a} vs {b}</h2><table class=\"compare\">"
           f"<tr><th>figure</th><th>{a}</th><th>{b}</th><th>change</th><th>direction</th></tr>"
           f"{''.join(rows)}"
           "</table>"]  # fmt: skip
    if diffs:
        out.append(
            f'<h3>What differed in the scripts</h3><table class="differences"><tr>'
            f"<th>what</th><th>{a}</th><th>{b}</th></tr>{''.join(diffs)}</table>"
        )
    return "".join(out)


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")
