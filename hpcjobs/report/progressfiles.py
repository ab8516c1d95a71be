"""Reading a chain's progress reports (:mod:`hpcjobs.runtime.progress`) through a runner.

The node agents' histories (``node-<node>.log``, :mod:`hpcjobs.runtime.supervisor.agent`) and,
for chains started by an earlier hpcjobs, every rank's own log (``rank-<RANK>.log``) are read at
once (:func:`hpcjobs.report.folder.read_files`).
"""

from __future__ import annotations

from hpcjobs.report.folder import read_files
from hpcjobs.runner import Runner
from hpcjobs.runtime.progress import Report, parse_log, progress_dir, rank_of_log
from hpcjobs.runtime.supervisor.agent import split_history


def read_progress(runner: Runner, output_dir: str, root: str) -> dict[int, list[Report]]:
    """Every rank's reports (rank -> reports in time order); empty when none were made."""
    folder = progress_dir(output_dir, root)
    out: dict[int, list[Report]] = {}
    for text in (read_files(runner, folder, "node-*.log") or {}).values():
        for rank, lines in split_history(text).items():
            out.setdefault(rank, []).extend(parse_log(lines))
    for name, text in (read_files(runner, folder, "rank-*.log") or {}).items():
        owner = rank_of_log(name)
        if owner is not None:
            out.setdefault(owner, []).extend(parse_log(text))
    ordered = {rank: sorted(reports, key=lambda r: r.time) for rank, reports in out.items()}
    return {rank: reports for rank, reports in sorted(ordered.items()) if reports}
