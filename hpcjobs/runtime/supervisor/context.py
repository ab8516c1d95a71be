"""What every part of the supervisor shares about one job: who it is, where its files are, how
it talks to Slurm, its chain's event log and the run's state (:mod:`.state`).

The parts (:mod:`.supervise` composes them) read these facts and call these services; each part
keeps its own state. The identity and folders are settled once the run begins
(:mod:`.start`); :attr:`RunContext.allocation` and :attr:`RunContext.run_nodes` change only
where a job with spare nodes chooses its next run's nodes (:mod:`.nodes`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, MutableMapping
from typing import TypedDict

from hpcjobs.contract import names
from hpcjobs.contract.eventlog import Chain, ChainView, EventLog
from hpcjobs.contract.jobenv import ENV_CHAIN_ROOT, ENV_CHECKPOINT_DIR
from hpcjobs.contract.slurmcmd import Slurm
from hpcjobs.contract.slurmtime import parse_duration

from . import decide, frameworks
from .policy import Policy
from .sigsafe import to_stderr
from .state import RunState
from .successor import ENV_GROW_FOR, ENV_STANDBY_FOR
from .windup import newest_checkpoint, progress_step

#: The supervisor's own command on any node (the node agents are started with it).
DEFAULT_ARGV = ("python3", "-m", "hpcjobs.runtime.supervisor")


class Position(TypedDict):
    """Where the program is when a run ends: the newest complete checkpoint step (-1: none;
    None: one in a framework's layout whose step is not known) and the step it reached (-1:
    not known), as the ``requeue`` event's fields."""

    checkpoint: int | None
    progress: int


class RunContext:
    """One job's facts and services, shared by the supervisor's parts."""

    def __init__(
        self,
        policy: Policy,
        script: str,
        env: MutableMapping[str, str],
        slurm: Slurm | None = None,
        supervisor_argv: tuple[str, ...] | list[str] = DEFAULT_ARGV,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.policy = policy
        self.script = script
        self.env = env
        self.slurm = slurm or Slurm(env)
        self.supervisor_argv = list(supervisor_argv) or list(DEFAULT_ARGV)
        #: How the waits for Slurm tell the time and pass it (tests give a fake clock).
        self.clock = clock
        self.sleep = sleep
        self.state = RunState()
        self.job = env.get("SLURM_JOB_ID", "0")
        array, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
        self.task = task
        self.self_id = f"{array}_{task}" if array and task else self.job
        self.restart = int(env.get("SLURM_RESTART_COUNT", "0") or 0)
        self.output_dir = names.output_dir(env) or os.getcwd()
        self.root = env.get(ENV_CHAIN_ROOT, "")
        #: A standby: the job whose run it stands by for.
        self.standby_for = env.get(ENV_STANDBY_FOR, "")
        #: A grower: the job whose run below its full size it takes over from.
        self.grow_for = env.get(ENV_GROW_FOR, "")
        self.ckpt_dir = env.get(ENV_CHECKPOINT_DIR, "")
        self.batch = env.get("SLURMD_NODENAME", "")
        self.progress_dir = ""
        self.capture_dir = ""
        #: The job's stderr file, and where this run's part of it begins.
        self.err_file = ""
        self.err_offset = 0
        #: With spare nodes: the job's nodes, and those the current run takes (the batch host
        #: first). Empty otherwise: the run takes all of the job's nodes, as srun picks them.
        self.allocation: list[str] = []
        self.run_nodes: list[str] = []
        self._view: ChainView | None = None

    # ---- the log of the job and of the chain ----------------------------------------------------

    def log(self, message: str) -> None:
        """One line in the job's stderr, stamped."""
        stamp = time.strftime("%H:%M:%S")
        to_stderr(f"{stamp} hpcjobs[{self.job}]: {message}\n")

    @property
    def events(self) -> EventLog:
        """The chain's event log, as this run writes it."""
        path = os.path.join(self.output_dir, names.chain_log(self.root or self.self_id))
        return EventLog(path, self.self_id, self.restart)

    @property
    def chain(self) -> Chain:
        """The chain's events as the log has them now (read once, then only what was added)."""
        path = self.events.path
        if self._view is None or self._view.path != path:
            self._view = ChainView(path)
        return self._view.current()

    def event(
        self, event: str, cause: str, detail: str, when: float | None = None, **data: object
    ) -> None:
        """Add one event to the chain's log; a failed write is logged, never raised."""
        try:
            self.events.append(event, cause, detail, when, **data)
        except OSError as exc:
            self.log(f"could not write the event log: {exc}")

    # ---- the program's checkpoints and progress ---------------------------------------------

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

    def position(self) -> Position:
        """Where the program is: the ``checkpoint`` and ``progress`` fields of a requeue."""
        return Position(checkpoint=self.newest()[0], progress=progress_step(self.ckpt_dir))

    def done_file(self) -> str:
        """The chain's done marker in the output folder."""
        return os.path.join(self.output_dir, names.done_marker(self.root))

    def is_done(self) -> bool:
        """Whether the program or a run before said the work is done."""
        return os.path.isfile(os.path.join(self.ckpt_dir, "DONE")) or os.path.isfile(
            self.done_file()
        )

    def budget(self, cause: str) -> int:
        """How many requeues for ``cause`` the chain may make."""
        return self.policy.budgets.get(cause, 0)

    # ---- claims on how a run ended ---------------------------------------------------------

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

    # ---- this job in Slurm -----------------------------------------------------------------

    def time_left(self) -> int | None:
        """Seconds left before this job's time limit (None when Slurm does not say)."""
        return parse_duration((self.slurm.queue_value(self.job, "%L") or [""])[0])

    def time_short(self) -> bool:
        """Whether this job has too little time left for another run: one started now would
        get no warning before the time limit (False when Slurm does not say)."""
        left = self.time_left()
        return left is not None and left <= self.policy.lead + decide.TIMEOUT_MARGIN_S

    def queue_state(self, job: str) -> str:
        """``job``'s state in squeue (PENDING, RUNNING, ...; "" when squeue has none)."""
        return (self.slurm.queue_value(job, "%T") or [""])[0].strip()


def private_mkdir(path: str) -> None:
    """``mkdir -p`` with mode 0700 for what it creates."""
    old = os.umask(0o077)
    try:
        os.makedirs(path, exist_ok=True)
    finally:
        os.umask(old)
