"""Reading a chain's progress reports (:mod:`hpcjobs.runtime.progress`) through a runner.

On this machine the files are read directly; through any other runner (SSH) one ``find ...
-exec grep -H '' {} +`` returns every rank's log in a single command.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpcjobs.errors import HpcJobsError
from hpcjobs.runner import LocalRunner, Runner
from hpcjobs.runtime.progress import Report, parse_log, progress_dir, rank_of_log


def read_progress(runner: Runner, output_dir: str, root: str) -> dict[int, list[Report]]:
    """Every rank's reports (rank -> reports in time order); empty when none were made."""
    folder = progress_dir(output_dir, root)
    texts = _local(folder) if isinstance(runner, LocalRunner) else _remote(runner, folder)
    out: dict[int, list[Report]] = {}
    for rank, text in texts.items():
        reports = sorted(parse_log(text), key=lambda r: r.time)
        if reports:
            out[rank] = reports
    return dict(sorted(out.items()))


def _local(folder: str) -> dict[int, str]:
    texts: dict[int, str] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return texts
    for name in names:
        rank = rank_of_log(name)
        if rank is None:
            continue
        try:
            texts[rank] = (Path(folder) / name).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
    return texts


def _remote(runner: Runner, folder: str) -> dict[int, str]:
    argv = [
        "find",
        folder,
        "-maxdepth",
        "1",
        "-name",
        "rank-*.log",
        "-exec",
        "grep",
        "-H",
        "",
        "{}",
        "+",
    ]
    try:
        result = runner.run(argv, check=False, timeout=60)
    except HpcJobsError:
        return {}
    lines: dict[int, list[str]] = {}
    ranks: dict[str, int | None] = {}
    for line in result.stdout.splitlines():
        path, sep, text = line.partition(":")
        if path not in ranks:
            ranks[path] = rank_of_log(path.rsplit("/", 1)[-1]) if sep else None
        rank = ranks[path]
        if rank is not None:
            lines.setdefault(rank, []).append(text)
    return {rank: "\n".join(items) + "\n" for rank, items in lines.items()}
