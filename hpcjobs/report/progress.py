"""Reading a chain's progress reports (:mod:`hpcjobs.runtime.progress`) through a runner.

Every rank's log is read at once (:func:`hpcjobs.report.folder.read_files`).
"""

from __future__ import annotations

from hpcjobs.report.folder import read_files
from hpcjobs.runner import Runner
from hpcjobs.runtime.progress import Report, parse_log, progress_dir, rank_of_log


def read_progress(runner: Runner, output_dir: str, root: str) -> dict[int, list[Report]]:
    """Every rank's reports (rank -> reports in time order); empty when none were made."""
    folder = progress_dir(output_dir, root)
    out: dict[int, list[Report]] = {}
    for name, text in (read_files(runner, folder, "rank-*.log") or {}).items():
        rank = rank_of_log(name)
        reports = sorted(parse_log(text), key=lambda r: r.time)
        if rank is not None and reports:
            out[rank] = reports
    return dict(sorted(out.items()))
