"""How the chain goes on after a run: in a new job that continues it (the standby, retargeted,
or one submitted afterany this job), in Slurm's own requeue where no job can be submitted, or
not at all (the chain ends: its standby goes, Slurm must not requeue the job)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract.eventlog import CONTINUED, SLURM_FALLBACK

from . import decide
from .context import RunContext
from .successor import successor_args, successor_env

if TYPE_CHECKING:
    from .supervise import Supervisor


def touch_private(path: str) -> None:
    """Create (or empty) ``path`` with mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)


class Continuation:
    """What comes after this run: the job that continues the chain, or the chain's end."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    def enforce_budget(self, cause: str) -> int | None:
        """After logging a requeue for ``cause`` at the start of a run: end the chain when that
        requeue was over its budget (the job's exit code, 1); None: the run goes on."""
        used, allowed = self.ctx.chain.count("requeue", cause) - 1, self.ctx.budget(cause)
        total = self.ctx.chain.count("requeue") - 1
        verdict = decide.budget_verdict(cause, used, allowed, total, self.ctx.policy.max_total)
        if verdict.goes_on:
            return None
        self.ctx.event("end", "fail", verdict.reason)
        if verdict.total_spent:
            self.ctx.log(
                f"total requeue budget exhausted ({total}/{self.ctx.policy.max_total}); giving up"
            )
        else:
            self.ctx.log(f"requeue budget for {cause} exhausted ({used}/{allowed}); giving up")
        self.end_chain()
        return 1

    def successor_args(self, nodes: str = "", excluded: Sequence[str] | None = None) -> list[str]:
        """This job's sbatch options for a job that continues its chain (:mod:`.successor`);
        ``nodes``: another node count, ``excluded``: other nodes to leave out than the
        chain's."""
        comment = (self.ctx.slurm.queue_value(self.ctx.job, "%k") or [""])[0].strip()
        root = self.ctx.root or self.ctx.self_id
        if excluded is None:
            excluded = self.run.nodes.later_exclusions()
        return successor_args(
            self.ctx.policy.sbatch_args, root, excluded, self.ctx.task, comment, nodes
        )

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
        env = successor_env(self.ctx.env, self.ctx.root or self.ctx.self_id, standby_for, grow_for)
        cwd = self.ctx.env.get("SLURM_SUBMIT_DIR") or self.ctx.output_dir
        depends = ["--dependency=" + dependency] if dependency else []
        argv = [*depends, *list(extra), *args, self.ctx.script]
        result = self.ctx.slurm.submit(argv, cwd, env)
        text = (result.out + result.err).strip()
        new = result.out.strip().split(";", 1)[0]
        if result.rc != 0 or not new.isdecimal():
            raise RuntimeError(text or "sbatch failed")
        return f"{new}_{self.ctx.task}" if self.ctx.task else new

    def finished(self) -> int:
        """The program is finished: mark it done, log the chain's end; the job's exit code."""
        self.mark_done()
        state = self.ctx.state
        if state.end_rule == decide.ENDED_ON_ITS_OWN and state.signal:
            detail = "completed: exit 0, ended on its own (no stop signal reached it)"
            self.ctx.log(
                f"the program exited 0 on its own after SIG{self.ctx.policy.signal} (it "
                "listens for no warning): the job is finished, not continued"
            )
        else:
            detail = "completed"
        self.ctx.event("end", "finish", detail, None, **self.rule_field())
        self.end_chain()
        return 0

    def rule_field(self) -> dict[str, object]:
        """The ``rule`` field of an ``end`` or ``requeue`` event: why a run that exited 0 was
        taken as finished or not (:func:`.decide.exit_rule`); none where it did not apply."""
        return {"rule": self.ctx.state.end_rule} if self.ctx.state.end_rule else {}

    def mark_done(self) -> None:
        try:
            touch_private(self.ctx.done_file())
        except OSError as exc:
            self.ctx.log(f"could not write {self.ctx.done_file()}: {exc}")

    def continue_chain(self, cause: str) -> None:
        """Make the standby this run's continuation (or submit one, afterany this job), without
        the excluded nodes, and stop Slurm requeueing this job."""
        if self.run.standby.job and not self.run.standby.owns_takeover(self.run.standby.job):
            return  # the standby has taken over and logged it
        how = ""
        new = self.run.standby.retarget()
        if new:
            how = " (the standby)"
        else:
            try:
                new = self.submit_next("afterany:" + self.ctx.job, "")
            except RuntimeError as exc:
                self.ctx.log(
                    f"could not submit the continuation ({exc}); falling back to Slurm's requeue"
                )
                self.run.standby.cancel()
                self.ctx.event(
                    "requeue",
                    cause,
                    "requeued by Slurm (fallback)",
                    how=SLURM_FALLBACK,
                    **self.ctx.position(),
                )
                if not self.ctx.slurm.requeue(self.ctx.job):
                    self.ctx.log("scontrol requeue failed too")
                return
            self.run.standby.cancel()
        self.no_slurm_requeue()
        self.ctx.event(
            "requeue",
            cause,
            f"continued as job {new}{how}",
            None,
            how=CONTINUED,
            next=new,
            **self.rule_field(),
            **self.ctx.position(),
        )
        self.ctx.log(f"{cause}: continuing as job {new}{how} (starts when resources are free)")

    def no_slurm_requeue(self) -> None:
        """Tell Slurm not to requeue this job (after a preemption, Slurm >= 24.05 requeues a
        job that exits during the grace time, whatever its exit code)."""
        if self.ctx.state.requeue_off:
            return  # done when the standby was submitted
        if not self.ctx.slurm.update(self.ctx.job, "Requeue=0"):
            self.ctx.log(f"could not mark job {self.ctx.job} Requeue=0; Slurm may also requeue it")

    def stop_followers(self) -> None:
        """Nothing of the chain runs after this run: its standby goes, and the copies of the
        ranks' output."""
        self.run.standby.cancel()
        if self.ctx.capture_dir:
            shutil.rmtree(self.ctx.capture_dir, ignore_errors=True)

    def end_chain(self) -> None:
        """The chain ends with this run. Slurm 24.11 requeues the run that follows its own
        requeue of a preempted job once more when it exits: runs Slurm requeued are marked
        Requeue=0 (the others need no extra call to the controller)."""
        self.stop_followers()
        if self.ctx.restart > 0:
            self.no_slurm_requeue()
