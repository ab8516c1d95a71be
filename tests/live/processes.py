"""What the live tests read of this host's processes (/proc): the sandboxes of other releases
run side by side, each in a Debian root of its own, with the same node names and job ids."""

from __future__ import annotations

import os
from pathlib import Path


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def root_of(pid: int | str) -> tuple[int, int] | None:
    """The (device, inode) of a process's root folder: each Debian root of another release has
    its own."""
    try:
        found = os.stat(f"/proc/{pid}/root")
    except OSError:
        return None
    return found.st_dev, found.st_ino


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def stepds() -> list[tuple[int, str]]:
    """Every slurmstepd under this process's own root: (pid, its command line)."""
    mine = root_of("self")
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and root_of(entry.name) == mine:
            line = cmdline(int(entry.name))
            if line.startswith("slurmstepd"):
                found.append((int(entry.name), line))
    return found
