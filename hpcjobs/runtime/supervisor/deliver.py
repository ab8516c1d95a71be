"""The warning, delivered on the signal the program listens for (docs/requeue.md, "Signals").

The rule, defined here once:

- The program's processes start with every signal as they inherited it: hpcjobs ignores none.
- Slurm sends the warning to the batch step only (``--signal=B:``); the supervisor does not pass
  it on to the whole step. Instead each node's agent looks at the processes of the program on
  its node (those whose environment carries :data:`ENV_PROGRAM` with this run's token, as the
  batch script's ``hpcjobs_rank`` and ``hpcjobs_start`` export it from :data:`ENV_TOKEN`, which
  the supervisor sets for the step and its agents) and reads which signals each one catches
  (``SigCgt`` in ``/proc/<pid>/status``). The token, not the job id: job ids repeat across the
  clusters that may share a host (the test suite runs several sandboxes side by side). A
  process whose ``SLURMD_NODENAME`` names another node is another node's: several Slurm nodes
  may share one host (``slurmd -N``), and each agent signals its own node's processes only.
- From each of the program's topmost processes down, a process that catches one of the
  candidates (:func:`candidates`: the job's warning signal, then the frameworks' own, SIGUSR1
  for PyTorch Lightning and SIGUSR2 for submitit) gets the first of them it catches, and its
  children get nothing (a data loader's workers inherit their parent's handlers). A process
  that catches none is passed over and its children are looked at (a launcher such as
  torchrun, whose workers listen).
- A process that catches none of them gets nothing: the warning alone never kills a program.
  Slurm's own SIGTERM at the end still reaches every process.
- A process gets the warning at most once per run: a second request to deliver it (a second
  warning signal, a watch ending the step after the warning) passes over the processes that
  already got it, and their children. A handler that saves and exits is not entered twice.

Where to look: each rank, before it becomes the program, leaves an empty ``program-<pid>``
file in its node's progress folder (the batch script's ``hpcjobs_rank_setup``); the agent reads
those processes and their descendants (``/proc/<pid>/task/<tid>/children``), a few files per
rank. Without such files (a launcher without a progress folder), where they lead to no process
of this run, or where the kernel does not list children, it scans every process of ``/proc``
once instead: the work grows with the
processes of one node, never with the job's ranks, but a host that carries many Slurm nodes
(the sandbox's 131 at scale) would scan its thousands of processes once per node.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

#: In the environment of the program's processes: the token of the run they belong to (the
#: batch script's ``hpcjobs_rank`` and ``hpcjobs_start`` export it before they become the
#: program, from :data:`ENV_TOKEN`).
ENV_PROGRAM = "HPCJOBS_PROGRAM_OF"
#: In the environment of the step and the agents: a token unique to one run of a job, set by
#: the supervisor (:func:`new_token`).
ENV_TOKEN = "HPCJOBS_PROGRAM_TOKEN"


def new_token(job: str) -> str:
    """A token for one run of job ``job``, unique on the host: the job id and 64 random bits."""
    return f"{job}-{os.urandom(8).hex()}"


#: The signals frameworks listen for on Slurm, tried after the job's own warning signal:
#: PyTorch Lightning's ``SLURMEnvironment`` (SIGUSR1), submitit (SIGUSR2).
FRAMEWORK_SIGNALS = ("USR1", "USR2")


def candidates(warning: str) -> list[str]:
    """The signals a program's process may get as the warning, in order of preference (names
    without ``SIG``): the job's warning signal, then :data:`FRAMEWORK_SIGNALS`. SIGTERM is
    never one: it means the end, and comes from Slurm."""
    names = [warning] + [name for name in FRAMEWORK_SIGNALS if name != warning]
    return [name for name in names if name != "TERM"]


class Process(NamedTuple):
    """One process of the program on this node."""

    parent: int
    caught: int  #: the SigCgt mask: bit N-1 set when signal N is caught


def caught_mask(status: str) -> int:
    """The ``SigCgt`` mask in the text of ``/proc/<pid>/status`` (0 when absent)."""
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1].strip(), 16)
    return 0


def catches(mask: int, name: str) -> bool:
    """Whether a process with SigCgt ``mask`` catches SIG``name``."""
    number = int(getattr(signal, "SIG" + name))
    return bool(mask >> (number - 1) & 1)


def targets(
    processes: Mapping[int, Process], names: Sequence[str], warned: Collection[int] = ()
) -> tuple[list[tuple[int, str]], int]:
    """Who gets which signal (see the module docs): ``[(pid, name), ...]``, and how many of the
    program's processes that have no child among ``processes`` catch none of ``names`` and get
    nothing (a rank that does not listen). The processes in ``warned`` got it already: they and
    their children get nothing more. Pure: ``tests/unit/test_deliver.py``."""
    children: dict[int, list[int]] = {}
    for pid, process in processes.items():
        children.setdefault(process.parent, []).append(pid)
    roots = sorted(pid for pid, process in processes.items() if process.parent not in processes)
    sent: list[tuple[int, str]] = []
    deaf = 0
    todo = list(reversed(roots))
    while todo:
        pid = todo.pop()
        if pid in warned:
            continue
        mask = processes[pid].caught
        chosen = next((name for name in names if catches(mask, name)), "")
        if chosen:
            sent.append((pid, chosen))
            continue
        below = sorted(children.get(pid, ()))
        if not below:
            deaf += 1
        todo.extend(reversed(below))
    return sent, deaf


def _read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


#: Set by slurmd in the environment of every task: the Slurm node it runs on.
ENV_NODE = "SLURMD_NODENAME"


#: In a node's progress folder: ``program-<pid>``, an empty file per process the batch script
#: started as a rank of the program (the pid it keeps once it becomes the program).
PROGRAM_FILE = "program-"


def started_pids(folder: str) -> list[int]:
    """The pids the ranks on this node left in ``folder`` (:data:`PROGRAM_FILE`)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    tail = [n[len(PROGRAM_FILE) :] for n in names if n.startswith(PROGRAM_FILE)]
    return sorted(int(t) for t in tail if t.isdecimal())


def _program_process(proc: str, pid: str, marker: bytes, node: str) -> Process | None:
    """``pid`` as a process of the program (None: it is not one, or is gone): its
    environment holds ``marker``, and (with ``node``) no other node's name."""
    try:
        with open(os.path.join(proc, pid, "environ"), "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    if marker not in entries:
        return None
    if node:
        prefix = f"{ENV_NODE}=".encode()
        own = prefix + node.encode()
        if any(e.startswith(prefix) and e != own for e in entries):
            return None
    status = _read(os.path.join(proc, pid, "status"))
    parent = 0
    for line in status.splitlines():
        if line.startswith("PPid:"):
            value = line.split(":", 1)[1].strip()
            parent = int(value) if value.isdecimal() else 0
            break
    return Process(parent, caught_mask(status))


def _children(proc: str, pid: int) -> list[int] | None:
    """The children of ``pid`` (of all its threads); None where the kernel does not list
    them (``/proc/<pid>/task/<tid>/children``)."""
    tasks = os.path.join(proc, str(pid), "task")
    try:
        tids = os.listdir(tasks)
    except OSError:
        return []  # gone
    found: list[int] = []
    for tid in tids:
        try:
            with open(os.path.join(tasks, tid, "children"), "rb") as handle:
                found += [int(x) for x in handle.read().split()]
        except FileNotFoundError:
            if tid == str(pid):
                return None
        except (OSError, ValueError):
            continue
    return found


def program_processes(
    token: str, proc: str = "/proc", node: str = "", roots: Sequence[int] = ()
) -> dict[int, Process]:
    """The processes of the program of the run with ``token`` on this node (readable ones:
    this user's); with ``node``, not those whose :data:`ENV_NODE` names another node. From
    ``roots`` (the ranks' pids, :func:`started_pids`) and their descendants; without roots, or
    where the kernel does not list children, from every process of ``proc``."""
    marker = f"{ENV_PROGRAM}={token}".encode()
    found: dict[int, Process] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        process = _program_process(proc, str(pid), marker, node)
        if process is None:
            continue  # gone, or not the program's (a tee copying a rank's output)
        below = _children(proc, pid)
        if below is None:
            return program_processes(token, proc, node)
        found[pid] = process
        todo.extend(below)
    if found:
        return found
    # No root led to a process of this run (files a run before left, a rank that became
    # another process): every process of the host, once.
    try:
        names: Iterable[str] = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if name.isdecimal():
            process = _program_process(proc, name, marker, node)
            if process is not None:
                found[int(name)] = process
    return found


class Delivery(NamedTuple):
    """What one node's delivery did."""

    sent: list[tuple[int, str]]  #: (pid, signal name) per process signalled
    deaf: int  #: the program's processes that listen for none of the candidates

    def summary(self) -> str:
        """``SIGUSR1 to 4 process(es)``, ``nothing (2 process(es) listen for none)``..."""
        counts: dict[str, int] = {}
        for _pid, name in self.sent:
            counts[name] = counts.get(name, 0) + 1
        parts = [f"SIG{name} to {count} process(es)" for name, count in sorted(counts.items())]
        if self.deaf:
            parts.append(f"{self.deaf} process(es) listen for none")
        return ", ".join(parts) or "no process of the program found"


def deliver(
    token: str,
    names: Sequence[str],
    proc: str = "/proc",
    node: str = "",
    folder: str = "",
    warned: Collection[int] = (),
) -> Delivery:
    """Send the warning to the program of the run with ``token`` on this node, ``node`` when
    given, from the ranks that left their pid in ``folder`` (the node's progress folder; see
    the module docs), passing over the processes in ``warned`` (they got it from an earlier
    call for this run; the caller keeps them). Nothing without a token."""
    if not token:
        return Delivery([], 0)
    roots = started_pids(folder) if folder else []
    sent, deaf = targets(program_processes(token, proc, node, roots), names, warned)
    done: list[tuple[int, str]] = []
    for pid, name in sent:
        with contextlib.suppress(OSError):
            os.kill(pid, getattr(signal, "SIG" + name))
            done.append((pid, name))
    return Delivery(done, deaf)
