"""The standby: a job of the chain that waits, pending, for this run to fail
(``afternotok``), so that a dead batch host costs seconds, not a requeue held for minutes
(docs/requeue.md, "The standby"). The run that ends normally retargets it as its continuation;
a standby that Slurm releases because its run died logs how that run ended (:meth:`take_over`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpcjobs.contract.causes import (
    INFRASTRUCTURE,
    NODE_FAILURE,
)
from hpcjobs.contract.eventlog import TOOK_OVER
from hpcjobs.contract.slurmstates import has_ended
from hpcjobs.contract.slurmtext import field
from hpcjobs.contract.slurmtime import epoch

from . import decide
from .context import RunContext

if TYPE_CHECKING:
    from .supervise import Supervisor


class Standby:
    """This run's standby job (``job``; "" when it has none), and the run's claim on logging
    how a run ended (``claimed``)."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx
        self.job = ""
        self.claimed = ""

    def submit(self) -> None:
        """Give this run a standby (while the node failure budget lasts), and stop Slurm
        requeueing this job itself: with a standby, a dead node ends the job at once and
        releases its standby, instead of a requeue held for ~2 minutes. Not for array tasks,
        nor for a job submitted --no-requeue."""
        if not self.ctx.policy.standby or self.ctx.task:
            return
        if self.ctx.chain.count("requeue", NODE_FAILURE) >= self.ctx.budget(NODE_FAILURE):
            return
        # A run of this job that Slurm requeued anyway left a standby: it must never start.
        old = self.ctx.chain.standby_for(self.ctx.self_id)
        if old:
            self.ctx.slurm.cancel(old)
        if self.run.ending.being_cancelled():
            return
        try:
            new = self.run.continuation.submit_next(
                "afternotok:" + self.ctx.job, self.ctx.self_id, ["--kill-on-invalid-dep=yes"]
            )
        except RuntimeError as exc:
            self.ctx.log(
                f"could not submit a standby job ({exc}); a node failure falls back to Slurm's "
                "requeue"
            )
            return
        self.ctx.event(
            "standby",
            "-",
            f"standby job {new} for job {self.ctx.self_id}",
            standby=new,
            standby_for=self.ctx.self_id,
        )
        # A cancel that came while sbatch ran: the standby goes at once (afternotok counts a
        # cancelled job as failed). The standby checks this too when it starts.
        if self.run.ending.being_cancelled():
            if not self.ctx.slurm.cancel(new):
                self.ctx.log(f"could not cancel the standby job {new}")
            self.ctx.log(
                f"job {self.ctx.job} is being cancelled; its standby job {new} is cancelled too"
            )
            return
        self.job = new
        if self.ctx.slurm.update(self.ctx.job, "Requeue=0"):
            self.ctx.state.requeue_off = True
        else:
            self.ctx.log(
                f"could not mark job {self.ctx.job} Requeue=0; after a node failure Slurm may "
                "requeue it too"
            )

    def final_state(self, job: str, state: str) -> str:
        """How ``job`` ended (CANCELLED, NODE_FAIL, ...), ``state`` being what 'scontrol show
        job' said. Slurm releases an afternotok dependency as soon as the job has ended, while
        it may still show COMPLETING; accounting has the final state then. Asks both, twice a
        second, for at most HPCJOBS_FINAL_STATE_WAIT s (60); "" if neither says."""
        wait = self.ctx.env.get("HPCJOBS_FINAL_STATE_WAIT", "60")
        deadline = self.ctx.clock() + (int(wait) if wait.isdecimal() else 60)
        while True:
            if has_ended(state):
                return state.split(" ", 1)[0]
            state = self.ctx.slurm.acct_state(job)
            if has_ended(state):
                return state
            if self.ctx.clock() >= deadline:
                return ""
            self.ctx.sleep(0.5)
            state = field(self.ctx.slurm.show_job(job), "JobState")

    def cancel(self) -> None:
        """The chain does not continue after this run: its standby goes."""
        if not self.job:
            return
        if not self.ctx.slurm.cancel(self.job):
            self.ctx.log(f"could not cancel the standby job {self.job}")
        self.ctx.unclaim(self.job)
        self.job = ""

    def owns_takeover(self, standby: str) -> bool:
        """Whether this process logs how the run before ``standby`` ended. That run (when its
        batch host lives on) and the standby (when it does not) may both try: one atomic
        mkdir decides."""
        if self.claimed == standby:
            return True
        if not self.ctx.claim(standby):
            return False
        self.claimed = standby
        return True

    def retarget(self) -> str:
        """Make the standby this run's continuation (it starts when this job ends, however it
        ends, without the excluded nodes); its id, or "" when there is none or Slurm refuses."""
        if not self.job:
            return ""
        # Two updates: Slurm refuses the whole of one that holds a refused field. If the
        # exclusion comes too late, the standby hands over when it starts.
        excluded = self.run.nodes.later_exclusions()
        if excluded or self.ctx.chain.count("exclude"):  # an empty list lifts a released one
            self.ctx.slurm.update(self.job, "ExcNodeList=" + ",".join(excluded))
        if not self.ctx.slurm.update(self.job, "Dependency=afterany:" + self.ctx.job):
            # Slurm may already have started it (this run died of a node failure).
            state = self.ctx.queue_state(self.job)
            if not state or state == "PENDING":
                return ""
        return self.job

    def take_over(self) -> int | None:
        """This job is a standby and Slurm released it. When the run it stood by for
        retargeted it, it is an ordinary continuation. Otherwise that run died without a word:
        record why (from Slurm), exclude the failed nodes, and enforce the budget. The job's
        exit code where it must not run the program; None where it goes on."""
        pred = self.ctx.standby_for
        if not self.owns_takeover(self.ctx.self_id):
            # The run it stood by for is logging how it ended right now: wait for that.
            for _ in range(60):
                if self.ctx.chain.continued_as(self.ctx.self_id):
                    break
                self.ctx.sleep(0.25)
        if self.ctx.chain.continued_as(self.ctx.self_id):
            return None
        grower = self.ctx.chain.grower_for(pred)
        if grower:  # it would wait for a run that is gone
            self.run.growth.cancel_job(grower)
        if self.ctx.chain.ended_after_standby(self.ctx.self_id):
            self.ctx.log(f"the chain ended with job {pred}; its standby does not run")
            return 0
        info = self.ctx.slurm.show_job(pred)
        state, end = field(info, "JobState"), field(info, "EndTime")
        nodes, batch = field(info, "NodeList"), field(info, "BatchHost")
        if not state:
            # The controller has forgotten it (MinJobAge): accounting knows how and where.
            state, end, nodes = self.ctx.slurm.acct_last(pred)
        state = self.final_state(pred, state)
        lost = self.ctx.chain.batch_host_lost(pred)
        if lost:
            # A job with spare nodes outlives its batch host: a node agent saw it go, logged
            # the fault and cancelled the job (CANCELLED in Slurm) for this standby.
            state = "NODE_FAIL"
        cause = decide.standby_cause(state)
        if cause is None:
            self.ctx.event("end", "fail", f"cancelled: job {pred} was cancelled")
            self.ctx.log(f"job {pred} was cancelled; its standby does not run")
            return 0
        self.record_takeover(pred, cause, state, epoch(end), lost, nodes, batch)
        return self.run.continuation.enforce_budget(cause)

    def record_takeover(
        self,
        pred: str,
        cause: str,
        state: str,
        when: float | None,
        lost: str,
        nodes: str,
        batch: str,
    ) -> None:
        """Log how run ``pred`` ended (``cause``, Slurm's ``state`` at ``when``) and that this
        standby takes over, and exclude the nodes at fault: the batch host an agent saw
        ``lost``, else the nodes that failed among ``nodes`` (``batch``: its batch host)."""
        failed: list[str] = []
        if lost:
            failed = [lost]
            self.run.nodes.exclude(cause, failed)
        elif cause in (NODE_FAILURE, INFRASTRUCTURE):
            failed = self.run.nodes.failed_nodes(pred, nodes, batch)
            evidence = "job {} ended {} without a word (batch host {})".format(
                pred, state or "?", batch or "?"
            )
            self.ctx.event(
                "fault",
                cause,
                "node={} job={} evidence={}".format(",".join(failed) or "-", pred, evidence),
                when,
                node=",".join(failed) or None,
                stopped_job=pred,
                evidence=evidence,
            )
            if failed:
                self.run.nodes.exclude(cause, failed)
        self.ctx.event(
            "requeue",
            cause,
            "standby job {} took over from job {} ({})".format(
                self.ctx.self_id, pred, state or "?"
            ),
            when,
            how=TOOK_OVER,
            next=self.ctx.self_id,
            stopped_job=pred,
            slurm_state=state or None,
            **self.ctx.position(),
        )
        self.ctx.log(
            "{}: job {} ended {}{}; standby job {} takes over".format(
                cause,
                pred,
                state or "?",
                " (failed: {})".format(",".join(failed)) if failed else "",
                self.ctx.self_id,
            )
        )
