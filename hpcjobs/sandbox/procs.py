"""Start, find and stop the sandbox's daemons, and only those.

Every daemon the sandbox starts carries ``HPCJOBS_SANDBOX_DIR=<state dir>`` in its environment.
That marker (not a process name) decides what belongs to a sandbox, so ``down`` can never touch
a Slurm, MariaDB or munge that somebody else started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from hpcjobs.errors import SandboxError
from hpcjobs.logger import logger

log = logger(__name__)

MARKER = "HPCJOBS_SANDBOX_DIR"


def marker_env(state_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A clean daemon environment that carries the ownership marker."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/root"),
        MARKER: str(state_dir),
    }
    if extra:
        env.update(extra)
    return env


def start_daemon(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> None:
    """Run a program that forks into the background itself, and wait for its parent to exit."""
    log.debug("start daemon: %s", " ".join(argv))
    with open(log_path, "ab") as out:
        try:
            proc = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=dict(env),
                timeout=60,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SandboxError(f"{argv[0]!r} is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"{argv[0]} did not detach within 60 s") from exc
    if proc.returncode != 0:
        raise SandboxError(
            f"{Path(argv[0]).name} failed to start (exit code {proc.returncode})",
            hint=f"see its log: {log_path}",
        )


def start_foreground(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> int:
    """Start a program that stays in the foreground, detached in its own session."""
    log.debug("start: %s", " ".join(argv))
    with open(log_path, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=dict(env),
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise SandboxError(f"{argv[0]!r} is not installed") from exc
    return proc.pid


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may itself contain spaces.
    state = stat.rpartition(")")[2].split()[0]
    return state not in ("Z", "X")


def owned_by(pid: int, state_dir: Path) -> bool:
    """True if the process carries this sandbox's marker in its environment."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER}={state_dir}".encode() in raw.split(b"\0")


def running_pid(pid_file: Path, state_dir: Path) -> int | None:
    """The pid from ``pid_file`` if that process is alive and belongs to this sandbox."""
    pid = read_pid(pid_file)
    if pid is not None and is_alive(pid) and owned_by(pid, state_dir):
        return pid
    return None


def _all_pids() -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[1])


def sandbox_processes(state_dir: Path) -> list[int]:
    """Every live process of this sandbox: marked daemons and all their descendants.

    Job steps (slurmstepd) inherit the marker from slurmd; the job's own processes are their
    descendants.
    """
    live = [pid for pid in _all_pids() if pid != os.getpid() and is_alive(pid)]
    ours = {pid for pid in live if owned_by(pid, state_dir)}
    parents = {pid: _parent(pid) for pid in live}
    changed = True
    while changed:
        changed = False
        for pid, ppid in parents.items():
            if pid not in ours and ppid in ours:
                ours.add(pid)
                changed = True
    return sorted(ours)


def stop(pid: int, *, timeout: float = 15.0) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
    _signal(pid, signal.SIGTERM)
    if not wait_gone([pid], timeout):
        _signal(pid, signal.SIGKILL)
        wait_gone([pid], 5.0)


def kill_all(pids: Sequence[int]) -> None:
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    wait_gone(pids, 5.0)


def wait_gone(pids: Sequence[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(is_alive(p) for p in pids):
            return True
        _reap()
        time.sleep(0.1)
    return not any(is_alive(p) for p in pids)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _reap() -> None:
    """Collect exited children of this process (a foreground daemon we started)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
