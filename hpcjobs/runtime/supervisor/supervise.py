"""The job's supervisor: it runs on the batch host, in place of the batch shell, and owns what
happens between the job's start and its end (docs/requeue.md, "The supervisor"; docs/index.md
draws its parts and the run's phases).

:class:`Supervisor` composes one part per concern and walks the run through its phases
(:mod:`.state`):

- **begin** (:mod:`.start`): the chain this run belongs to, the checkpoint folder's owner, how
  the run before ended when nobody could say (:mod:`.standby`'s takeover, Slurm's own requeue),
  the budgets, the nodes of a job with spares (:mod:`.nodes`, :mod:`.health`), a grower's wait
  (:mod:`.growth`), and the node agents (:mod:`.nodeagents`);
- **run** (:mod:`.program`): launch the step, deliver the warning, pass SIGTERM on, watch for a
  stall and for the grower; meanwhile a standby and a grower are submitted;
- **finish**: classify how the run ended (:mod:`.ending`, :mod:`.decide`), and finish, fail, or
  continue the chain from its last checkpoint (:mod:`.continuation`), without the nodes at
  fault; or, in a job with spare nodes, run again at once on the job's remaining nodes.

Everything it decides is logged in the chain's event log (:mod:`.eventlog`). Only the standard
library: the job runs where hpcjobs may not be installed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, MutableMapping, Sequence

from hpcjobs.contract.causes import (
    CANCELLED,
    FINISHED,
    INFRASTRUCTURE,
    NODE_FAILURE,
    PREEMPTION,
    STALL,
    STRAGGLER,
)
from hpcjobs.contract.eventlog import SLURM
from hpcjobs.contract.jobenv import ENV_RESTART_COUNT
from hpcjobs.contract.slurmcmd import Slurm

from . import decide
from .context import DEFAULT_ARGV, RunContext
from .continuation import Continuation
from .ending import Ending
from .growth import Growth
from .health import Health
from .nodeagents import NodeAgents
from .nodes import Nodes
from .policy import Policy
from .program import Program
from .repeats import Repeats
from .standby import Standby
from .start import Start
from .state import END, FINISH
from .stragglers import Stragglers


class Supervisor:
    """One run of a chain, supervised: the parts, and the order the run goes through them."""

    def __init__(
        self,
        policy: Policy,
        script: str,
        launch: Sequence[str],
        slurm: Slurm | None = None,
        env: MutableMapping[str, str] | None = None,
        program: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.ctx = RunContext(
            policy,
            script,
            os.environ if env is None else env,
            slurm,
            tuple(program) or DEFAULT_ARGV,
            clock,
            sleep,
        )
        self.state = self.ctx.state
        self.start = Start(self)
        self.program = Program(self, launch)
        self.agents = NodeAgents(self)
        self.standby = Standby(self)
        self.growth = Growth(self)
        self.nodes = Nodes(self)
        self.health = Health(self)
        self.ending = Ending(self)
        self.continuation = Continuation(self)
        self.repeats = Repeats(self)
        self.stragglers = Stragglers(self)

    def main(self) -> int:
        """Supervise this job's runs; the job's exit code."""
        for name in self.ctx.policy.forward:
            signal.signal(getattr(signal, "SIG" + name), self.on_signal)
        try:
            stop = self.start.begin()
            if stop is not None:
                return stop
            self.program.launch()
            # While the program starts up: it never waits for sbatch. A batch host lost before
            # the standby is there falls back to Slurm's requeue (Requeue=0 comes with it).
            self.standby.submit()
            self.growth.submit()
            code = self.finish(self.program.wait())
            while code is None:  # a fault this job recovers from on its remaining nodes
                self.relaunch()
                code = self.finish(self.program.wait())
            self.state.phase = END
            self.program.launcher_ended()
            return code
        except Exception as exc:
            return self.crashed(exc)

    def crashed(self, exc: BaseException) -> int:
        """The supervisor itself failed: say so in the event log, let nothing of the chain
        run after this job (its standby would blame this batch host), stop the step."""
        what = f"supervisor error: {type(exc).__name__}: {exc}"
        self.ctx.log(what)
        self.growth.close_watch(END)  # no new grower from the watch
        if self.ctx.grow_for and not self.ctx.chain.continued_as(self.ctx.self_id):
            return 1  # a grower that never took over: the chain goes on without it
        self.ctx.event("end", "fail", what)
        for action in (self.standby.cancel, self.growth.drop, self.agents.stop):
            with contextlib.suppress(Exception):
                action()
        if self.program.child is not None and self.program.child.poll() is None:
            with contextlib.suppress(OSError):
                self.program.child.kill()
        return 1

    def on_signal(self, signum: int, _frame: object) -> None:
        """Records the signal, nothing more: the main thread acts on it
        (:meth:`.program.Program.act_on_signals`)."""
        self.state.record(signal.Signals(signum).name[3:], self.ctx.policy.signal)

    def relaunch(self) -> None:
        """The next run, inside this job, on the nodes :meth:`.nodes.Nodes.take` chose. A SIGTERM
        from Slurm that came during the recovery stays seen: the next run ends at once."""
        self.state.new_run()
        self.start.prepare_run()
        self.agents.start()
        count = max(self.ctx.chain.count("start"), self.ctx.restart)
        self.ctx.env[ENV_RESTART_COUNT] = str(count)
        self.start.announce(count)
        self.program.launch()
        self.growth.submit()
        excluded = self.ctx.chain.excluded()
        if self.standby.job and excluded:
            # Should this batch host die too, its standby starts without them.
            self.ctx.slurm.update(self.standby.job, "ExcNodeList=" + ",".join(excluded))

    def finish(self, rc: int) -> int | None:
        """Decide and act after the launcher exited; the job's exit code. The agents are
        asked to end first and waited for last: after a node failure Slurm kills this job
        within KillWait, and the decision must be logged (and the standby retargeted) before
        that; and the job must end as soon as the standby may start, for the sooner it ends,
        the likelier Slurm's next scheduling pass starts the standby (one that runs between
        the standby's update and the job's end wastes up to batch_sched_delay, 3 s). None:
        the chain runs again inside this job (:meth:`relaunch`)."""
        if self.program.watch is not None:
            self.program.watch.close()
            self.stragglers.take(self.program.watch)
        watch = self.growth.close_watch(FINISH)
        self.agents.ask_to_end()
        try:
            growing = watch is not None and watch.started.is_set()
            outcome = self.growth.hand_over() if growing and not self.ctx.is_done() else "decide"
            if outcome == "handed":
                return 0
            if outcome == "again":
                return None
            code = self.decide_and_act(rc)
            if code is not None:
                self.growth.drop()  # the chain ends, or goes on in another job
            return code
        finally:
            self.agents.stop()

    def decide_and_act(self, rc: int) -> int | None:
        """What :meth:`finish` does once the step has exited."""
        if self.ctx.is_done():
            self.ctx.event("end", "finish", "done marker present")
            self.continuation.end_chain()
            return 0
        cause, suspect, evidence = self.ending.classify(rc)
        failed: list[str] = []
        if cause == NODE_FAILURE:
            # The standby may be logging this already: then leave it to it.
            if self.standby.job and not self.standby.owns_takeover(self.standby.job):
                return rc
            failed = self.nodes.blame_failed_nodes()
        if cause.startswith("requeued_"):
            cause = cause[len("requeued_") :]
            self.ctx.event(
                "requeue",
                cause,
                f"requeued by Slurm (restart {self.ctx.restart + 1})",
                how=SLURM,
                stopped_run=self.ctx.restart,
                **self.ctx.position(),
            )
            self.ctx.log(
                f"{cause}: Slurm requeued this job itself; its next run resumes from the last "
                "checkpoint"
            )
            return rc
        if cause == FINISHED:
            return self.continuation.finished()
        if cause == CANCELLED:
            self.ctx.event("end", "fail", "cancelled")
            self.continuation.stop_followers()
            return decide.exit_code(cause, rc, False)
        if cause == STRAGGLER:
            return self.stragglers.swap(suspect, evidence)
        end = self.repeats.this_end(cause, suspect, evidence)
        stop = self.repeats.storm_stop(end, rc)
        if stop is not None:
            return stop
        used, allowed = self.ctx.chain.count("requeue", cause), self.ctx.budget(cause)
        verdict = decide.budget_verdict(
            cause, used, allowed, self.ctx.chain.count("requeue"), self.ctx.policy.max_total, rc
        )
        if not verdict.goes_on:
            self.ctx.event("end", "fail", verdict.reason)
            if cause == PREEMPTION:
                self.continuation.no_slurm_requeue()
                self.continuation.stop_followers()
            else:
                self.continuation.end_chain()
            if verdict.total_spent:
                self.ctx.log(
                    f"{cause}, but the total requeue budget is exhausted "
                    f"({self.ctx.chain.count('requeue')}/{self.ctx.policy.max_total})"
                )
            else:
                self.ctx.log(
                    f"{cause} (exit code {rc}); not requeued ({used}/{allowed} requeues used)"
                )
            return decide.exit_code(cause, rc, False)
        if cause in (INFRASTRUCTURE, STALL) and self.repeats.blame_suspect(end):
            failed = [suspect]
        if self.nodes.stays_in_job(cause, failed):
            return None
        self.continuation.continue_chain(cause)
        return 0
