"""The user's suspect nodes: every node a chain blamed for a fault, across all of the user's
chains, and which of them are kept out of later jobs (docs/faults.md, "Repeat offenders").

One file per user, ``$XDG_STATE_HOME/hpcjobs/suspects.jsonl`` (``~/.local/state/...``), or
the path the site's ``faults.suspects_file`` names (one its admins read), mode 0600 for a
file of the user's own. Each line is one JSON object, appended with a single ``write(2)``::

    {"v": 1, "time": 1796207768.2, "what": "blame", "node": "n2", "cause": "infrastructure",
     "job": "2014", "chain": "2010", "evidence": "NCCL WARN NET/IB : Got completion ..."}

``what`` is ``blame`` (a supervisor excluded the node for a fault) or ``clear`` (the chain
found that the failure was the program's, not the node's: the same failure at the same step
on another node; every earlier blame of the node by that chain is withdrawn). A node blamed
:data:`KEEP_OUT_FAULTS` times within the time-to-live (:data:`KEEP_OUT_TTL_S`) is kept out:
``hpcjobs submit`` and every continuation leave it out until the newest of those blames is
that old. The supervisor writes it; ``hpcjobs suspects`` and ``hpcjobs submit`` read it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from .faultdefaults import KEEP_OUT_FAULTS, KEEP_OUT_HOURS

#: The format this module writes (a reader skips lines it cannot read).
FORMAT = 1
BLAME, CLEAR = "blame", "clear"
#: How long a blame counts by default, in seconds (the site's ``faults.keep_out_hours``).
KEEP_OUT_TTL_S = KEEP_OUT_HOURS * 3600
#: How much of the file is read: the newest blames are at its end.
READ_LIMIT = 1 << 20
#: The file under the user's state folder.
FILE_NAME = os.path.join("hpcjobs", "suspects.jsonl")
#: Where the file is, relative to the user's home (a login node reached over SSH).
HOME_RELATIVE = os.path.join(".local", "state", FILE_NAME)


def default_path(env: Mapping[str, str]) -> str:
    """The user's own file: under ``$XDG_STATE_HOME``, else ``$HOME/.local/state``."""
    state = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, FILE_NAME)


class Entry(NamedTuple):
    """One line of the file."""

    time: float
    what: str  #: BLAME or CLEAR
    node: str
    cause: str
    job: str
    chain: str
    evidence: str = ""


def line(entry: Entry) -> str:
    """``entry`` as one line of the file."""
    body = {"v": FORMAT, **entry._asdict()}
    return json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n"


def parse(text: str) -> list[Entry]:
    """The entries of ``text``; a line that is not one (a torn or foreign line) is skipped."""
    entries: list[Entry] = []
    for raw in text.splitlines():
        try:
            data = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(data, dict) or data.get("what") not in (BLAME, CLEAR):
            continue
        when, node = data.get("time"), data.get("node")
        if not isinstance(when, (int, float)) or not isinstance(node, str) or not node:
            continue
        texts = [data.get(k) for k in ("cause", "job", "chain", "evidence")]
        cause, job, chain, evidence = (t if isinstance(t, str) else "" for t in texts)
        entries.append(Entry(float(when), data["what"], node, cause, job, chain, evidence))
    return entries


def append(path: str, entries: Iterable[Entry]) -> None:
    """Append ``entries`` to the file at ``path`` in one write, creating it (and its folder)
    private to the user. Raises OSError."""
    text = "".join(line(e) for e in entries)
    if not text:
        return
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def read(path: str) -> list[Entry]:
    """The entries of the file at ``path`` (its last :data:`READ_LIMIT` bytes); [] when there
    is none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(size - READ_LIMIT, 0))
            data = handle.read(READ_LIMIT)
    except OSError:
        return []
    return parse(data.decode("utf-8", errors="replace"))


class KeptOut(NamedTuple):
    """A node kept out of later jobs: the blames that count, newest first, and until when."""

    node: str
    blames: Sequence[Entry]
    until: float


def standing(entries: Sequence[Entry]) -> list[Entry]:
    """The blames no later ``clear`` of the same node by the same chain withdrew."""
    kept: list[Entry] = []
    for entry in entries:
        if entry.what == BLAME:
            kept.append(entry)
        elif entry.what == CLEAR:
            kept = [
                e
                for e in kept
                if not (e.node == entry.node and e.chain == entry.chain and e.time <= entry.time)
            ]
    return kept


def kept_out(
    entries: Sequence[Entry],
    now: float,
    ttl_s: float = KEEP_OUT_TTL_S,
    faults: int = KEEP_OUT_FAULTS,
) -> list[KeptOut]:
    """The nodes blamed at least ``faults`` times within ``ttl_s`` before ``now`` (0 faults:
    none is kept out), the most blamed first: each is kept out until its ``faults``-th newest
    blame is ``ttl_s`` old."""
    if faults < 1:
        return []
    by_node: dict[str, list[Entry]] = {}
    for entry in standing(entries):
        if now - ttl_s < entry.time <= now + 60:
            by_node.setdefault(entry.node, []).append(entry)
    found = []
    for node, blames in by_node.items():
        if len(blames) >= faults:
            newest = sorted(blames, key=lambda e: e.time, reverse=True)
            found.append(KeptOut(node, newest, newest[faults - 1].time + ttl_s))
    return sorted(found, key=lambda k: (-len(k.blames), k.node))


def drain_command(node: str, reason: str) -> list[str]:
    """The command an admin runs to drain ``node`` (a user cannot)."""
    return ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
