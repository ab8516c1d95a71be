"""The job's supervisor: it runs on the batch host, in place of the batch shell, and owns what
happens between the job's start and its end (docs/requeue.md, "The supervisor").

- **begin**: the chain this run belongs to, the checkpoint folder's owner, how the run before
  ended when nobody could say (a standby's takeover, Slurm's own requeue), the budgets, the
  hand-off off excluded nodes, and a standby for this run;
- **run**: launch the step, forward the warning signal and SIGTERM to it, watch for a stall;
- **finish**: classify how the run ended (:mod:`.decide`), and finish, fail, or continue the
  chain from its last checkpoint, with a standby or a new job, without the nodes at fault;
  or, in a job with spare nodes, run again at once on the job's remaining nodes.

Everything it decides is logged in the chain's event log (:mod:`.eventlog`). Only the standard
library: the job runs where hpcjobs may not be installed.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypedDict

from . import decide, deliver, frameworks, names, requeuerequest
from .agent import (
    AGENT_STEP,
    ENV_NODE_TMP,
    WARN_SIGNAL,
    local_dir,
    node_name,
    warned_file,
    write_warned,
)
from .agent import interval as agent_interval
from .causes import (
    APPLICATION,
    CANCELLED,
    FINISHED,
    GROW,
    INFRASTRUCTURE,
    NODE_FAILURE,
    PREEMPTION,
    STALL,
)
from .eventlog import CONTINUED, IN_JOB, SLURM, SLURM_FALLBACK, TOOK_OVER, Chain, EventLog
from .grow import GrowWatch
from .policy import Policy
from .signatures import all_patterns
from .sigsafe import to_stderr
from .slurm import Slurm, field, line_value
from .srunlog import failed_hostlists, first_failure, has_node_failure
from .stall import StallWatch
from .successor import ENV_GROW_FOR, ENV_STANDBY_FOR, successor_args, successor_env
from .windup import newest_checkpoint, progress_step

#: At most this much of the job's stderr is read to classify a run's end.
STDERR_LIMIT = 16 * 1024 * 1024


#: Node states ('sinfo %T', lower case) of a node that failed: it is blamed for a run's end
#: and ruled out of the next run inside a job with spare nodes: down, drained, failing or
#: failed. A node being drained (``draining``) still runs what it has. A node only not
#: responding (``allocated*``) has not failed: Slurm declares it DOWN after SlurmdTimeout,
#: and a busy node misses a ping now and then (at 128 nodes, a hundred at once while a
#: thousand ranks started: counting them blamed them all).
NODE_FAILED = re.compile(r"down|drained|fail")

#: What each node runs for the pre-flight check: the site's check (``$1``), at most ``$2`` s,
#: then one line for :func:`.decide.preflight_failures`, whatever the check did (``$0`` is
#: the line's first word).
PREFLIGHT_SH = (
    'out=$(timeout -k 5 "$2" bash -c "$1" 2>&1 </dev/null); rc=$?\n'
    "last=$(printf '%s\\n' \"$out\" | tr -d '\\r' | grep -v '^[[:space:]]*$' | tail -n 1"
    " | cut -c1-200)\n"
    'printf \'%s %s %s %s\\n\' "$0" "${SLURMD_NODENAME:-$(hostname -s)}" "$rc" "$last"\n'
)

#: How long a grower waits for the run it grows to hand over, beyond the warning lead time
#: that run's program gets to checkpoint.
GROW_WAIT_MARGIN_S = 60

#: How long the agents get to write once more and clean up (an agent on a dead node never
#: answers: its srun is killed then).
AGENTS_STOP_S = 5
#: How often the agents are asked again to end while they have not: through Slurm (a scancel
#: each time), and to the one agent of a job of one node (a signal, nothing more).
AGENTS_RESEND_S = 1.0
LOCAL_AGENT_RESEND_S = 0.1

#: How long the supervisor waits for the launcher after a SIGTERM before it decides anyway.
#: Slurm kills the whole job KillWait (30 s by default) after its SIGTERM, and a step of many
#: nodes can take longer than that to end: the decision must be logged before.
TERM_WAIT_S = 3

#: How often the supervisor looks for a warning to deliver and a requeue request while the
#: program runs (one stat of the request file each time, on the batch host only).
WAIT_LOOK_S = 0.2
#: How long a step gets to end after the program's own requeue request before it is killed.
REQUEST_GRACE_S = 30

#: How long the supervisor waits for the job's steps to end before it releases nodes anyway
#: (a step of a hung node ends only once Slurm gives up on the node). A killed step of 1,024
#: processes on 128 nodes ended within 2 s.
STEPS_END_S = 45

#: A job step's id as squeue prints it (``<job>.<step>``, an array task's ``<array>_<task>``
#: first): the batch and extern steps are not among them.
STEP_ID = re.compile(r"[0-9_]+\.[0-9]+")


class Stop(Exception):
    """The chain must not run the program in this job: exit with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _private_mkdir(path: str) -> None:
    old = os.umask(0o077)
    try:
        os.makedirs(path, exist_ok=True)
    finally:
        os.umask(old)


def _touch_private(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)


def _epoch(text: str) -> float | None:
    """Slurm's local ``YYYY-MM-DDTHH:MM:SS`` as epoch seconds (None for Unknown, None, "")."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def _resize_settings(path: str) -> dict[str, str | None]:
    """The settings in Slurm's resize script (``export NAME="value"``, ``unset NAME``;
    None: unset), {} when there is none."""
    settings: dict[str, str | None] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read(64 * 1024).splitlines()
    except OSError:
        return settings
    for line in lines:
        found = re.fullmatch(r'\s*export\s+(SLURM_[A-Z_]+)="?([^"]*)"?\s*', line)
        if found:
            settings[found.group(1)] = found.group(2)
            continue
        found = re.fullmatch(r"\s*unset\s+(SLURM_[A-Z_]+)\s*", line)
        if found:
            settings[found.group(1)] = None
    return settings


class Position(TypedDict):
    """Where the program is when a run ends: the newest complete checkpoint step (-1: none;
    None: one in a framework's layout whose step is not known) and the step it reached (-1:
    not known), as the ``requeue`` event's fields."""

    checkpoint: int | None
    progress: int


class Supervisor:
    """One run of a chain, supervised (see the module docs)."""

    def __init__(
        self,
        policy: Policy,
        script: str,
        launch: Sequence[str],
        slurm: Slurm | None = None,
        env: dict[str, str] | None = None,
        program: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy
        #: How the waits for Slurm tell the time and pass it (tests give a fake clock).
        self.clock = clock
        self.sleep = sleep
        #: How to run this program on any node of the job (the agents are started with it).
        self.program = list(program) or ["python3", "-m", "hpcjobs.runtime.supervisor"]
        self.script = script
        self.launch_argv = list(launch)
        self.env = os.environ if env is None else env
        self.slurm = slurm or Slurm(self.env)
        self.job = self.env.get("SLURM_JOB_ID", "0")
        task = self.env.get("SLURM_ARRAY_TASK_ID", "")
        array = self.env.get("SLURM_ARRAY_JOB_ID", "")
        self.task = task
        self.self_id = f"{array}_{task}" if array and task else self.job
        self.restart = int(self.env.get("SLURM_RESTART_COUNT", "0") or 0)
        self.output_dir = names.output_dir(self.env) or os.getcwd()
        self.root = self.env.get("HPCJOBS_CHAIN_ROOT", "")
        self.standby_for = self.env.get(ENV_STANDBY_FOR, "")
        #: A grower: the job whose run below its full size it takes over from.
        self.grow_for = self.env.get(ENV_GROW_FOR, "")
        self.ckpt_dir = self.env.get("HPCJOBS_CHECKPOINT_DIR", "")
        self.progress_dir = ""
        self.capture_dir = ""
        self.err_file = ""
        self.err_offset = 0
        self.standby = ""
        self.grower = ""  #: this run's grower (an elastic job below its full size)
        self.grow_watch: GrowWatch | None = None
        #: The grow watch may replace the grower from its thread until the run is finishing.
        self.grow_lock = threading.Lock()
        self.finishing = False
        self.requeue_off = False
        self.claimed = ""
        self.signal_seen = ""
        self.signal_logged = False
        #: The warning came and is to be delivered to the program (:meth:`warn_program`).
        self.warn_due = False
        #: SIGTERM was passed on to the program (its end, from Slurm, or a requeue request).
        self.term_sent = False
        #: The file the program's own ``scontrol requeue`` writes (:mod:`.requeuerequest`),
        #: and when the supervisor saw it (monotonic; 0: not yet).
        self.request_file = ""
        self.requested_at = 0.0
        self.request_killed = False
        #: Why a run whose program exited 0 was taken as finished or not
        #: (:func:`.decide.exit_rule`).
        self.end_rule = ""
        #: When SIGTERM came (monotonic; 0: not yet).
        self.term_at = 0.0
        self.waiting = False
        self.child: subprocess.Popen[bytes] | None = None
        self.agents: subprocess.Popen[bytes] | None = None
        self.agents_step = False
        #: Asks the agents to end while the supervisor decides (see :meth:`finish`).
        self.agents_asking: threading.Thread | None = None
        self.agents_asked = False  # and whether it reached them
        self.watch: StallWatch | None = None
        self.batch = self.env.get("SLURMD_NODENAME", "")
        #: With spare nodes: the job's nodes, and those the current run takes (the batch host
        #: first). Empty otherwise: the run takes all of the job's nodes, as srun picks them.
        self.allocation: list[str] = []
        self.step: list[str] = []

    # ---- small helpers ------------------------------------------------------------------------

    def log(self, message: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        to_stderr(f"{stamp} hpcjobs[{self.job}]: {message}\n")

    @property
    def events(self) -> EventLog:
        path = os.path.join(self.output_dir, names.chain_log(self.root or self.self_id))
        return EventLog(path, self.self_id, self.restart)

    @property
    def chain(self) -> Chain:
        """The chain's events as the log has them now."""
        return self.events.read()

    def event(
        self, event: str, cause: str, detail: str, when: float | None = None, **data: object
    ) -> None:
        try:
            self.events.append(event, cause, detail, when, **data)
        except OSError as exc:
            self.log(f"could not write the event log: {exc}")

    def latest_step(self) -> int:
        """The newest complete checkpoint in hpcjobs' own layout (-1: none)."""
        return newest_checkpoint(self.ckpt_dir).step

    def newest(self) -> tuple[int | None, frameworks.Found | None]:
        """The newest checkpoint the next run resumes from: hpcjobs' own (its step), else the
        newest in a framework's layout in the checkpoint folder or the job's working folder
        (its step, None when unknown, and where it is); ``(-1, None)``: none at all."""
        step = self.latest_step()
        if step >= 0:
            return step, None
        found = frameworks.newest([self.ckpt_dir, os.getcwd()])
        return (-1, None) if found is None else (found.step, found)

    def progress(self) -> int:
        return progress_step(self.ckpt_dir)

    def position(self) -> Position:
        """Where the program is: the ``checkpoint`` and ``progress`` fields of a requeue."""
        return Position(checkpoint=self.newest()[0], progress=self.progress())

    def done_file(self) -> str:
        return os.path.join(self.output_dir, names.done_marker(self.root))

    def is_done(self) -> bool:
        return os.path.isfile(os.path.join(self.ckpt_dir, "DONE")) or os.path.isfile(
            self.done_file()
        )

    def budget(self, cause: str) -> int:
        return self.policy.budgets.get(cause, 0)

    # ---- the run ------------------------------------------------------------------------------

    def main(self) -> int:
        for name in self.policy.forward:
            signal.signal(getattr(signal, "SIG" + name), self._on_signal)
        try:
            try:
                self.begin()
            except Stop as stop:
                return stop.code
            self.launch()
            # While the program starts up: it never waits for sbatch. A batch host lost before
            # the standby is there falls back to Slurm's requeue (Requeue=0 comes with it).
            self.standby_submit()
            self.grow_submit()
            code = self.finish(self.wait())
            while code is None:  # a fault this job recovers from on its remaining nodes
                self.relaunch()
                code = self.finish(self.wait())
            self.launcher_ended()
            return code
        except Exception as exc:
            return self.crashed(exc)

    def crashed(self, exc: BaseException) -> int:
        """The supervisor itself failed: say so in the event log, let nothing of the chain
        run after this job (its standby would blame this batch host), stop the step."""
        what = f"supervisor error: {type(exc).__name__}: {exc}"
        self.log(what)
        with self.grow_lock:
            self.finishing = True  # no new grower from the watch
        if self.grow_watch is not None:
            self.grow_watch.close()
        if self.grow_for and not self.chain.continued_as(self.self_id):
            return 1  # a grower that never took over: the chain goes on without it
        self.event("end", "fail", what)
        for action in (self.standby_cancel, self.grower_cancel, self.stop_agents):
            with contextlib.suppress(Exception):
                action()
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(OSError):
                self.child.kill()
        return 1

    def _on_signal(self, signum: int, _frame: object) -> None:
        """Records the signal. SIGTERM goes on to the launcher at once; the warning is
        delivered by the main thread to the program's processes that listen for it
        (:mod:`.deliver`), never to the whole step."""
        name = signal.Signals(signum).name[3:]
        if name == "TERM" and self.policy.signal != "TERM":
            # Slurm ending the job (not the warning: a site may warn with TERM).
            self.term_at = self.term_at or time.monotonic()
            self.signal_seen = self.signal_seen or "term"
        else:
            self.signal_seen = "warning"
        child = self.child
        if child is not None and self.waiting and not self.signal_logged:
            # When the first signal came (hpcjobs report: time from the warning to the end).
            self.signal_logged = True
            self.event("signal", self.signal_seen, "SIG" + name, signal="SIG" + name)
        if name != "TERM":
            to_stderr(
                f"hpcjobs: SIG{name} received (the warning): delivering it to the program's "
                "processes that listen for it\n"
            )
            self.warn_due = True
            return
        if child is not None:
            to_stderr(
                f"hpcjobs: SIG{name} received, forwarding it to the launcher (pid {child.pid})\n"
            )
            self.term_sent = True
            with contextlib.suppress(OSError):
                child.send_signal(signum)

    def warn_program(self) -> None:
        """Have the warning delivered to the program on every node of the run: each node's
        agent picks, per process, the signal it listens for (:mod:`.deliver`). Without agents,
        to the processes on this node."""
        self.warn_due = False
        candidates = deliver.candidates(self.policy.signal)
        if self.signal_agents(WARN_SIGNAL):
            listed = " or ".join("SIG" + name for name in candidates)
            self.log(
                f"warning: each node's agent delivers it to the processes that listen ({listed})"
            )
            return
        done = deliver.deliver(self.env.get(deliver.ENV_TOKEN, ""), candidates, node=node_name())
        if self.progress_dir:
            write_warned(self.progress_dir, node_name(), done)
        self.log(f"warning: {done.summary()} on this node (no node agents)")

    def warned(self) -> tuple[int, list[str]]:
        """What the agents say they delivered: the processes signalled in all, and each node's
        summary. O(nodes) small reads, once per run."""
        count, lines = 0, list[str]()
        if not self.progress_dir:
            return count, lines
        prefix = warned_file("")
        for path in sorted(glob.glob(os.path.join(glob.escape(self.progress_dir), prefix + "*"))):
            with contextlib.suppress(OSError, ValueError), open(path, encoding="utf-8") as handle:
                sent, _, summary = handle.readline().strip().partition(" ")
                count += int(sent)
                lines.append(f"{os.path.basename(path)[len(prefix) :]}: {summary}")
        return count, lines

    def kill_late_request(self) -> None:
        """Kill the step once it has outlived the program's requeue request by
        :data:`REQUEST_GRACE_S`."""
        if time.monotonic() - self.requested_at > REQUEST_GRACE_S:
            self.log(
                f"the step is still running {REQUEST_GRACE_S} s after the requeue request; "
                "killing it"
            )
            self.request_killed = True
            self.kill_steps()

    def requested(self) -> bool:
        """Whether the program asked for its own requeue (:mod:`.requeuerequest`); the first
        time it is seen, SIGTERM goes to the launcher: the run ends, the chain goes on."""
        if not self.requested_at and self.request_file and os.path.exists(self.request_file):
            self.requested_at = time.monotonic()
            self.log(
                "the program asked Slurm to requeue the job (scontrol requeue): ending this run; "
                "the chain continues from the program's checkpoint"
            )
            child = self.child
            if child is not None and child.poll() is None:
                self.term_sent = True
                if self.launch_argv[:1] == ["srun"]:
                    # To the step's processes, not to srun: srun ends a step it is sent
                    # SIGTERM by killing it, and reports its tasks killed.
                    self.signal_steps("TERM")
                else:
                    with contextlib.suppress(OSError):
                        child.send_signal(signal.SIGTERM)
        return bool(self.requested_at)

    def sized(self, argv: list[str]) -> list[str]:
        """The launch command of a job that runs again inside itself: on the run's nodes
        (``--nodelist``), and, when they are fewer than the policy's (an elastic size), as many
        as it has. Without a run's nodes (they could not be read), on as many as the job has."""
        if argv[:1] != ["srun"]:
            return argv
        full = self.policy.nodes
        count = len(self.step)
        if not count:
            held = self.env.get("SLURM_JOB_NUM_NODES", "")
            count = min(full, int(held)) if held.isdecimal() and full else full
        if full and count and count != full:
            sized = decide.sized_launch(argv, full, count)
            if sized is None:
                self.log(
                    f"the launch command cannot be sized to {count} nodes (srun has no "
                    f"--nodes={full} among its options); it runs as written"
                )
            else:
                argv = sized
        if self.step:
            argv = [argv[0], "--nodelist=" + ",".join(self.step), *argv[1:]]
        return argv

    def launch(self) -> None:
        argv, env = list(self.launch_argv), self.env
        # The program's own 'scontrol requeue' is a request to this supervisor.
        self.request_file = os.path.join(self.progress_dir, f"requeue-{self.self_id}")
        with contextlib.suppress(OSError):
            os.unlink(self.request_file)
        self.requested_at = 0.0
        self.request_killed = False
        try:
            shim = requeuerequest.install(os.path.join(self.output_dir, names.SUPPORT_DIR))
            env = requeuerequest.step_env(dict(env), shim, self.request_file)
        except OSError as exc:
            self.log(f"could not write the scontrol shim ({exc}); a program's own requeue fails")
        if self.policy.in_job:
            # srun takes SLURM_NTASKS (the job's tasks, spares included) for --ntasks: without
            # it, a run's tasks are its --nodes times --ntasks-per-node.
            env = {k: v for k, v in env.items() if k not in ("SLURM_NTASKS", "SLURM_NPROCS")}
            argv = self.sized(argv)
        self.child = subprocess.Popen(argv, env=env)
        self.waiting = True  # a signal from here on is the program's, and is logged
        if self.warn_due:
            self.warn_program()  # the warning came while the run began
        if self.policy.stall_timeout > 0:
            self.watch = StallWatch(
                self.progress_dir,
                self.job,
                self.policy.stall_timeout,
                agent_interval(self.policy.stall_timeout),
                self.policy.stall_grace,
                self.policy.signal,
                self.child,
                self.log,
                self.kill_steps,
                self.ckpt_dir,
                self.warn_program,
            )
            self.watch.start()
        self.watch_grower()

    def wait(self) -> int:
        """The launcher's exit code; once Slurm's SIGTERM came, at most :data:`TERM_WAIT_S`
        later (128 + SIGTERM while the launcher still winds down): the decision is logged
        before KillWait runs out, and :meth:`launcher_ended` waits for the rest. Not while the
        run hands over to a grower: the handover's checkpoint comes first."""
        assert self.child is not None
        self.waiting = True
        while True:
            try:
                rc = self.child.wait(timeout=WAIT_LOOK_S)
                break
            except subprocess.TimeoutExpired:
                if self.warn_due:
                    self.warn_program()
                if self.requested() and not self.request_killed:
                    self.kill_late_request()
                moving = self.grow_watch is not None and self.grow_watch.started.is_set()
                if self.term_at and not moving and time.monotonic() - self.term_at >= TERM_WAIT_S:
                    self.log(
                        f"the launcher is still ending {TERM_WAIT_S} s after SIGTERM; deciding "
                        "now (Slurm ends the job)"
                    )
                    rc = -signal.SIGTERM
                    break
        self.waiting = False
        return 128 - rc if rc < 0 else rc

    def launcher_ended(self) -> None:
        """Wait for a launcher still ending after the decision (:meth:`wait`): the job, and
        so the dependency of the job that continues the chain, ends only with it, and the
        program keeps its time to finish a checkpoint until Slurm's KillWait."""
        if self.child is not None:
            self.child.wait()

    # ---- begin --------------------------------------------------------------------------------

    def begin(self) -> None:
        """Before the program starts. Raises :class:`Stop` when it must not."""
        _private_mkdir(self.output_dir)
        self.private_logs()
        # A continuation carries its chain's root; anything else starts a chain of its own.
        if self.root and not self.chain.names_job(
            self.env.get("SLURM_ARRAY_JOB_ID") or self.job or "x"
        ):
            self.root = self.self_id
            self.standby_for = self.grow_for = ""
            self.env.pop(ENV_STANDBY_FOR, None)
            self.env.pop(ENV_GROW_FOR, None)
        self.root = self.root or self.self_id
        self.env["HPCJOBS_CHAIN_ROOT"] = self.root
        # The ranks report their progress on node-local storage (hpcjobs.runtime.progress);
        # the node agents summarize it into the chain's progress folder, next to the event log.
        self.progress_dir = os.path.join(self.output_dir, names.progress_dir(self.root))
        if self.root == self.self_id and self.restart == 0:
            self.set_aside_stale()
        tmp = self.env.get("TMPDIR") or "/tmp"
        self.env[ENV_NODE_TMP] = os.path.join(tmp, f"hpcjobs-{self.self_id}")
        self.env["HPCJOBS_PROGRESS_DIR"] = local_dir(node_name(), self.env[ENV_NODE_TMP])
        with contextlib.suppress(OSError):
            _private_mkdir(self.progress_dir)
        if self.grow_for and not self.chain.continued_as(self.self_id):
            self.after_grower_start()  # a grower: only once the run it grows hands over
        self.check_checkpoint_dir()
        if self.standby_for and self.restart == 0 and not self.is_done():
            self.after_standby_release()
        if self.restart > 0 and not self.is_done():
            self.after_slurm_requeue()
        # Runs before this one: starts in the log, or Slurm's own count if that is higher.
        count = max(self.chain.count("start"), self.restart)
        self.env["HPCJOBS_RESTART_COUNT"] = str(count)
        if self.is_done():
            self.event("end", "finish", "done marker present")
            self.log("the job already finished (done marker present); nothing to do")
            self.chain_ends()
            raise Stop(0)
        if self.policy.in_job:
            failed = self.preflight()
            if not self.take_nodes(failed) and failed:
                self.too_few_healthy(failed)
        self.handoff_if_excluded()
        self.faults_begin()
        self.start_agents()  # from here on every run ends in finish(), which stops them
        self.announce(count)

    def announce(self, count: int) -> None:
        """Log that run ``count`` of the chain begins (its ``start`` event)."""
        if count > 0 and self.latest_step() < 0:
            adopted = frameworks.adopt_lightning(os.getcwd())
            if adopted:
                self.log(
                    f"Lightning's newest ModelCheckpoint is newer than its HPC checkpoints: "
                    f"linked as {adopted}, which Lightning resumes from"
                )
        step, found = self.newest()
        nodelist = ",".join(self.step) or self.env.get("SLURM_JOB_NODELIST") or "?"
        batch = self.batch or "?"
        held: dict[str, int] = {"held": len(self.allocation)} if self.step else {}
        if self.step and self.policy.elastic:
            held["full"] = self.policy.nodes  # an elastic size: report counts a smaller run
        where: dict[str, object] = {}
        if found is not None:
            where = {"checkpoint_kind": found.kind, "checkpoint_path": found.path}
        self.event(
            "start",
            "-",
            f"checkpoint={'?' if step is None else step} nodes={nodelist} batch={batch}",
            None,
            checkpoint=step,
            nodelist=nodelist,
            batch=batch,
            **held,
            **where,
        )
        # The marker 'hpcjobs logs --restart N' splits the log on.
        sys.stdout.write(f"hpcjobs: run {count} of job {self.root}\n")
        sys.stdout.flush()
        if found is not None:
            self.log(f"run {count} of chain {self.root}; newest checkpoint: {found.describe()}")
        elif step is not None and step >= 0:
            self.log(f"run {count} of chain {self.root}; resuming from checkpoint step {step}")
        else:
            self.log(
                f"run {count} of chain {self.root}; no checkpoint yet (none in hpcjobs' layout "
                "in the checkpoint folder, nor in Lightning's, the HF Trainer's, Accelerate's or "
                "torch.distributed.checkpoint's there or in the working folder)"
            )

    def private_logs(self) -> None:
        """Slurm creates the job's output files with the job's umask: make them private, as
        everything else hpcjobs writes. Notes the job's stderr file (srun reports its tasks'
        ends there); without --error it is the stdout file (Slurm 26.05 prints an empty
        StdErr= then)."""
        info = self.slurm.show_job(self.job)
        if not info:
            return
        out, err = line_value(info, "StdOut"), line_value(info, "StdErr")
        for path in (out, err):
            try:
                if path and os.path.isfile(path) and os.stat(path).st_uid == os.getuid():
                    os.chmod(path, os.stat(path).st_mode & 0o700)
            except OSError:
                pass
        self.err_file = err if err and err != "(null)" else out

    def set_aside_stale(self) -> None:
        """The first run of a chain finds no log of its own: one already there belongs to an
        earlier job that had the same id (ids repeat when a cluster's job counter is reset)."""
        stamp = str(int(time.time()))
        log = self.events.path
        for path in (log, self.progress_dir, self.done_file()):
            if os.path.lexists(path):
                try:
                    os.replace(path, f"{path}.stale-{stamp}")
                except OSError:
                    continue
                if path == log:
                    self.log(f"set aside an event log left by an earlier job {self.root}")

    def check_checkpoint_dir(self) -> None:
        """The checkpoint folder can be created and written, and belongs to this run."""
        folder = self.ckpt_dir
        error = ""
        try:
            _private_mkdir(folder)
            if not os.access(folder, os.W_OK):
                error = "not writable"
        except OSError as exc:
            error = f"mkdir: cannot create directory '{exc.filename or folder}': {exc.strerror}"
        if error:
            self.event("end", "fail", f"checkpoint folder unusable: {folder}: {error}")
            self.log(
                f"cannot use the checkpoint folder {folder} ({error}); the command was not started"
            )
            self.chain_ends()
            raise Stop(1)
        fingerprint = self.env.get("HPCJOBS_RUN_FINGERPRINT", "")
        run_file = self.env.get("HPCJOBS_RUN_FILE", "")
        if not fingerprint or not run_file:
            return
        if os.path.isfile(run_file):
            try:
                with open(run_file, encoding="utf-8", errors="replace") as handle:
                    found = re.search(r'"fingerprint": *"([0-9a-f]*)"', handle.read())
            except OSError:
                found = None
            owner = found.group(1) if found else ""
            if owner != fingerprint:
                self.event(
                    "end",
                    "fail",
                    f"checkpoint folder owned by another run: {run_file} names run "
                    f"{owner or '?'}, this job is run {fingerprint}",
                )
                self.log(
                    f"the checkpoint folder now belongs to another run ({run_file}); the "
                    "command was not started"
                )
                self.chain_ends()
                raise Stop(1)
            return
        # Submitted without 'hpcjobs submit' (sbatch job.sh): claim the folder for this run.
        tmp = f"{run_file}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                claim = {"claimed_by_job": self.self_id, "fingerprint": fingerprint, "format": 1}
                handle.write(json.dumps(claim) + "\n")
            os.replace(tmp, run_file)
        except OSError:
            self.log(f"could not write {run_file}")

    def after_slurm_requeue(self) -> None:
        """This run is Slurm's requeue of the job (SLURM_RESTART_COUNT > 0): log it unless the
        run before did, and enforce the budgets."""
        last = self.chain.last_ending()
        event, cause, how = (last.event, last.cause, last.text("how")) if last else ("", "", "")
        if event == "requeue" and how == CONTINUED:
            following = last.text("next") if last else ""
            if following != self.self_id:
                # Continued in another job, yet Slurm requeued this one too (the Requeue=0
                # update failed or came too late): never run the chain twice.
                self.log(
                    f"Slurm requeued this job, but the chain already continues as job {following}; "
                    "exiting"
                )
                self.chain_ends()
                raise Stop(0)
            event = ""  # the continuation's first run was lost before it began
        if event != "requeue" or how not in (SLURM, SLURM_FALLBACK):
            # The run before ended without a word: ask accounting how, and date it.
            runs = self.slurm.acct_runs(self.job)
            state, end = runs[self.restart - 1] if len(runs) >= self.restart else ("", "")
            cause = decide.requeue_cause(state)
            self.event(
                "requeue",
                cause,
                f"requeued by Slurm (restart {self.restart})",
                _epoch(end),
                how=SLURM,
                stopped_run=self.restart - 1,
                slurm_state=state or None,
                **self.position(),
            )
        self.enforce_budget(cause)

    def enforce_budget(self, cause: str) -> None:
        """After logging a requeue for ``cause`` at the start of a run: end the chain when that
        requeue was over its budget."""
        used, allowed = self.chain.count("requeue", cause) - 1, self.budget(cause)
        total = self.chain.count("requeue") - 1
        verdict = decide.budget_verdict(cause, used, allowed, total, self.policy.max_total)
        if verdict.goes_on:
            return
        self.event("end", "fail", verdict.reason)
        if verdict.total_spent:
            self.log(f"total requeue budget exhausted ({total}/{self.policy.max_total}); giving up")
        else:
            self.log(f"requeue budget for {cause} exhausted ({used}/{allowed}); giving up")
        self.chain_ends()
        raise Stop(1)

    def faults_begin(self) -> None:
        """Empty the rank output copies, note where this run's stderr begins, and remove the
        node summaries of the run before (the stall watch must not judge them)."""
        self.capture_dir = os.path.join(self.output_dir, names.capture_dir(self.root))
        shutil.rmtree(self.capture_dir, ignore_errors=True)
        try:
            _private_mkdir(self.capture_dir)
            self.env["HPCJOBS_CAPTURE_DIR"] = self.capture_dir
        except OSError:
            self.capture_dir = ""
        try:
            self.err_offset = os.path.getsize(self.err_file) if self.err_file else 0
        except OSError:
            self.err_offset = 0
        # This run has begun: whoever logged how the run before it ended is settled.
        self.unclaim(self.self_id)
        # The summaries of the run before are no one's now (the histories stay), nor what its
        # agents said of its warning.
        folder = glob.escape(self.progress_dir)
        for path in glob.glob(os.path.join(folder, "node-*")) + glob.glob(
            os.path.join(folder, warned_file("*"))
        ):
            if not path.endswith(".log"):
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def start_agents(self) -> None:
        """One node agent per node (:mod:`.agent`): it gathers the node's progress reports and
        samples its GPUs. On more than one node in a job step of its own, one task per node,
        that overlaps the job's other steps (srun --overlap shares CPUs, memory and GPUs). The
        run's token (:data:`.deliver.ENV_TOKEN`) goes to them and to the step: it marks the
        program's processes the agents deliver the warning to."""
        self.env[deliver.ENV_TOKEN] = deliver.new_token(self.job)
        # This node's folder is there before the program starts (a plain command runs here).
        mine = self.env.get("HPCJOBS_PROGRESS_DIR", "")
        with contextlib.suppress(OSError):
            if mine:
                _private_mkdir(mine)
        argv = [*self.program, "agent", "--shared", self.progress_dir]
        argv += ["--every", str(agent_interval(self.policy.stall_timeout))]
        argv += ["--since", f"{time.time():.3f}"]
        argv += ["--warn", ",".join(deliver.candidates(self.policy.signal))]
        every = self.env.get("HPCJOBS_GPU_MONITOR_INTERVAL", "0")
        query = self.env.get("HPCJOBS_GPU_QUERY", "")
        if every.isdecimal() and int(every) > 0 and query:
            folder = os.path.join(self.output_dir, names.gpu_dir(self.root))
            try:
                _private_mkdir(folder)
                argv += ["--gpu-every", every, "--gpu-query", query, "--gpu-dir", folder]
            except OSError:
                pass
        others = [node for node in self.allocation if node != self.batch]
        # The deputy runs the program too, where it can: a failed spare ends no run, and its
        # agent would never be replaced.
        others.sort(key=lambda node: node not in self.step)
        if others:
            # Should the batch host fail, Slurm keeps this job (--no-kill): the deputy ends it.
            argv += ["--deputy", others[0], "--batch-host", self.batch]
            argv += ["--chain-log", self.events.path]
        nodes = self.env.get("SLURM_JOB_NUM_NODES", "1")
        if nodes.isdecimal() and int(nodes) > 1 and shutil.which("srun"):
            # With spare nodes the agents outlive a failed node (srun --no-kill): the deputy
            # among them.
            where = ["--nodelist=" + ",".join(self.allocation)] if self.allocation else []
            where += ["--no-kill"] if others else []
            argv = [
                "srun",
                "--overlap",
                *where,
                f"--nodes={nodes}",
                f"--ntasks={nodes}",
                "--ntasks-per-node=1",
                f"--job-name={AGENT_STEP}",
                "--kill-on-bad-exit=0",
                "--quiet",
                *argv,
            ]
        self.agents_step = argv[0] == "srun"
        try:
            # srun's own messages (a task it killed, say) must not mix with the step's: the
            # job's stderr is where a crash is classified from.
            stderr = subprocess.DEVNULL if self.agents_step else None
            self.agents = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stderr=stderr, env=self.env
            )
        except OSError as exc:
            self.log(f"could not start the node agents ({exc}); no progress is gathered")

    def signal_agents(self, name: str = "HUP") -> bool:
        """Send the agents SIG``name``: SIGHUP asks them to end (they write once more and
        remove their node-local folders; :meth:`stop_agents` waits for them), their
        :data:`.agent.WARN_SIGNAL` to deliver the warning. Whether the signal went out."""
        agents = self.agents
        if agents is None or agents.poll() is not None:
            return False
        if not self.agents_step:
            agents.send_signal(getattr(signal, "SIG" + name))
            return True
        # To the agents themselves, through Slurm.
        sent = False
        for line in self.slurm.queue_value(self.job, "%i %j", steps=True):
            words = line.split()
            if len(words) == 2 and words[1] == AGENT_STEP:
                sent = self.slurm.cancel(words[0], name) or sent
        return sent

    def ask_agents(self) -> None:
        """Start asking the agents to end, from a thread: the decision does not wait for
        Slurm's answers."""

        def ask() -> None:
            with contextlib.suppress(Exception):
                self.agents_asked = self.signal_agents()

        self.agents_asking = threading.Thread(target=ask, name="agents-stop", daemon=True)
        self.agents_asking.start()

    def stop_agents(self) -> None:
        """End the agents and wait for them (at most AGENTS_STOP_S, then they are killed)."""
        agents = self.agents
        deadline = time.monotonic() + AGENTS_STOP_S
        if self.agents_asking is not None:
            self.agents_asking.join(timeout=max(0.0, deadline - time.monotonic()))
        # Wait first where ask_agents reached them. Then SIGHUP again, each second through
        # Slurm (one scancel each), every 0.1 s to an agent of this node: one sent before an
        # agent set its handler is lost where the job inherited SIGHUP ignored (nohup), or
        # kills it before it wrote (no harm).
        asked = self.agents_asked
        again = AGENTS_RESEND_S if self.agents_step else LOCAL_AGENT_RESEND_S
        while agents is not None and agents.poll() is None:
            if time.monotonic() >= deadline:
                agents.kill()
                break
            if not asked:
                self.signal_agents()
            asked = False
            with contextlib.suppress(subprocess.TimeoutExpired):
                agents.wait(timeout=min(again, max(0.0, deadline - time.monotonic())))
        # An agent killed before it cleaned up leaves this node's folder: it goes too.
        shutil.rmtree(self.env.get("HPCJOBS_PROGRESS_DIR", ""), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.env.get(ENV_NODE_TMP, ""))

    # ---- the standby --------------------------------------------------------------------------

    def successor_args(self, nodes: str = "", excluded: Sequence[str] | None = None) -> list[str]:
        """This job's sbatch options for a job that continues its chain (:mod:`.successor`);
        ``nodes``: another node count, ``excluded``: other nodes to leave out than the
        chain's."""
        comment = (self.slurm.queue_value(self.job, "%k") or [""])[0].strip()
        root = self.root or self.self_id
        if excluded is None:
            excluded = self.chain.excluded()
        return successor_args(self.policy.sbatch_args, root, excluded, self.task, comment, nodes)

    def submit_next(
        self,
        dependency: str,
        standby_for: str = "",
        extra: Sequence[str] = (),
        nodes: str = "",
        grow_for: str = "",
        excluded: Sequence[str] | None = None,
    ) -> str:
        """Submit a job that continues this chain once ``dependency`` holds (""; as soon as
        Slurm can); its id (1234, or 1234_7 for an array task). ``standby_for`` marks it as the
        standby of that run, ``grow_for`` as its grower (on ``nodes`` nodes, without
        ``excluded``). Raises RuntimeError with sbatch's message when it fails."""
        args = self.successor_args(nodes, excluded)
        # A clean environment: the new job must not inherit this job's SLURM_* settings.
        env = successor_env(self.env, self.root or self.self_id, standby_for, grow_for)
        cwd = self.env.get("SLURM_SUBMIT_DIR") or self.output_dir
        depends = ["--dependency=" + dependency] if dependency else []
        argv = [*depends, *list(extra), *args, self.script]
        result = self.slurm.submit(argv, cwd, env)
        text = (result.out + result.err).strip()
        new = result.out.strip().split(";", 1)[0]
        if result.rc != 0 or not new.isdecimal():
            raise RuntimeError(text or "sbatch failed")
        return f"{new}_{self.task}" if self.task else new

    def standby_submit(self) -> None:
        """Give this run a standby (while the node failure budget lasts), and stop Slurm
        requeueing this job itself: with a standby, a dead node ends the job at once and
        releases its standby, instead of a requeue held for ~2 minutes. Not for array tasks,
        nor for a job submitted --no-requeue."""
        if not self.policy.standby or self.task:
            return
        if self.chain.count("requeue", NODE_FAILURE) >= self.budget(NODE_FAILURE):
            return
        # A run of this job that Slurm requeued anyway left a standby: it must never start.
        old = self.chain.standby_for(self.self_id)
        if old:
            self.slurm.cancel(old)
        if self.being_cancelled():
            return
        try:
            new = self.submit_next(
                "afternotok:" + self.job, self.self_id, ["--kill-on-invalid-dep=yes"]
            )
        except RuntimeError as exc:
            self.log(
                f"could not submit a standby job ({exc}); a node failure falls back to Slurm's "
                "requeue"
            )
            return
        self.event(
            "standby",
            "-",
            f"standby job {new} for job {self.self_id}",
            standby=new,
            standby_for=self.self_id,
        )
        # A cancel that came while sbatch ran: the standby goes at once (afternotok counts a
        # cancelled job as failed). The standby checks this too when it starts.
        if self.being_cancelled():
            if not self.slurm.cancel(new):
                self.log(f"could not cancel the standby job {new}")
            self.log(f"job {self.job} is being cancelled; its standby job {new} is cancelled too")
            return
        self.standby = new
        if self.slurm.update(self.job, "Requeue=0"):
            self.requeue_off = True
        else:
            self.log(
                f"could not mark job {self.job} Requeue=0; after a node failure Slurm may "
                "requeue it too"
            )

    def was_cancelled(self, job: str, info: str) -> bool:
        """Whether ``job`` (``info``: its 'scontrol show job') was cancelled: CANCELLED there,
        or, while it still shows COMPLETING, in accounting."""
        state = field(info, "JobState")
        if state.startswith("CANCELLED"):
            return True
        return state == "COMPLETING" and self.slurm.acct_state(job).startswith("CANCELLED")

    def requeued_by_slurm(self, info: str) -> bool:
        """Whether Slurm has requeued this job since this run began (``info``: its 'scontrol
        show job'); Slurm counts a requeue as soon as it decides it."""
        restarts = field(info, "Restarts")
        return restarts.isdecimal() and int(restarts) > self.restart

    def being_cancelled(self, info: str | None = None) -> bool:
        """Whether this job is being cancelled: Slurm says so, or a plain SIGTERM reached the
        supervisor while Slurm shows neither a preemption, nor a node failure, nor its own
        requeue of the job (``scontrol requeue`` sends SIGTERM too)."""
        if info is None:
            info = self.slurm.show_job(self.job)
        if self.was_cancelled(self.job, info):
            return True
        if re.search(r"PreemptTime=[0-9]|Reason=NodeDown|JobState=NODE_FAIL", info):
            return False
        if self.requeued_by_slurm(info):
            return False
        return self.signal_seen == "term"

    def final_state(self, job: str, state: str) -> str:
        """How ``job`` ended (CANCELLED, NODE_FAIL, ...), ``state`` being what 'scontrol show
        job' said. Slurm releases an afternotok dependency as soon as the job has ended, while
        it may still show COMPLETING; accounting has the final state then. Asks both, twice a
        second, for at most HPCJOBS_FINAL_STATE_WAIT s (60); "" if neither says."""
        wait = self.env.get("HPCJOBS_FINAL_STATE_WAIT", "60")
        deadline = self.clock() + (int(wait) if wait.isdecimal() else 60)
        while True:
            if decide.has_ended(state):
                return state.split(" ", 1)[0]
            state = self.slurm.acct_state(job)
            if decide.has_ended(state):
                return state
            if self.clock() >= deadline:
                return ""
            self.sleep(0.5)
            state = field(self.slurm.show_job(job), "JobState")

    def standby_cancel(self) -> None:
        """The chain does not continue after this run: its standby goes."""
        if not self.standby:
            return
        if not self.slurm.cancel(self.standby):
            self.log(f"could not cancel the standby job {self.standby}")
        self.unclaim(self.standby)
        self.standby = ""

    def claim_takeover(self, standby: str) -> bool:
        """Whether this process logs how the run before ``standby`` ended. That run (when its
        batch host lives on) and the standby (when it does not) may both try: one atomic
        mkdir decides."""
        if self.claimed == standby:
            return True
        if not self.claim(standby):
            return False
        self.claimed = standby
        return True

    def claim(self, job: str) -> bool:
        """One atomic mkdir of :func:`.names.takeover_claim`: whether this process made it."""
        old = os.umask(0o077)
        try:
            os.mkdir(os.path.join(self.output_dir, names.takeover_claim(job)))
        except OSError:
            return False
        finally:
            os.umask(old)
        return True

    def unclaim(self, job: str) -> None:
        """Remove the claim on ``job`` (:meth:`claim`), settled now; none is fine."""
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(self.output_dir, names.takeover_claim(job)))

    def standby_retarget(self) -> str:
        """Make the standby this run's continuation (it starts when this job ends, however it
        ends, without the excluded nodes); its id, or "" when there is none or Slurm refuses."""
        if not self.standby:
            return ""
        # Two updates: Slurm refuses the whole of one that holds a refused field. If the
        # exclusion comes too late, the standby hands over when it starts.
        excluded = self.chain.excluded()
        if excluded:
            self.slurm.update(self.standby, "ExcNodeList=" + ",".join(excluded))
        if not self.slurm.update(self.standby, "Dependency=afterany:" + self.job):
            # Slurm may already have started it (this run died of a node failure).
            state = self.queue_state(self.standby)
            if not state or state == "PENDING":
                return ""
        return self.standby

    def after_standby_release(self) -> None:
        """This job is a standby and Slurm released it. When the run it stood by for
        retargeted it, it is an ordinary continuation. Otherwise that run died without a word:
        record why (from Slurm), exclude the failed nodes, and enforce the budget."""
        pred = self.standby_for
        if not self.claim_takeover(self.self_id):
            # The run it stood by for is logging how it ended right now: wait for that.
            for _ in range(60):
                if self.chain.continued_as(self.self_id):
                    break
                self.sleep(0.25)
        if self.chain.continued_as(self.self_id):
            return
        grower = self.chain.grower_for(pred)
        if grower:  # it would wait for a run that is gone
            self.cancel_grower(grower)
        if self.chain.ended_after_standby(self.self_id):
            self.log(f"the chain ended with job {pred}; its standby does not run")
            raise Stop(0)
        info = self.slurm.show_job(pred)
        state, end = field(info, "JobState"), field(info, "EndTime")
        nodes, batch = field(info, "NodeList"), field(info, "BatchHost")
        if not state:
            # The controller has forgotten it (MinJobAge): accounting knows how and where.
            state, end, nodes = self.slurm.acct_last(pred)
        state = self.final_state(pred, state)
        lost = self.chain.batch_host_lost(pred)
        if lost:
            # A job with spare nodes outlives its batch host: a node agent saw it go, logged
            # the fault and cancelled the job (CANCELLED in Slurm) for this standby.
            state = "NODE_FAIL"
        cause = decide.standby_cause(state)
        if cause is None:
            self.event("end", "fail", f"cancelled: job {pred} was cancelled")
            self.log(f"job {pred} was cancelled; its standby does not run")
            raise Stop(0)
        when = _epoch(end)
        failed: list[str] = []
        if lost:
            failed = [lost]
            self.exclude(cause, failed)
        elif cause in (NODE_FAILURE, INFRASTRUCTURE):
            failed = self.failed_nodes(pred, nodes, batch)
            evidence = "job {} ended {} without a word (batch host {})".format(
                pred, state or "?", batch or "?"
            )
            self.event(
                "fault",
                cause,
                "node={} job={} evidence={}".format(",".join(failed) or "-", pred, evidence),
                when,
                node=",".join(failed) or None,
                stopped_job=pred,
                evidence=evidence,
            )
            if failed:
                self.exclude(cause, failed)
        self.event(
            "requeue",
            cause,
            "standby job {} took over from job {} ({})".format(self.self_id, pred, state or "?"),
            when,
            how=TOOK_OVER,
            next=self.self_id,
            stopped_job=pred,
            slurm_state=state or None,
            **self.position(),
        )
        self.log(
            "{}: job {} ended {}{}; standby job {} takes over".format(
                cause,
                pred,
                state or "?",
                " (failed: {})".format(",".join(failed)) if failed else "",
                self.self_id,
            )
        )
        self.enforce_budget(cause)

    # ---- the grower ---------------------------------------------------------------------------

    def grow_submit(self) -> None:
        """A run of an elastic job below its full size: give it a grower, a job of the chain
        that waits in the queue for more nodes than the run has and takes over once Slurm runs
        it (:mod:`.grow`). Not for array tasks, nor for a job submitted --no-requeue, nor with
        too little time left for the move to pay off. May run in the grow watch's thread: a
        grower submitted once the run is finishing is cancelled at once."""
        if self.grower or self.task or not self.policy.standby:
            return
        older = self.chain.grower_for(self.self_id)
        if older:  # a run of this job before Slurm requeued it left one, or it is gone
            self.slurm.cancel(older)
        run = len(self.step)
        if not self.policy.elastic or not run or run >= self.policy.nodes:
            return
        if self.time_short():
            return
        low, high = decide.grower_size(
            run, self.policy.nodes, self.policy.spare_nodes, self.policy.node_multiple
        )
        size = f"{low}-{high}" if low < high else str(high)
        # The chain's exclusions, the newest kept, as far as the grower still fits the
        # partition (a node that failed may be the one that has to come back).
        excluded = self.chain.excluded()
        total = self.partition_nodes()
        if total is not None and excluded:
            limit = max(total - low, 0)
            excluded, released = decide.excluded_after([], excluded, limit)
            if released:
                self.event(
                    "exclude",
                    GROW,
                    f"nodes={','.join(excluded) or '-'} released={','.join(released)} "
                    f"(at most {limit} excluded for {low} nodes)",
                    nodes=excluded,
                    released=released,
                    limit=limit,
                )
                self.log(f"no longer excluding {' '.join(released)}: a larger run needs them")
        try:
            new = self.submit_next("", nodes=size, grow_for=self.self_id, excluded=excluded)
        except RuntimeError as exc:
            self.log(f"could not submit a grower job ({exc}); this job stays at {run} nodes")
            return
        self.event(
            "grower",
            "-",
            f"grower job {new} for job {self.self_id} waits for {size} nodes",
            grower=new,
            grower_for=self.self_id,
            size=size,
        )
        self.log(f"running on {run} of {self.policy.nodes} nodes; job {new} waits for {size}")
        with self.grow_lock:
            keep = not self.finishing and not self.signal_seen and not self.being_cancelled()
            if keep:
                self.grower = new
                self.watch_grower()
        if not keep:
            self.cancel_grower(new)

    def time_short(self) -> bool:
        """Whether this job has too little time left for another run: one started now would
        get no warning before the time limit (False when Slurm does not say)."""
        left = decide.seconds((self.slurm.queue_value(self.job, "%L") or [""])[0])
        return left is not None and left <= self.policy.lead + decide.TIMEOUT_MARGIN_S

    def queue_state(self, job: str) -> str:
        """``job``'s state in squeue (PENDING, RUNNING, ...; "" when squeue has none)."""
        return (self.slurm.queue_value(job, "%T") or [""])[0].strip()

    def watch_grower(self) -> None:
        """Watch this run's grower while the run goes on (:class:`.grow.GrowWatch`)."""
        if not self.grower or self.child is None:
            return
        grower = self.grower
        marker = os.path.join(self.output_dir, names.grow_ready(grower))

        def claim() -> bool:
            # Not while the run is being ended (a cancel, a warning): it ends as it would.
            return not self.signal_seen and self.claim(grower)

        def warn() -> None:
            # The run ends on the warning signal, not by itself (a SIGTERM seen since stays).
            self.signal_seen = self.signal_seen or "warning"

        self.grow_watch = GrowWatch(
            grower,
            lambda: os.path.isdir(marker),
            claim,
            lambda: self.queue_state(grower),
            warn,
            self.grower_replace,
            self.policy.lead,
            self.policy.signal,
            self.child,
            self.log,
            self.kill_steps,
            send=self.warn_program,
        )
        self.grow_watch.start()

    def grower_replace(self) -> None:
        """The grower ended without taking over (its run would have been no larger, it gave
        up, someone cancelled it): another one, while the run goes on (and is not being
        ended). Runs in a thread of its own, started by the grow watch."""
        with self.grow_lock:
            if self.finishing or self.signal_seen:
                return
            gone, self.grower = self.grower, ""
        self.log(f"the grower job {gone} ended without taking over")
        self.grow_submit()

    def grower_cancel(self) -> None:
        """The chain does not go on in this run's grower: it goes."""
        if self.grower:
            self.cancel_grower(self.grower)
        self.grower = ""

    def cancel_grower(self, job: str) -> None:
        """Cancel grower ``job`` (the job's log says so when Slurm refuses)."""
        if not self.slurm.cancel(job):
            self.log(f"could not cancel the grower job {job}")

    def hand_over_to_grower(self) -> str:
        """This run claimed the move to its grower and made way for it: "handed" once the
        handoff is logged (the grower waits for it); when the grower is gone meanwhile, "again"
        if the chain runs again inside this job, else "handed" once it continues in another;
        "decide" when this job is being cancelled or requeued by Slurm: its end is decided as
        any other."""
        grower = self.grower
        info = self.slurm.show_job(self.job)
        if self.being_cancelled(info) or self.requeued_by_slurm(info):
            return "decide"
        state = self.queue_state(grower)
        if not state:  # once may be a failed ask
            self.sleep(1)
            state = self.queue_state(grower)
        if state != "RUNNING":
            self.log(f"the grower job {grower} is gone ({state or 'not in the queue'})")
            self.grower = ""
            short = self.time_short()
            self.stop_agents()
            if not short and self.take_nodes():
                self.event(
                    "requeue",
                    GROW,
                    f"continued in job {self.self_id} on {','.join(self.step)} "
                    f"(grower {grower} gone)",
                    how=IN_JOB,
                    stopped_run=self.restart,
                    **self.position(),
                )
                self.log("running again in this job, from the last checkpoint")
                return "again"
            self.continue_chain(GROW)
            return "handed"
        self.event(
            "handoff",
            GROW,
            f"continued as job {grower}: it holds more nodes than this run's {len(self.step)}",
            next=grower,
            nodes=[],
            **self.position(),
        )
        self.log(f"continuing as job {grower}, on more nodes, from the last checkpoint")
        self.grower = ""
        self.standby_cancel()  # the grower submits its own
        self.no_slurm_requeue()
        return "handed"

    def after_grower_start(self) -> None:
        """This job is a grower and Slurm runs it: when its run is larger than the one it grows,
        say so and wait until that run hands over (it checkpoints first). Raises :class:`Stop`
        when its run would be no larger (it goes; that run goes on), when Slurm requeued it
        before it took over, or when that run ended otherwise (the chain went on elsewhere, or
        is over) or did not claim the move in time. Logs nothing in the chain before the
        handoff: until then the grower is not part of it."""
        pred = self.grow_for
        if self.restart > 0 or self.is_done():
            self.log(f"job {pred} did not hand over to this job; it does not run")
            raise Stop(0)
        starts = [e for e in self.chain.events if e.event == "start" and e.job_id == pred]
        theirs = len(starts[-1].text("nodelist").split(",")) if starts else 0
        if self.policy.in_job:
            self.take_nodes()  # the nodes it could run on (the pre-flight check comes after)
        if len(self.step) <= theirs:
            self.log(
                f"this job can run on {len(self.step)} nodes, job {pred} runs on {theirs}; "
                "it does not take over"
            )
            raise Stop(0)
        marker = os.path.join(self.output_dir, names.grow_ready(self.self_id))
        with contextlib.suppress(OSError):
            _private_mkdir(marker)
        deadline = self.clock() + self.policy.lead + GROW_WAIT_MARGIN_S
        look, alive, unknown = 0.0, True, 0
        self.log(f"job {pred} runs on {theirs} nodes; waiting for it to hand over")
        try:
            while not self.chain.continued_as(self.self_id):
                now = self.clock()
                if now >= look:
                    look = now + 2
                    state = self.queue_state(pred)
                    unknown = 0 if state else unknown + 1
                    # Not in the queue twice in a row: gone (once may be a failed ask).
                    alive = state in ("RUNNING", "COMPLETING") or (not state and unknown < 2)
                giving_up = not alive or now >= deadline or bool(self.signal_seen)
                # Claimed here: that run can no longer move. Claimed there: that run is making
                # way, and hands over unless it ends otherwise.
                if giving_up and (self.claim_takeover(self.self_id) or not alive):
                    if self.chain.continued_as(self.self_id):
                        break
                    self.log(f"job {pred} did not hand over to this job; it does not run")
                    raise Stop(0)
                self.sleep(0.25)
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(marker)
        self.unclaim(self.self_id)

    def take_nodes(self, bad: Sequence[str] = ()) -> bool:
        """With spare nodes: choose the nodes the next run takes, and release from the job the
        nodes no run may take (the chain's excluded nodes, nodes Slurm shows down, ``bad``).
        False, changing nothing, when the job is not running or too few nodes are left."""
        info = self.slurm.show_job(self.job)
        if field(info, "JobState") != "RUNNING":
            return False
        allocation = self.slurm.hostnames(field(info, "NodeList"))
        ruled_out = {*self.chain.excluded(), *bad}
        if allocation:
            states = self.slurm.node_states(",".join(allocation))
            ruled_out |= {node for node, state in states if NODE_FAILED.search(state)}
        usable = len([node for node in allocation if node not in ruled_out])
        size = decide.run_size(
            usable,
            self.policy.nodes or len(allocation),
            self.policy.min_nodes,
            self.policy.node_multiple,
        )
        step = decide.step_nodes(allocation, self.batch, ruled_out, size)
        if not step:
            return False
        keep = [node for node in allocation if node not in ruled_out]
        settings: dict[str, str | None] = {}
        if len(keep) < len(allocation):
            self.steps_ended()
            settings = self.release(keep)
        if keep != self.allocation:
            # The job's settings follow its nodes (Slurm takes a failed node out by itself).
            nodes, count = ",".join(keep), str(len(keep))
            settings.update(SLURM_JOB_NODELIST=nodes, SLURM_NODELIST=nodes)
            settings.update(SLURM_JOB_NUM_NODES=count, SLURM_NNODES=count)
            for name, value in settings.items():
                if value is None:
                    self.env.pop(name, None)
                else:
                    self.env[name] = value
        self.allocation, self.step = keep, step
        return True

    def steps_ended(self) -> None:
        """Wait until Slurm lists no step of this job but its batch and extern steps (at most
        :data:`STEPS_END_S`). A step still ending when nodes leave the job never finished on
        Slurm 22.05: its nodes' completions no longer matched the job's shrunk node list, and
        the next run's step waited ("Requested nodes are busy") until the job ended (seen at
        131 nodes, where 1,024 processes take seconds to end after the kill)."""
        deadline = self.clock() + STEPS_END_S
        waited = False
        while True:
            lines = self.slurm.queue_value(self.job, "%i", steps=True)
            left = [line.strip() for line in lines if STEP_ID.fullmatch(line.strip())]
            if not left:
                return
            if self.term_at:
                return  # Slurm is ending the job: log the decision before KillWait runs out
            if self.clock() >= deadline:
                self.log(
                    f"step(s) {', '.join(left)} still listed {STEPS_END_S} s after the run "
                    "ended; releasing nodes anyway"
                )
                return
            if not waited:
                waited = True
                self.log(f"waiting for step(s) {', '.join(left)} to end before nodes leave")
                for step in left:  # what is left of them (an agent on a node that hangs)
                    self.slurm.cancel(step, "KILL")
            self.sleep(0.5)

    def release(self, keep: Sequence[str]) -> dict[str, str | None]:
        """Shrink the job to ``keep``: the chain stops paying for the other nodes, and no run
        can use them. The SLURM_* settings of Slurm's resize script (None: unset)."""
        folder = tempfile.mkdtemp(prefix="hpcjobs-resize-")
        try:
            if not self.slurm.shrink(self.job, keep, folder):
                self.log(f"could not release nodes from job {self.job}; they stay unused")
            return _resize_settings(os.path.join(folder, f"slurm_job_{self.job}_resize.sh"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def stays_in_job(self, cause: str, failed: Sequence[str]) -> bool:
        """With spare nodes, after a fault of a node: whether the chain runs again inside this
        job, on its remaining nodes (logged as a requeue, how=in_job). ``failed``: the nodes
        at fault; they leave the job even where the chain cannot exclude them (a later job of
        the chain must still fit the partition)."""
        if not self.policy.in_job or cause not in decide.IN_JOB_CAUSES:
            return False
        if self.signal_seen:
            return False  # the job is being ended (a warning, a cancel): a new job goes on
        if self.time_short():
            # A run started now would get no warning before the time limit.
            self.log(f"{cause}: too little time left in job {self.job} to run again in it")
            return False
        # The agents end before a node leaves the job: Slurm would otherwise kill their step
        # there, and a step that outlives that kill drains the node ("Kill task failed").
        self.stop_agents()
        if not self.take_nodes(failed):
            self.log(f"{cause}: too few nodes left in job {self.job} to run again in it")
            return False
        if self.time_short():  # again: releasing nodes may have waited for the steps to end
            self.log(f"{cause}: too little time left in job {self.job} to run again in it")
            return False
        if self.claimed and self.claimed == self.standby:
            # The standby stays this job's: it logs a later end of this job without a word.
            self.unclaim(self.standby)
            self.claimed = ""
        nodes = ",".join(self.step)
        self.event(
            "requeue",
            cause,
            f"continued in job {self.self_id} on {nodes}",
            how=IN_JOB,
            stopped_run=self.restart,
            **self.position(),
        )
        self.log(f"{cause}: running again in this job on {nodes}, from the last checkpoint")
        return True

    def relaunch(self) -> None:
        """The next run, inside this job, on the nodes :meth:`take_nodes` chose. A SIGTERM
        from Slurm that came during the recovery stays seen: the next run ends at once."""
        if not self.term_at:
            self.signal_seen = ""
            self.term_sent = False
        self.signal_logged = False
        self.agents_asking, self.agents_asked = None, False
        with self.grow_lock:
            self.finishing = False
        self.faults_begin()
        self.start_agents()
        count = max(self.chain.count("start"), self.restart)
        self.env["HPCJOBS_RESTART_COUNT"] = str(count)
        self.announce(count)
        self.grow_watch = None
        self.launch()
        self.grow_submit()
        excluded = self.chain.excluded()
        if self.standby and excluded:
            # Should this batch host die too, its standby starts without them.
            self.slurm.update(self.standby, "ExcNodeList=" + ",".join(excluded))

    def handoff_if_excluded(self) -> None:
        """This job landed on a node the chain excludes: hand over to a new job without it."""
        excluded = self.chain.excluded()
        if not excluded:
            return
        mine = self.slurm.hostnames(self.env.get("SLURM_JOB_NODELIST", ""))
        bad = [node for node in mine if node in excluded]
        if not bad:
            return
        try:
            new = self.submit_next("afterany:" + self.job, "")
        except RuntimeError as exc:
            self.log(
                "could not hand over to a job without {} ({}); running here".format(
                    ",".join(bad), exc
                )
            )
            return
        self.event(
            "handoff",
            "-",
            "continued as job {}: this job's nodes include excluded {}".format(new, ",".join(bad)),
            next=new,
            nodes=bad,
        )
        self.log(
            "this job got excluded node(s) {}; continuing as job {}".format(",".join(bad), new)
        )
        raise Stop(0)

    # ---- faults -------------------------------------------------------------------------------

    def run_stderr(self) -> str:
        """This run's part of the job's stderr (at most STDERR_LIMIT bytes)."""
        if not self.err_file:
            return ""
        try:
            with open(self.err_file, "rb") as handle:
                handle.seek(self.err_offset)
                return handle.read(STDERR_LIMIT).decode("utf-8", "replace")
        except OSError:
            return ""

    def failed_nodes(self, job: str, nodes: str, batch: str, text: str | None = None) -> list[str]:
        """The nodes whose failure ended ``job``: srun names them in the job's stderr (``text``:
        the end of the job's stderr file) when the batch host lived on; when nothing names one,
        the batch host died with the job. Nodes Slurm now shows failed count too
        (:data:`NODE_FAILED`)."""
        if text is None:
            text = ""
            try:
                with open(self.err_file, "rb") as handle:
                    handle.seek(max(os.path.getsize(self.err_file) - STDERR_LIMIT, 0))
                    text = handle.read().decode("utf-8", "replace")
            except OSError:
                pass
        named: list[str] = []
        for hostlist in failed_hostlists(text, job):
            named += self.slurm.hostnames(hostlist)
        if not named and batch and batch != "(null)":
            named = [batch]
        if nodes and nodes != "(null)":
            states = self.slurm.node_states(nodes)
            named += [node for node, state in states if NODE_FAILED.search(state)]
        seen: list[str] = []
        for node in named:
            if node and node not in seen:
                seen.append(node)
        return seen

    def partition_nodes(self) -> int | None:
        """How many nodes the job's partition has (None: unknown)."""
        partition = self.env.get("SLURM_JOB_PARTITION", "").split(",")[0]
        return self.slurm.partition_nodes(partition) if partition else None

    def exclude(self, cause: str, nodes: Sequence[str]) -> None:
        """Exclude ``nodes`` from every later run of the chain, within the limits."""
        room = None
        total = self.partition_nodes()
        if total is not None:
            # Every later job of the chain asks for the nodes this one asked for (spares too).
            fewest = self.policy.min_nodes or self.policy.nodes
            wanted = fewest + self.policy.spare_nodes if self.policy.in_job else 0
            room = total - (wanted or int(self.env.get("SLURM_JOB_NUM_NODES", "1") or 1))
        limit = decide.exclusion_limit(self.policy.max_excluded, room)
        kept, released = decide.excluded_after(self.chain.excluded(), list(nodes), limit)
        detail = "nodes=" + (",".join(kept) or "-")
        if released:
            detail += f" released={','.join(released)} (at most {limit} excluded)"
        self.event("exclude", cause, detail, nodes=kept, released=released, limit=limit)
        message = f"excluding {','.join(kept) or 'no node'} from later runs"
        dropped = [n for n in released if n not in nodes]
        refused = [n for n in released if n in nodes]
        if dropped:
            message += f"; no longer excluding {' '.join(dropped)}"
        if refused:
            tight = room is not None and room < self.policy.max_excluded
            why = " (the chain's jobs need the rest of the partition)" if tight else ""
            message += (
                f"; not excluding {' '.join(refused)}: at most {limit} node(s) may be excluded{why}"
            )
        self.log(message)

    def healthy(self, node: str) -> bool:
        """Whether the site's health check passes on ``node`` (False when there is none)."""
        check = self.policy.health_check
        if not check:
            return False
        argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + node]
        argv += ["--job-name=hpcjobs-health-check", "--quiet", "bash", "-c", check]
        result = self.slurm.run(argv, timeout=self.policy.health_timeout, retry=False)
        lines = (result.out + result.err).strip().splitlines()
        last = lines[-1][:200] if lines else ""
        if result.rc == 0:
            self.event("health", "pass", f"node={node} {last}", node=node, exit=0, output=last)
            self.log(f"health check passed on {node}; it is not excluded")
            return True
        self.health_failed(node, result.rc, last)
        self.log(f"health check failed on {node} (exit code {result.rc})")
        return False

    def health_failed(self, node: str, code: int | None, output: str) -> None:
        """Log that ``node`` failed the site's health check (``code`` None: no answer)."""
        shown = "none" if code is None else str(code)
        self.event(
            "health", "fail", f"node={node} exit={shown} {output}", node=node, exit=code,
            output=output,
        )  # fmt: skip

    def preflight(self) -> list[str]:
        """With spare nodes and a site health check, before the job's first run: the check on
        every node of the job at once (one srun, one task per node, each at most
        ``health_timeout`` s). The nodes that fail it are logged and excluded; the caller takes
        them out of the job, so that a spare runs in their place. [] when none fails, or when
        every node fails (:func:`.decide.preflight_blames`)."""
        check = self.policy.health_check
        nodes = self.slurm.hostnames(self.env.get("SLURM_JOB_NODELIST", ""))
        if not check or not nodes:
            return []
        count = str(len(nodes))
        argv = ["srun", "--overlap", "--nodes=" + count, "--ntasks=" + count]
        argv += ["--ntasks-per-node=1", "--nodelist=" + ",".join(nodes)]
        argv += ["--job-name=hpcjobs-preflight", "--quiet", "bash", "-c", PREFLIGHT_SH]
        argv += [decide.PREFLIGHT_MARK, check, str(self.policy.health_timeout)]
        started = self.clock()
        timeout = self.policy.health_timeout + 30  # each node's check ends 5 s after its limit
        result = self.slurm.run(argv, timeout=timeout, retry=False, partial=True)
        seconds = round(self.clock() - started, 2)
        failed = decide.preflight_failures(result.out, nodes)
        blamed = decide.preflight_blames(failed, nodes)
        for node, failure in failed.items() if blamed else ():
            self.health_failed(node, failure.exit, failure.output)
        if not failed:
            verdict, what = "pass", f"passed on all {count} nodes"
        elif blamed:
            verdict, what = "fail", "failed on " + ",".join(failed)
        else:
            why = (result.err.strip().splitlines() or ["no node printed a result"])[-1][:200]
            verdict, what = "skip", f"failed on every node ({why}); it blames none"
        self.event(
            "preflight",
            verdict,
            f"health check {what} in {seconds} s",
            checked=len(nodes),
            failed=list(failed) if blamed else [],
            seconds=seconds,
        )
        self.log(f"pre-flight health check {what} ({seconds} s)")
        if not blamed:
            return []
        self.exclude(INFRASTRUCTURE, list(failed))
        if self.batch in failed:
            self.log(f"the batch host {self.batch} failed the pre-flight check")
        return list(failed)

    def too_few_healthy(self, failed: Sequence[str]) -> None:
        """The job cannot run without nodes that failed the pre-flight check (its batch host,
        or more nodes than it has spares): a job without them takes over (the hand-off) where
        the chain excludes them; where it cannot (the partition has no room), the run starts
        with them, and says so."""
        if set(failed) & set(self.chain.excluded()):
            return  # handoff_if_excluded() hands over
        self.log(
            "job {} cannot run without {}, and the chain cannot exclude them (the partition "
            "has no room): the run starts with them".format(self.job, ",".join(failed))
        )

    def crash(self) -> tuple[str, str, str]:
        """After a non-zero exit no signal explains: (cause, suspect, evidence). Infrastructure
        when the first failing task's output shows a signature, or it died of SIGBUS or
        SIGKILL; else application, and nobody is blamed."""
        failure = first_failure(self.run_stderr())
        if failure is None:
            return APPLICATION, "", ""
        node, tasks, what = failure
        files: list[str] = []
        if self.capture_dir:
            own = os.path.join(self.capture_dir, f"{node}.rank-{failure.first_task}")
            pattern = os.path.join(glob.escape(self.capture_dir), glob.escape(node) + ".rank-*")
            files = [f for f in [own, *sorted(glob.glob(pattern))] if os.path.isfile(f)]
            files = list(dict.fromkeys(files))
        evidence = self.signature(files)
        if evidence:
            return INFRASTRUCTURE, node, evidence
        report = f"srun: {node}: task {tasks}: {what}"
        if what.startswith(("Bus error", "Killed")):
            return INFRASTRUCTURE, node, report
        return APPLICATION, "", report

    def signature(self, files: Sequence[str]) -> str:
        """The first line of ``files`` that matches an infrastructure signature (grep -E
        patterns), cut to 300 characters."""
        if not files:
            return ""
        argv = ["grep", "-h", "-a", "-m", "1", "-E"]
        for pattern in all_patterns(self.policy.patterns):
            argv += ["-e", pattern]
        out = self.slurm.run([*argv, "--", *list(files)], timeout=60).out
        first = out.split("\n", 1)[0] if out else ""
        return first.replace("\r", "")[:300]

    def fault_log(self, cause: str, suspect: str, evidence: str) -> None:
        self.event(
            "fault",
            cause,
            "node={} evidence={}".format(suspect or "-", evidence),
            node=suspect or None,
            stopped_job=self.self_id,
            evidence=evidence,
        )
        self.log("{}{}: {}".format(cause, f" on node {suspect}" if suspect else "", evidence))

    def fault_exclude(self, cause: str, suspect: str) -> bool:
        """Exclude the suspect from later runs, unless the site's health check clears it;
        whether it was blamed."""
        if not suspect or self.healthy(suspect):
            return False
        self.exclude(cause, [suspect])
        return True

    # ---- stalls -------------------------------------------------------------------------------

    def kill_steps(self) -> None:
        """SIGKILL to every job step of this job but the batch step and hpcjobs' own monitors."""
        self.signal_steps("KILL")

    def signal_steps(self, name: str) -> None:
        """SIG``name`` to every job step of this job but the batch step and hpcjobs' own
        monitors (one squeue, one scancel per step)."""
        for line in self.slurm.queue_value(self.job, "%i %j", steps=True):
            words = line.split()
            if len(words) < 2 or words[1] == AGENT_STEP:
                continue
            if STEP_ID.fullmatch(words[0]):
                self.slurm.cancel(words[0], name)

    # ---- finish -------------------------------------------------------------------------------

    def end_cause(self, rc: int) -> str:
        """How this run ended (:func:`decide.end_cause`), from Slurm and this run's stderr."""
        info = self.slurm.show_job(self.job)
        requeued = None
        if self.requeued_by_slurm(info):
            # Slurm counts a requeue as soon as it decides it: the job comes back with the same
            # id, and the program's exit (0 after a checkpoint) must not mark the job done.
            runs = self.slurm.acct_runs(self.job)
            requeued = runs[self.restart][0] if len(runs) > self.restart else ""
        node_failed = bool(re.search(r"JobState=NODE_FAIL|Reason=NodeDown", info)) or (
            has_node_failure(self.run_stderr())
        )
        preempted = bool(re.search(r"PreemptTime=[0-9]", info))
        early = requeued is not None or node_failed or preempted
        cancelled = not early and self.was_cancelled(self.job, info)
        left = None
        if not early and not cancelled and (self.signal_seen == "warning" or self.requested()):
            left = decide.seconds((self.slurm.queue_value(self.job, "%L") or [""])[0])
        warned, summaries = self.warned()
        if summaries:
            self.log("the warning went out as: " + "; ".join(summaries))
        facts = decide.EndFacts(
            rc,
            self.signal_seen,
            requeued,
            node_failed,
            preempted,
            cancelled,
            left,
            self.policy.lead,
            requested=self.requested(),
            stopped=self.term_sent or warned > 0,
        )
        self.end_rule = decide.exit_rule(facts)
        return decide.end_cause(facts)

    def classify(self, rc: int) -> tuple[str, str, str]:
        """How this run ended, once the step has exited: (cause, suspect, evidence); a stall
        and an infrastructure crash are logged as faults here."""
        cause = self.end_cause(rc)
        suspect = evidence = ""
        stall = self.watch.found if self.watch is not None else None
        if stall is not None and not cause.startswith("requeued_") and cause != CANCELLED:
            # The stall watch ended the run (its warning signal makes it look like a preemption).
            suspect, found = stall
            cause = STALL
            evidence = f"rank {found.rank} at step {found.step} for {found.idle} s"
            if found.tied:
                evidence += f" ({found.tied} other rank(s) tied with it: no node blamed)"
            self.fault_log(STALL, suspect, evidence)
        elif cause == APPLICATION:
            cause, suspect, evidence = self.crash()
            if cause == INFRASTRUCTURE:
                self.fault_log(INFRASTRUCTURE, suspect, evidence)
            elif evidence:
                self.log(
                    f"application failure: {evidence} (no infrastructure signature; no node blamed)"
                )
        return cause, suspect, evidence

    def blame_failed_nodes(self) -> list[str]:
        """A node of this run failed and this batch host lived on: log it, exclude it; the
        failed nodes."""
        # This run's stderr only: a job with spare nodes may have lost a node in an earlier run.
        nodelist = self.env.get("SLURM_JOB_NODELIST", "")
        failed = self.failed_nodes(self.job, nodelist, "", self.run_stderr())
        suspect = ",".join(failed)
        self.fault_log(NODE_FAILURE, suspect, f"srun: error: Node failure on {suspect or '?'}")
        if failed:
            self.exclude(NODE_FAILURE, failed)
        return failed

    def finish(self, rc: int) -> int | None:
        """Decide and act after the launcher exited; the job's exit code. The agents are
        asked to end first and waited for last: after a node failure Slurm kills this job
        within KillWait, and the decision must be logged (and the standby retargeted) before
        that; and the job must end as soon as the standby may start, for the sooner it ends,
        the likelier Slurm's next scheduling pass starts the standby (one that runs between
        the standby's update and the job's end wastes up to batch_sched_delay, 3 s). None:
        the chain runs again inside this job (:meth:`relaunch`)."""
        if self.watch is not None:
            self.watch.close()
        with self.grow_lock:
            self.finishing = True
            watch = self.grow_watch
        if watch is not None:
            watch.close()
        self.ask_agents()
        try:
            growing = watch is not None and watch.started.is_set()
            outcome = self.hand_over_to_grower() if growing and not self.is_done() else "decide"
            if outcome == "handed":
                return 0
            if outcome == "again":
                return None
            code = self.decide_and_act(rc)
            if code is not None:
                self.grower_cancel()  # the chain ends, or goes on in another job
            return code
        finally:
            self.stop_agents()

    def decide_and_act(self, rc: int) -> int | None:
        """What :meth:`finish` does once the step has exited."""
        if self.is_done():
            self.event("end", "finish", "done marker present")
            self.chain_ends()
            return 0
        cause, suspect, _evidence = self.classify(rc)
        failed: list[str] = []
        if cause == NODE_FAILURE:
            # The standby may be logging this already: then leave it to it.
            if self.standby and not self.claim_takeover(self.standby):
                return rc
            failed = self.blame_failed_nodes()
        if cause.startswith("requeued_"):
            cause = cause[len("requeued_") :]
            self.event(
                "requeue",
                cause,
                f"requeued by Slurm (restart {self.restart + 1})",
                how=SLURM,
                stopped_run=self.restart,
                **self.position(),
            )
            self.log(
                f"{cause}: Slurm requeued this job itself; its next run resumes from the last "
                "checkpoint"
            )
            return rc
        if cause == FINISHED:
            self.mark_done()
            if self.end_rule == decide.ENDED_ON_ITS_OWN and self.signal_seen:
                detail = "completed: exit 0, ended on its own (no stop signal reached it)"
                self.log(
                    f"the program exited 0 on its own after SIG{self.policy.signal} (it listens "
                    "for no warning): the job is finished, not continued"
                )
            else:
                detail = "completed"
            self.event("end", "finish", detail, None, **self.rule_field())
            self.chain_ends()
            return 0
        if cause == CANCELLED:
            self.event("end", "fail", "cancelled")
            self.chain_over()
            return decide.exit_code(cause, rc, False)
        used, allowed = self.chain.count("requeue", cause), self.budget(cause)
        verdict = decide.budget_verdict(
            cause, used, allowed, self.chain.count("requeue"), self.policy.max_total, rc
        )
        if not verdict.goes_on:
            self.event("end", "fail", verdict.reason)
            if cause == PREEMPTION:
                self.no_slurm_requeue()
                self.chain_over()
            else:
                self.chain_ends()
            if verdict.total_spent:
                self.log(
                    f"{cause}, but the total requeue budget is exhausted "
                    f"({self.chain.count('requeue')}/{self.policy.max_total})"
                )
            else:
                self.log(f"{cause} (exit code {rc}); not requeued ({used}/{allowed} requeues used)")
            return decide.exit_code(cause, rc, False)
        if cause in (INFRASTRUCTURE, STALL) and self.fault_exclude(cause, suspect):
            failed = [suspect]
        if self.stays_in_job(cause, failed):
            return None
        self.continue_chain(cause)
        return 0

    def rule_field(self) -> dict[str, object]:
        """The ``rule`` field of an ``end`` or ``requeue`` event: why a run that exited 0 was
        taken as finished or not (:func:`.decide.exit_rule`); none where it did not apply."""
        return {"rule": self.end_rule} if self.end_rule else {}

    def mark_done(self) -> None:
        try:
            _touch_private(self.done_file())
        except OSError as exc:
            self.log(f"could not write {self.done_file()}: {exc}")

    def continue_chain(self, cause: str) -> None:
        """Make the standby this run's continuation (or submit one, afterany this job), without
        the excluded nodes, and stop Slurm requeueing this job."""
        if self.standby and not self.claim_takeover(self.standby):
            return  # the standby has taken over and logged it
        how = ""
        new = self.standby_retarget()
        if new:
            how = " (the standby)"
        else:
            try:
                new = self.submit_next("afterany:" + self.job, "")
            except RuntimeError as exc:
                self.log(
                    f"could not submit the continuation ({exc}); falling back to Slurm's requeue"
                )
                self.standby_cancel()
                self.event(
                    "requeue",
                    cause,
                    "requeued by Slurm (fallback)",
                    how=SLURM_FALLBACK,
                    **self.position(),
                )
                if not self.slurm.requeue(self.job):
                    self.log("scontrol requeue failed too")
                return
            self.standby_cancel()
        self.no_slurm_requeue()
        self.event(
            "requeue",
            cause,
            f"continued as job {new}{how}",
            None,
            how=CONTINUED,
            next=new,
            **self.rule_field(),
            **self.position(),
        )
        self.log(f"{cause}: continuing as job {new}{how} (starts when resources are free)")

    def no_slurm_requeue(self) -> None:
        """Tell Slurm not to requeue this job (after a preemption, Slurm >= 24.05 requeues a
        job that exits during the grace time, whatever its exit code)."""
        if self.requeue_off:
            return  # done when the standby was submitted
        if not self.slurm.update(self.job, "Requeue=0"):
            self.log(f"could not mark job {self.job} Requeue=0; Slurm may also requeue it")

    def chain_over(self) -> None:
        """Nothing of the chain runs after this run: its standby goes, and the copies of the
        ranks' output."""
        self.standby_cancel()
        if self.capture_dir:
            shutil.rmtree(self.capture_dir, ignore_errors=True)

    def chain_ends(self) -> None:
        """The chain ends with this run. Slurm 24.11 requeues the run that follows its own
        requeue of a preempted job once more when it exits: runs Slurm requeued are marked
        Requeue=0 (the others need no extra call to the controller)."""
        self.chain_over()
        if self.restart > 0:
            self.no_slurm_requeue()
