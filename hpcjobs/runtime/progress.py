"""Per-rank progress reports: the files a training program writes under ``$HPCJOBS_PROGRESS_DIR``.

This module is the one definition of what a rank writes. The job's supervisor sets
``HPCJOBS_PROGRESS_DIR`` to a folder on node-local storage, ``$TMPDIR/hpcjobs-<job>/<node>``
(mode 0700): these writes never reach the shared file system. Each rank writes two files there,
both mode 0600:

``rank-<RANK>``
    The newest step this rank finished: one line ``<step> [<node>]`` (``<node>`` may be left
    out: the node's agent knows where it runs). Replaced atomically (written to a temporary file
    in the same folder, then renamed over it), so a reader never sees half.
``rank-<RANK>.log``
    Optional, append-only, one line per report, each written with a single ``write(2)``:

    - ``<unix time> <step> [<host>]``: the rank finished ``<step>`` at ``<unix time>`` (seconds,
      a decimal fraction allowed), on ``<host>`` (optional);
    - ``<unix time> save <seconds>``: a checkpoint that took ``<seconds>`` ended at that time.

    Bounded: once it exceeds :data:`LOG_LIMIT` bytes the writer rewrites it atomically keeping
    every other report line (the first and the last are always kept). Readers skip lines they
    cannot parse.

The node agent (:mod:`hpcjobs.runtime.supervisor.agent`) reads both every few seconds and keeps,
in the chain's progress folder ``<output dir>/progress-<root>/``, a summary per node (the stall
watch's input, docs/requeue.md, "Stalls") and a history per node in the rank log's format with
the rank in front, which ``hpcjobs report`` reads. Chains started by an earlier hpcjobs have
each rank's ``rank-<RANK>.log`` there instead; ``hpcjobs report`` reads those too.

``RANK`` is the global rank (``$RANK``, else ``$SLURM_PROCID``, else 0). From a shell::

    echo "$step" > "$HPCJOBS_PROGRESS_DIR/.rank-$RANK.tmp" &&
        mv -f "$HPCJOBS_PROGRESS_DIR/.rank-$RANK.tmp" "$HPCJOBS_PROGRESS_DIR/rank-$RANK"

:meth:`hpcjobs.runtime.checkpoint.CheckpointDir.note_progress` and ``CheckpointDir.save`` do
this for Python programs whenever ``HPCJOBS_PROGRESS_DIR`` is set.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from pathlib import Path
from typing import NamedTuple

from hpcjobs.atomicfile import PRIVATE, PRIVATE_DIR, write_atomic
from hpcjobs.contract import names
from hpcjobs.contract.jobenv import ENV_PROGRESS_DIR
from hpcjobs.textlines import split_lines

#: A rank's log grows to at most about this many bytes before it is thinned out.
LOG_LIMIT = 1 << 20
_RANK_LOG = re.compile(r"^rank-(\d+)\.log$")


def progress_dir(output_dir: str, root: str) -> str:
    """A chain's progress folder on the shared file system, next to its event log, where the
    node agents write (the supervisor's choice)."""
    return f"{output_dir.rstrip('/')}/{names.progress_dir(root)}"


def current_rank() -> int:
    """This process's global rank: ``$RANK``, else ``$SLURM_PROCID``, else 0."""
    for name in ("RANK", "SLURM_PROCID"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


class Report(NamedTuple):
    """One line of a rank's log: a step finished, or a checkpoint saved (``save`` seconds).

    A named tuple: a report over long runs reads hundreds of thousands of them."""

    time: float
    step: int | None
    host: str = ""
    save_s: float | None = None


def parse_log(text: str) -> list[Report]:
    """The reports in a rank's log, in file order; malformed lines are skipped."""
    reports: list[Report] = []
    append = reports.append
    for line in split_lines(text):
        parts = line.split()
        count = len(parts)
        if count < 2:
            continue
        what = parts[1]
        try:
            if what.isdigit():
                append(Report(float(parts[0]), int(what), parts[2] if count >= 3 else ""))
            elif what == "save" and count >= 3:
                append(Report(float(parts[0]), None, save_s=max(0.0, float(parts[2]))))
        except ValueError:
            continue
    return reports


def rank_of_log(name: str) -> int | None:
    """The rank whose log is the file ``name`` (``rank-3.log`` -> 3), else None."""
    match = _RANK_LOG.match(name)
    return int(match.group(1)) if match else None


class ProgressWriter:
    """Writes one rank's progress files (see the module docs).

    Args:
        folder: ``$HPCJOBS_PROGRESS_DIR``.
        rank: the global rank (default :func:`current_rank`).
    """

    def __init__(self, folder: str | os.PathLike[str], rank: int | None = None) -> None:
        self.folder = Path(folder)
        self.rank = current_rank() if rank is None else rank
        self.host = node_name()

    @classmethod
    def from_env(cls) -> ProgressWriter | None:
        """The writer for ``$HPCJOBS_PROGRESS_DIR``, or None outside an hpcjobs job."""
        folder = os.environ.get(ENV_PROGRESS_DIR)
        return cls(folder) if folder else None

    @property
    def current_file(self) -> Path:
        return self.folder / f"rank-{self.rank}"

    @property
    def log_file(self) -> Path:
        return self.folder / f"rank-{self.rank}.log"

    def step(self, step: int, when: float | None = None) -> None:
        """Record that this rank finished ``step``."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        write_atomic(self.current_file, f"{step} {self.host}\n", fsync=False)
        self._append(f"{_stamp(when)} {step} {self.host}\n")

    def saved(self, seconds: float, when: float | None = None) -> None:
        """Record a checkpoint that took ``seconds`` and ended at ``when`` (now)."""
        self.folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        self._append(f"{_stamp(when)} save {max(0.0, seconds):.3f}\n")

    def _append(self, line: str) -> None:
        _append_line(self.log_file, line)
        with contextlib.suppress(OSError):
            if self.log_file.stat().st_size > LOG_LIMIT:
                self._thin()

    def _thin(self) -> None:
        """Keep every other report line (first and last kept) and every save line."""
        lines = split_lines(self.log_file.read_text(encoding="utf-8", errors="replace"))
        steps = [i for i, line in enumerate(lines) if " save " not in line]
        keep = set(steps[::2]) | ({steps[-1]} if steps else set())
        kept = [line for i, line in enumerate(lines) if i in keep or " save " in line]
        write_atomic(self.log_file, "".join(line + "\n" for line in kept), fsync=False)


def node_name() -> str:
    """The Slurm node this process runs on (``$SLURMD_NODENAME``), else the short host name."""
    name = os.environ.get("SLURMD_NODENAME", "")
    if name and all(c.isalnum() or c in "-_." for c in name):
        return name
    return socket.gethostname().split(".")[0] or "-"


def _stamp(when: float | None) -> str:
    return f"{time.time() if when is None else when:.3f}"


def _append_line(path: Path, text: str) -> None:
    """Append ``text`` in one ``write(2)``; a new file gets mode 0600 from the start."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), PRIVATE)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


__all__ = [
    "LOG_LIMIT",
    "ProgressWriter",
    "Report",
    "current_rank",
    "node_name",
    "parse_log",
    "progress_dir",
    "rank_of_log",
]
