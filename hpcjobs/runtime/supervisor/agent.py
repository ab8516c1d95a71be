"""The node agent: one per node of a run, in a job step of its own (one task per node).

The ranks report their progress on node-local storage (``$HPCJOBS_PROGRESS_DIR`` is
``<node tmp>/<node>``, the contract in :mod:`hpcjobs.runtime.progress`): one small write per step
that the shared file system never sees. Every few seconds the agent reads its node's reports and
writes, in the chain's shared progress folder,

- ``node-<node>``: the summary the supervisor's stall watch reads, replaced atomically: a first
  line ``<unix time> <node> <job id>``, then ``<rank> <step> <seconds since the step changed>``
  per rank;
- ``node-<node>.log``: the progress history ``hpcjobs report`` reads, appended once per cycle:
  each line of the ranks' own logs since the last cycle with the rank in front
  (``<rank> <unix time> <step> [<host>]``, ``<rank> <unix time> save <seconds>``), and for a
  rank that keeps no log its newest step, ``<rank> <unix time> <step> <node>``; past
  :data:`LOG_LIMIT` every other step line of each rank is dropped;

and, where ``nvidia-smi`` exists, samples the node's GPUs into ``gpu-<root>/<node>.csv``. On
SIGUSR1 (the supervisor, when the job's warning came) it delivers the warning to the program's
processes on its node (:mod:`.deliver`) and writes what it did in ``warned-<node>``. So the
shared folder sees a few metadata operations per node every few seconds, whatever the number of
ranks or their step rate. On SIGHUP (the supervisor, once the program's step has ended) it
writes once more and removes its node-local folder.

In a job with spare nodes (submitted ``--no-kill``) Slurm keeps the job running when its batch
host fails, without it: nothing of the supervisor is left, and the standby waits for a job that
never ends. One agent, the deputy (on the job's first other node), asks Slurm once per cycle
whether the batch host is still in the job; when it is not, the deputy logs the fault in the
chain's event log (``seen_by``: its node) and cancels the job, and the standby takes over.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from hpcjobs.contract.causes import NODE_FAILURE
from hpcjobs.contract.eventlog import EventLog
from hpcjobs.contract.slurmcmd import Slurm

from . import deliver

#: The node history grows to about this many bytes before every other line is dropped.
LOG_LIMIT = 4 << 20
#: The node-local folder under which each node's ranks report (set by the supervisor).
ENV_NODE_TMP = "HPCJOBS_NODE_TMP"
#: The agents' job step name (the stall watch never kills it).
AGENT_STEP = "hpcjobs-agent"
#: Seconds between two deliveries of the warning while some of the program's processes on the
#: node listen for none of its signals (a program still importing its libraries when the
#: warning comes: it gets the warning once its handler is in place).
RETRY_S = 1.0
#: What the supervisor sends the agents to have the warning delivered on every node.
WARN_SIGNAL = "USR1"


def warned_file(node: str) -> str:
    """The file, in the chain's progress folder, where a node's agent says what it delivered
    (:meth:`Agent.warn`): ``<signals sent> <summary>``."""
    return f"warned-{node}"


def write_warned(shared: str, node: str, done: deliver.Delivery) -> None:
    """Say what the warning's delivery on ``node`` did, in :func:`warned_file` of the chain's
    progress folder ``shared``, replaced atomically (a failure to write is ignored)."""
    path = os.path.join(shared, warned_file(node))
    tmp = os.path.join(shared, f".{warned_file(node)}.tmp")
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(f"{len(done.sent)} {done.summary()}\n")
        os.replace(tmp, path)


def node_name() -> str:
    """The Slurm node this process runs on."""
    name = os.environ.get("SLURMD_NODENAME", "")
    return name or os.uname().nodename.split(".")[0]


class _Rank:
    __slots__ = ("forwarded", "has_log", "log_inode", "log_offset", "seen", "sent_until", "step")

    def __init__(self) -> None:
        self.step = -1
        self.seen = 0.0  # when the rank reached its step (epoch seconds, its file's mtime)
        self.forwarded = -1  # the newest step written to the history (ranks without a log)
        self.has_log = False
        self.log_offset = 0
        self.log_inode = 0
        self.sent_until = 0.0  # the time of the newest line of its log sent to the history


class _SignalWake:
    """Waits that a signal ends at once (the job ends sooner when its agents stop sooner):
    the signal's wakeup byte makes a pipe readable. Main thread only, like signal handlers."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        for fd in (self.read_fd, self.write_fd):
            os.set_blocking(fd, False)
        self.previous = signal.set_wakeup_fd(self.write_fd)

    def wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        readable, _, _ = select.select([self.read_fd], [], [], seconds)
        if readable:
            with contextlib.suppress(OSError):
                os.read(self.read_fd, 512)

    def close(self) -> None:
        signal.set_wakeup_fd(self.previous)
        for fd in (self.read_fd, self.write_fd):
            os.close(fd)


class Agent:
    """The agent of one node (see the module docs)."""

    def __init__(
        self,
        local: str,
        shared: str,
        every: float,
        gpu_every: int = 0,
        gpu_query: str = "",
        gpu_dir: str = "",
        since: float | None = None,
        watch: str = "",
        chain_log: str = "",
        warn: Sequence[str] = (),
    ) -> None:
        self.local = local
        self.shared = shared
        self.every = every
        self.gpu_every = gpu_every
        self.gpu_query = gpu_query
        self.gpu_dir = gpu_dir
        self.node = node_name()
        self.job = os.environ.get("SLURM_JOB_ID", "0")
        self.ranks: dict[int, _Rank] = {}
        #: Reports older than this (epoch seconds) were left by an earlier run on the node.
        self.since = time.time() if since is None else since
        self.stopping = False
        self.next_gpu = 0.0
        self.sampler: threading.Thread | None = None
        #: The deputy's: the batch host it watches ("": not the deputy), the chain's event log.
        self.watch = watch
        self.chain_log = chain_log
        self.batch_lost = False
        self.slurm = Slurm()
        self.fault_logged = False
        #: The signals the warning may be delivered on (:func:`.deliver.candidates`).
        self.warn_signals = list(warn)
        self.warn_due = False
        #: The processes the warning went to in this run, with the signal: each gets it once.
        self.warned: list[tuple[int, str]] = []
        #: When to deliver the warning again (monotonic; 0: not): some of the program's
        #: processes listened for none of the signals (:data:`RETRY_S`).
        self.retry_at = 0.0
        self.deaf = -1

    def run(self) -> int:
        """Cycle until SIGHUP or SIGINT (what the supervisor sends when the step has ended) or
        SIGTERM (Slurm ending the job: a cancel, the time limit, a preemption's kill, a node
        failure), then write once more and go at once: a process that outlives SIGTERM holds
        the job in COMPLETING for KillWait, and the job that continues the chain waits for it.
        SIGUSR1 asks it to deliver the warning on its node (:meth:`warn`); SIGUSR2 is ignored."""
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._stop)
        signal.signal(getattr(signal, "SIG" + WARN_SIGNAL), self._warn)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        old = os.umask(0o077)
        wake = _SignalWake()
        try:
            os.makedirs(self.local, exist_ok=True)
            while not self.stopping:
                self.cycle()
                deadline = time.monotonic() + self.every
                while not self.stopping and time.monotonic() < deadline:
                    if self.warn_due or 0 < self.retry_at <= time.monotonic():
                        self.warn()
                    self.sample_gpus()
                    until = min(deadline, self.next_gpu, self.retry_at or deadline)
                    wake.wait(until - time.monotonic())
            self.cycle()  # once more; no new GPU sample, the agent ends now
        finally:
            wake.close()
            os.umask(old)
            shutil.rmtree(self.local, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.local))  # the last node on this host
        return 0

    def _stop(self, _signum: int, _frame: object) -> None:
        self.stopping = True

    def _warn(self, _signum: int, _frame: object) -> None:
        self.warn_due = True

    def warn(self) -> None:
        """Deliver the warning to the program's processes on this node (:mod:`.deliver`), and
        say what was done in :func:`warned_file`, replaced atomically. While some of them
        listen for none of the signals (a program still starting when the warning comes), look
        again every :data:`RETRY_S` seconds: each gets it once it listens."""
        self.warn_due = False
        done = deliver.deliver(
            os.environ.get(deliver.ENV_TOKEN, ""),
            self.warn_signals,
            node=self.node,
            folder=self.local,
            warned={pid for pid, _name in self.warned},
        )
        self.warned += done.sent
        self.retry_at = time.monotonic() + RETRY_S if done.deaf else 0.0
        if done.sent or done.deaf != self.deaf:  # a write per change, not per look
            write_warned(self.shared, self.node, deliver.Delivery(self.warned, done.deaf))
        self.deaf = done.deaf

    def cycle(self) -> None:
        """Read the node's reports once; write the summary and the history."""
        now_wall = time.time()
        history: list[str] = []
        try:
            entries = list(os.scandir(self.local))
        except OSError:
            entries = []
        for entry in entries:
            name = entry.name
            if not name.startswith("rank-"):
                continue
            if name.endswith(".log"):
                number = name[len("rank-") : -len(".log")]
                if number.isdecimal():
                    history += self._forward_log(int(number), entry)
                continue
            number = name[len("rank-") :]
            if number.isdecimal():
                self._read_step(int(number), entry)
        for rank, state in sorted(self.ranks.items()):
            # A rank without a log of its own: its newest step, once per cycle.
            if not state.has_log and state.step > state.forwarded:
                history.append(f"{rank} {state.seen:.3f} {state.step} {self.node}\n")
                state.forwarded = state.step
        self._write_summary(now_wall)
        if history:
            self._append_history(history)
        if self.watch and not self.batch_lost and not self.stopping:
            self.watch_batch_host()

    def watch_batch_host(self) -> None:
        """The deputy: when Slurm shows the job running without its batch host, log the fault
        and cancel the job, so that its standby takes over; a job without a standby (an array
        task, a chain out of node failure budget) goes back to Slurm's requeue instead, and is
        cancelled only where Slurm refuses that (see the module docs)."""
        words = " ".join(self.slurm.queue_value(self.job, "%T %N")).split()
        if len(words) != 2 or words[0] != "RUNNING":
            return
        nodes = self.slurm.hostnames(words[1])
        if not nodes or self.watch in nodes:
            return
        log = self.event_log()
        standby = log.read().standby_for(log.job_id) if log is not None else None
        if not standby and self.slurm.requeue(self.job):
            self.batch_lost = True
            return
        if log is not None and not self.fault_logged:
            self.fault_logged = True
            evidence = f"batch host {self.watch} left job {log.job_id} (seen from {self.node})"
            with contextlib.suppress(OSError):
                log.append(
                    "fault",
                    NODE_FAILURE,
                    f"node={self.watch} job={log.job_id} evidence={evidence}",
                    node=self.watch,
                    stopped_job=log.job_id,
                    evidence=evidence,
                    seen_by=self.node,
                )
                if not standby:
                    log.append("end", "fail", f"batch host {self.watch} lost; no standby")
        # Once it went through: a busy controller is asked again next cycle.
        self.batch_lost = self.slurm.cancel(self.job)

    def event_log(self) -> EventLog | None:
        """The chain's event log, as this job writes it (None: not known)."""
        if not self.chain_log:
            return None
        array = os.environ.get("SLURM_ARRAY_JOB_ID", "")
        task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
        job_id = f"{array}_{task}" if array and task else self.job
        restart = os.environ.get("SLURM_RESTART_COUNT", "0")
        return EventLog(self.chain_log, job_id, int(restart) if restart.isdecimal() else 0)

    def sample_gpus(self) -> None:
        """Start a GPU sample when one is due (every ``gpu_every`` s, on its own schedule: the
        agent's cycle may be longer)."""
        now = time.monotonic()
        if not self.gpu_every:
            self.next_gpu = float("inf")
        elif now >= self.next_gpu:
            self.next_gpu = now + self.gpu_every
            # In a thread of its own: nvidia-smi can hang on a sick GPU, the agent must not.
            if self.sampler is None or not self.sampler.is_alive():
                self.sampler = threading.Thread(target=self._sample_gpus, daemon=True)
                self.sampler.start()

    def _read_step(self, rank: int, entry: os.DirEntry[str]) -> None:
        """A rank's newest step, dated by its file (replaced at every step): when the rank
        reached it, whatever the agents' phases, so that ranks stopped at the same moment on
        different nodes are seen tied."""
        try:
            changed = entry.stat().st_mtime
            if changed < self.since - 1:
                return  # left by an earlier run on this node
            with open(entry.path, encoding="utf-8", errors="replace") as handle:
                words = handle.readline().split()
        except OSError:
            return
        if not words or not words[0].isdecimal():
            return
        state = self.ranks.setdefault(rank, _Rank())
        step = int(words[0])
        if step != state.step:
            state.step, state.seen = step, changed

    def _forward_log(self, rank: int, entry: os.DirEntry[str]) -> list[str]:
        """What a rank logged since the last cycle (its own log, kept by ProgressWriter), with
        the rank in front, for the history: every step and every checkpoint, in one append per
        cycle. A log the writer thinned (a new file) is read again from the last line sent."""
        state = self.ranks.setdefault(rank, _Rank())
        state.has_log = True
        try:
            info = entry.stat()
            if info.st_ino != state.log_inode or info.st_size < state.log_offset:
                state.log_inode, state.log_offset = info.st_ino, 0  # new, or thinned
            with open(entry.path, "rb") as handle:
                handle.seek(state.log_offset)
                data = handle.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        state.log_offset += end
        lines = []
        for raw in data[:end].decode("utf-8", "replace").splitlines():
            words = raw.split()
            try:
                when = float(words[0]) if len(words) >= 2 else None
            except ValueError:
                when = None
            if when is None or when <= state.sent_until:
                continue
            state.sent_until = when
            lines.append(f"{rank} {' '.join(words[:4])}\n")
        return lines

    def _write_summary(self, now_wall: float) -> None:
        lines = [f"{now_wall:.3f} {self.node} {self.job}\n"]
        for rank, state in sorted(self.ranks.items()):
            if state.step >= 0:
                lines.append(f"{rank} {state.step} {max(0.0, now_wall - state.seen):.1f}\n")
        path = os.path.join(self.shared, f"node-{self.node}")
        tmp = os.path.join(self.shared, f".node-{self.node}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write("".join(lines))
            os.replace(tmp, path)
        except OSError:
            pass

    def _append_history(self, lines: list[str]) -> None:
        path = os.path.join(self.shared, f"node-{self.node}.log")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, "".join(lines).encode())
            finally:
                os.close(fd)
            if os.path.getsize(path) > LOG_LIMIT:
                self._thin(path)
        except OSError:
            pass

    def _thin(self, path: str) -> None:
        """Keep every other step line of each rank (its first and last kept) and every save."""
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
        steps: dict[str, list[int]] = {}
        for index, line in enumerate(lines):
            words = line.split()
            if len(words) >= 3 and words[2] != "save":
                steps.setdefault(words[0], []).append(index)
        keep = set()
        for indexes in steps.values():
            keep.update(indexes[::2])
            keep.add(indexes[-1])
        kept = [x for i, x in enumerate(lines) if i in keep or " save " in x]
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write("".join(x + "\n" for x in kept))
        os.replace(tmp, path)

    def _sample_gpus(self) -> None:
        """One ``nvidia-smi --query-gpu`` sample appended to ``<gpu dir>/<node>.csv``."""
        if not self.gpu_query or not self.gpu_dir or not shutil.which("nvidia-smi"):
            return
        argv = ["nvidia-smi", "--query-gpu=" + self.gpu_query, "--format=csv,noheader,nounits"]
        try:
            out = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=30
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        if not out:
            return
        path = os.path.join(self.gpu_dir, f"{self.node}.csv")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, out)
            finally:
                os.close(fd)
        except OSError:
            pass


class Summary(NamedTuple):
    node: str
    job: str
    age: float  #: seconds since the agent wrote it (infinite when unreadable)
    ranks: dict[int, tuple[int, float]]  #: rank -> (step, seconds since it changed, as of now)


def read_summary(text: str, now: float) -> Summary:
    """A node summary as of ``now`` (epoch seconds); malformed lines are skipped."""
    lines = text.splitlines()
    head = lines[0].split() if lines else []
    try:
        written, node, job = float(head[0]), head[1], head[2]
    except (IndexError, ValueError):
        return Summary("", "", float("inf"), {})
    age = max(0.0, now - written)
    ranks: dict[int, tuple[int, float]] = {}
    for line in lines[1:]:
        words = line.split()
        if len(words) == 3 and words[0].isdecimal() and words[1].isdecimal():
            try:
                ranks[int(words[0])] = (int(words[1]), float(words[2]) + age)
            except ValueError:
                continue
    return Summary(node, job, age, ranks)


def split_history(text: str) -> dict[int, str]:
    """A node history as each rank's own log text (rank -> the lines without the rank, in the
    format of a rank's log, :mod:`hpcjobs.runtime.progress`)."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        rank, _, rest = line.partition(" ")
        if rank.isdecimal() and rest:
            out.setdefault(int(rank), []).append(rest)
    return {rank: "\n".join(lines) + "\n" for rank, lines in out.items()}


def local_dir(node: str = "", base: str = "") -> str:
    """A node's progress folder, ``<node tmp>/<node>`` (``base`` defaults to
    ``$HPCJOBS_NODE_TMP``; the rank wrapper in the batch script sets ``HPCJOBS_PROGRESS_DIR``
    to the same)."""
    return os.path.join(base or os.environ.get(ENV_NODE_TMP, "/tmp"), node or node_name())


def interval(stall_timeout: int) -> float:
    """Seconds between an agent's cycles: a quarter of the stall timeout, 1 to 5 s."""
    return 5.0 if stall_timeout <= 0 else max(1.0, min(5.0, stall_timeout / 4))
