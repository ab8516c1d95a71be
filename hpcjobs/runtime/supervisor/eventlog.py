"""The chain's event log, as the supervisor writes and reads it.

One file per chain, ``<output dir>/chain-<root>.tsv``, mode 0600, one line per event appended
with a single ``write(2)``: ``<unix time>\\t<job id>\\t<restart>\\t<event>\\t<cause>\\t<detail>``
(docs/requeue.md, "The event log"; :mod:`hpcjobs.jobs.chain` reads it on the submit side).
"""

from __future__ import annotations

import os
import re
import time
from typing import NamedTuple

_CONTROL = re.compile(r"[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


class Line(NamedTuple):
    time: str
    job_id: str
    restart: str
    event: str
    cause: str
    detail: str


class EventLog:
    """The event log of one chain, seen from one run (``job_id``, Slurm restart ``restart``)."""

    def __init__(self, path: str, job_id: str, restart: int) -> None:
        self.path = path
        self.job_id = job_id
        self.restart = restart

    def append(self, event: str, cause: str, detail: str, when: float | None = None) -> None:
        """Add one event (``when``: epoch seconds it happened, if not now)."""
        stamp = f"{time.time() if when is None else when:.9f}"
        text = "\t".join(
            [stamp, self.job_id, str(self.restart), event, cause or "-", _CONTROL.sub(" ", detail)]
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (text + "\n").encode("utf-8", "replace"))
        finally:
            os.close(fd)

    def lines(self) -> list[Line]:
        """Every well-formed line, oldest first (none when there is no log)."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                raw = handle.read()
        except OSError:
            return []
        found = []
        for text in raw.split("\n"):
            parts = text.split("\t")
            if len(parts) == 6:
                found.append(Line(*parts))
        return found

    def count(self, event: str, cause: str = "") -> int:
        """How many ``event`` lines (of ``cause``, if given) the chain has."""
        return sum(1 for x in self.lines() if x.event == event and (not cause or x.cause == cause))

    def standby_of(self, job_id: str) -> str:
        """The standby job a run of ``job_id`` submitted (its newest), or ""."""
        found = ""
        for x in self.lines():
            words = x.detail.split(" ")  # standby job <id> for job <job_id>
            if (
                x.event == "standby"
                and len(words) == 6
                and words[5] == job_id
                and words[:2] == ["standby", "job"]
                and words[3:5] == ["for", "job"]
            ):
                found = words[2]
        return found

    def continued_as(self, job_id: str) -> bool:
        """Whether a run logged that the chain continues as ``job_id``."""
        pattern = re.compile(rf"continued as job {re.escape(job_id)}( |$)")
        return any(pattern.search(x.detail) for x in self.lines())

    def names_job(self, job_id: str) -> bool:
        """Whether the log names ``job_id`` (or a task of that array) as a continuation or a
        standby of this chain: a job carrying the chain's root but not named here is not
        part of it."""
        pattern = re.compile(rf"(continued as|standby) job {re.escape(job_id)}( |$|_)")
        return any(pattern.search(x.detail) for x in self.lines())

    def ended_after_standby(self, standby: str) -> bool:
        """Whether the chain logged its end after ``standby`` was submitted."""
        on = False
        for x in self.lines():
            if x.detail.startswith(f"standby job {standby} for job"):
                on = True
            elif on and x.event == "end":
                return True
        return False

    def excluded(self) -> list[str]:
        """The nodes the chain excludes now (each ``exclude`` event holds the whole list)."""
        listed = ""
        for x in self.lines():
            if x.event == "exclude":
                listed = x.detail
        listed = listed[len("nodes=") :] if listed.startswith("nodes=") else listed
        listed = listed.split(" ", 1)[0]
        return [] if listed in ("", "-") else [n for n in listed.split(",") if n]

    def last_ending(self) -> Line | None:
        """The newest line that tells how a run ended (signal lines may come after it)."""
        kept = [x for x in self.lines() if x.event != "signal"]
        return kept[-1] if kept else None
