"""The program's step: launched on the run's nodes, watched while it runs, and told what the
supervisor was told (docs/requeue.md, "Signals").

The signal handler only records a signal (:meth:`.state.RunState.record`); while the step runs,
the main thread looks every :data:`WAIT_LOOK_S` seconds and acts (:meth:`Program.act_on_signals`):
it logs the run's first signal, has the warning delivered to the program's processes that
listen for it (:mod:`.nodeagents`), and passes Slurm's SIGTERM on to the launcher. It also
turns the program's own ``scontrol requeue`` (:mod:`.requeuerequest`) into the run's end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract import names

from . import decide, requeuerequest
from .agent import AGENT_STEP
from .agent import interval as agent_interval
from .context import RunContext
from .sigsafe import to_stderr
from .stall import StallWatch
from .state import FINISH, RUN
from .windup import StepControl

if TYPE_CHECKING:
    from .supervise import Supervisor

#: How long the supervisor waits for the launcher after a SIGTERM before it decides anyway.
#: Slurm kills the whole job KillWait (30 s by default) after its SIGTERM, and a step of many
#: nodes can take longer than that to end: the decision must be logged before.
TERM_WAIT_S = 3

#: How often the supervisor acts on the signals it recorded and looks for a requeue request
#: while the program runs (one stat of the request file each time, on the batch host only).
WAIT_LOOK_S = 0.2
#: How long a step gets to end after the program's own requeue request before it is killed.
REQUEST_GRACE_S = 30

#: A job step's id as squeue prints it (``<job>.<step>``, an array task's ``<array>_<task>``
#: first): the batch and extern steps are not among them.
STEP_ID = re.compile(r"[0-9_]+\.[0-9]+")


class Program:
    """The program's step: its launcher (``argv``), its stall watch, its requeue request."""

    def __init__(self, run: Supervisor, argv: Sequence[str]) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx
        self.argv = list(argv)
        self.child: subprocess.Popen[bytes] | None = None
        self.watch: StallWatch | None = None
        #: The file the program's own ``scontrol requeue`` writes (:mod:`.requeuerequest`),
        #: when the supervisor saw it (monotonic; 0: not yet), and whether the step outlived it.
        self.request_file = ""
        self.requested_at = 0.0
        self.request_killed = False
        #: When the launcher of the current run exited, or :meth:`wait` stopped waiting for it
        #: (epoch seconds; 0: still running).
        self.exited_at = 0.0

    def control(self, grace: float) -> StepControl:
        """What a watch needs to end this run's step, ``grace`` seconds after the warning."""
        assert self.child is not None
        return StepControl(
            self.child,
            self.ctx.policy.signal,
            grace,
            self.ctx.log,
            self.kill_steps,
            self.run.agents.warn,
        )

    def act_on_signals(self) -> None:
        """Act on the signals recorded since the last look: the run's first one goes in the
        event log (hpcjobs report: time from the warning to the end), the warning is delivered
        to the program's processes that listen for it, SIGTERM goes on to the launcher."""
        state = self.ctx.state
        child = self.child
        for name, when in state.take_pending():
            if child is not None and state.phase == RUN and not state.signal_logged:
                state.signal_logged = True
                self.ctx.event("signal", state.signal, "SIG" + name, when, signal="SIG" + name)
            if name != "TERM" or self.ctx.policy.signal == "TERM":
                to_stderr(
                    f"hpcjobs: SIG{name} received (the warning): delivering it to the program's "
                    "processes that listen for it\n"
                )
                state.warn_due = True
            elif child is not None and child.poll() is None:
                to_stderr(
                    f"hpcjobs: SIGTERM received, forwarding it to the launcher (pid {child.pid})\n"
                )
                state.term_sent = True
                with contextlib.suppress(OSError):
                    child.send_signal(signal.SIGTERM)
        if state.warn_due and child is not None:
            state.warn_due = False
            self.run.agents.warn()

    def kill_late_request(self) -> None:
        """Kill the step once it has outlived the program's requeue request by
        :data:`REQUEST_GRACE_S`."""
        if time.monotonic() - self.requested_at > REQUEST_GRACE_S:
            self.ctx.log(
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
            self.ctx.log(
                "the program asked Slurm to requeue the job (scontrol requeue): ending this run; "
                "the chain continues from the program's checkpoint"
            )
            child = self.child
            if child is not None and child.poll() is None:
                self.ctx.state.term_sent = True
                if self.argv[:1] == ["srun"]:
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
        full = self.ctx.policy.nodes
        count = len(self.ctx.run_nodes)
        if not count:
            held = self.ctx.env.get("SLURM_JOB_NUM_NODES", "")
            count = min(full, int(held)) if held.isdecimal() and full else full
        if full and count and count != full:
            sized = decide.sized_launch(argv, full, count)
            if sized is None:
                self.ctx.log(
                    f"the launch command cannot be sized to {count} nodes (srun has no "
                    f"--nodes={full} among its options); it runs as written"
                )
            else:
                argv = sized
        if self.ctx.run_nodes:
            argv = [argv[0], "--nodelist=" + ",".join(self.ctx.run_nodes), *argv[1:]]
        return argv

    def launch(self) -> None:
        """Start the step (sized to the run's nodes in a job with spares), its stall watch and
        the grower's watch."""
        argv, env = list(self.argv), self.ctx.env
        # The program's own 'scontrol requeue' is a request to this supervisor.
        self.request_file = os.path.join(self.ctx.progress_dir, f"requeue-{self.ctx.self_id}")
        with contextlib.suppress(OSError):
            os.unlink(self.request_file)
        self.requested_at = 0.0
        self.request_killed = False
        try:
            shim = requeuerequest.install(os.path.join(self.ctx.output_dir, names.SUPPORT_DIR))
            env = requeuerequest.step_env(dict(env), shim, self.request_file)
        except OSError as exc:
            self.ctx.log(
                f"could not write the scontrol shim ({exc}); a program's own requeue fails"
            )
        if self.ctx.policy.in_job:
            # srun takes SLURM_NTASKS (the job's tasks, spares included) for --ntasks: without
            # it, a run's tasks are its --nodes times --ntasks-per-node.
            env = {k: v for k, v in env.items() if k not in ("SLURM_NTASKS", "SLURM_NPROCS")}
            argv = self.sized(argv)
        self.exited_at = 0.0
        self.child = subprocess.Popen(argv, env=env)
        self.ctx.state.phase = RUN  # a signal from here on is the program's, and is logged
        self.act_on_signals()  # the warning may have come while the run began
        self.watch = None
        policy = self.ctx.policy
        if policy.stall_timeout > 0 or policy.straggler_ratio > 0:
            self.watch = StallWatch(
                self.control(policy.stall_grace),
                self.ctx.progress_dir,
                self.ctx.job,
                policy.stall_timeout,
                agent_interval(policy.stall_timeout),
                self.ctx.ckpt_dir,
                policy.straggler_ratio,
                policy.straggler_window,
                self.run.stragglers.can_swap,
            )
            self.watch.start()
        self.run.growth.start_watch()

    def wait(self) -> int:
        """The launcher's exit code; once Slurm's SIGTERM came, at most :data:`TERM_WAIT_S`
        later (128 + SIGTERM while the launcher still winds down): the decision is logged
        before KillWait runs out, and :meth:`launcher_ended` waits for the rest. Not while the
        run hands over to a grower: the handover's checkpoint comes first."""
        assert self.child is not None
        self.ctx.state.phase = RUN
        while True:
            try:
                rc = self.child.wait(timeout=WAIT_LOOK_S)
                break
            except subprocess.TimeoutExpired:
                self.act_on_signals()
                self.run.stragglers.take(self.watch)
                if self.requested() and not self.request_killed:
                    self.kill_late_request()
                moving = (
                    self.run.growth.watch is not None and self.run.growth.watch.started.is_set()
                )
                if (
                    self.ctx.state.term_at
                    and not moving
                    and time.monotonic() - self.ctx.state.term_at >= TERM_WAIT_S
                ):
                    self.ctx.log(
                        f"the launcher is still ending {TERM_WAIT_S} s after SIGTERM; deciding "
                        "now (Slurm ends the job)"
                    )
                    rc = -signal.SIGTERM
                    break
        self.exited_at = time.time()
        self.act_on_signals()  # one that came as the step ended is still logged
        self.run.stragglers.take(self.watch)
        self.ctx.state.phase = FINISH
        return 128 - rc if rc < 0 else rc

    def launcher_ended(self) -> None:
        """Wait for a launcher still ending after the decision (:meth:`wait`): the job, and
        so the dependency of the job that continues the chain, ends only with it, and the
        program keeps its time to finish a checkpoint until Slurm's KillWait."""
        if self.child is not None:
            self.child.wait()

    def kill_steps(self) -> None:
        """SIGKILL to every job step of this job but the batch step and hpcjobs' own monitors."""
        self.signal_steps("KILL")

    def signal_steps(self, name: str) -> None:
        """SIG``name`` to every job step of this job but the batch step and hpcjobs' own
        monitors (one squeue, one scancel per step)."""
        for line in self.ctx.slurm.queue_value(self.ctx.job, "%i %j", steps=True):
            words = line.split()
            if len(words) < 2 or words[1] == AGENT_STEP:
                continue
            if STEP_ID.fullmatch(words[0]):
                self.ctx.slurm.cancel(words[0], name)
