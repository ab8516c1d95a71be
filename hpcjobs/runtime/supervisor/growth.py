"""Growing back (docs/requeue.md, "Growing back"): a run of an elastic job below its full size
keeps a grower, a pending job of the chain that asks for more nodes; once Slurm runs it, the
run makes way (:class:`.grow.GrowWatch`) and hands over, or, when the grower is gone, runs
again inside its own job. The grower's side waits for that handover
(:meth:`Growth.wait_for_handover`). Where Slurm permits job expansion and the job holds no GRES,
the grower is a helper allocation for the missing nodes only, which joins the job
(:mod:`.expansion`)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract import names
from hpcjobs.contract.causes import (
    GROW,
)
from hpcjobs.contract.eventlog import IN_JOB

from . import decide, expansion
from .context import RunContext, private_mkdir
from .expansion import Helper
from .grow import GrowerLink, GrowWatch
from .successor import successor_env

if TYPE_CHECKING:
    from .supervise import Supervisor


#: How long a grower waits for the run it grows to hand over, beyond the warning lead time
#: that run's program gets to checkpoint.
GROW_WAIT_MARGIN_S = 60


class Growth:
    """This run's grower (``grower``; "" when it has none) and its watch. The watch's thread
    may replace the grower until the run leaves its RUN phase: ``lock`` orders the two."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx
        self.grower = ""
        #: The grower's salloc when it is a helper allocation that joins this job.
        self.helper: Helper | None = None
        self.watch: GrowWatch | None = None
        self.lock = threading.Lock()
        #: Why this job cannot grow in place ("" it can; None: not asked yet).
        self._no_expansion: str | None = None
        #: Set while a grower is being submitted (by either thread).
        self.submitting = False

    def expansion_refused(self) -> str:
        """Why this job's runs cannot grow in place ("" when they can): asked once per job
        (the site config, the job's GRES, the controller's SchedulerParameters)."""
        if self._no_expansion is None:
            info = self.ctx.slurm.show_job(self.ctx.job)
            if not info:  # Slurm did not answer: move this time, ask again next time
                return "Slurm did not show this job"
            site = self.ctx.policy.job_expansion
            config = self.ctx.slurm.config() if site is None else ""
            self._no_expansion = expansion.why_not(site, config, info)
        return self._no_expansion

    def close_watch(self, phase: str) -> GrowWatch | None:
        """The run enters ``phase`` (finish, end): no grower comes from the watch's thread any
        more, and the watch ends. The watch (whether the run was making way for its grower)."""
        with self.lock:
            self.ctx.state.phase = phase
            watch = self.watch
        if watch is not None:
            watch.close()
        return watch

    def submit(self) -> None:
        """A run of an elastic job below its full size: give it a grower, a job of the chain
        that waits in the queue for more nodes than the run has and takes over once Slurm runs
        it (:mod:`.grow`). Not for array tasks, nor for a job submitted --no-requeue, nor with
        too little time left for the move to pay off. May run in the grow watch's thread: a
        grower submitted once the run is finishing is cancelled at once."""
        with self.lock:
            if self.grower or self.submitting or self.ctx.task or not self.ctx.policy.standby:
                return
            self.submitting = True  # the watch's thread and the main thread never both submit
        try:
            self._submit()
        finally:
            self.submitting = False

    def _submit(self) -> None:
        """:meth:`submit`, once it is this thread's to do."""
        older = self.ctx.chain.grower_for(self.ctx.self_id)
        if older:  # a run of this job before Slurm requeued it left one, or it is gone
            self.ctx.slurm.cancel(older)
        run = len(self.ctx.run_nodes)
        if not self.ctx.policy.elastic or not run or run >= self.ctx.policy.nodes:
            return
        if self.ctx.time_short():
            return
        low, high = decide.grower_size(
            run, self.ctx.policy.nodes, self.ctx.policy.spare_nodes, self.ctx.policy.node_multiple
        )
        size = decide.node_count(low, high)
        # The chain's exclusions, the newest kept, as far as the grower still fits the
        # partition (a node that failed may be the one that has to come back).
        excluded = self.ctx.chain.excluded()
        total = self.run.nodes.partition_nodes()
        if total is not None and excluded:
            limit = max(total - low, 0)
            excluded, released = decide.excluded_after([], excluded, limit)
            if released:
                self.ctx.event(
                    "exclude",
                    GROW,
                    f"nodes={','.join(excluded) or '-'} released={','.join(released)} "
                    f"(at most {limit} excluded for {low} nodes)",
                    nodes=excluded,
                    released=released,
                    limit=limit,
                )
                self.ctx.log(f"no longer excluding {' '.join(released)}: a larger run needs them")
        helper: Helper | None = None
        refused = self.expansion_refused()
        if not refused:
            # What the job misses (it may hold more nodes than the run: a node multiple).
            held = max(len(self.ctx.allocation), run)
            missing = decide.node_count(max(low - held, 1), max(high - held, 1))
            try:
                helper = self.start_helper(missing, excluded)
                size = missing
            except RuntimeError as exc:
                refused = self._no_expansion = f"Slurm refused the helper allocation ({exc})"
                self.ctx.log(f"could not ask Slurm for nodes to join this job ({exc}); moving")
        if helper is not None:
            new = helper.job
        else:
            try:
                new = self.run.continuation.submit_next(
                    "", nodes=size, grow_for=self.ctx.self_id, excluded=excluded
                )
            except RuntimeError as exc:
                self.ctx.log(
                    f"could not submit a grower job ({exc}); this job stays at {run} nodes"
                )
                return
        joins = helper is not None
        self.ctx.event(
            "grower",
            "-",
            f"grower job {new} for job {self.ctx.self_id} waits for {size} nodes"
            + (" to join it" if joins else ""),
            grower=new,
            grower_for=self.ctx.self_id,
            size=size,
            joins=joins,
        )
        how = " more, to join this job" if joins else f" beside it ({refused})"
        self.ctx.log(
            f"running on {run} of {self.ctx.policy.nodes} nodes; job {new} waits for {size}{how}"
        )
        with self.lock:
            keep = not self.ctx.state.ending and not self.run.ending.being_cancelled()
            if keep:
                self.grower, self.helper = new, helper
                self.start_watch()
        if not keep:
            self.cancel_job(new)
            if helper is not None:
                helper.stop()

    def start_helper(self, size: str, excluded: Sequence[str]) -> Helper:
        """Ask Slurm for ``size`` more nodes for this job: a helper allocation that waits in
        the queue (:mod:`.expansion`), on none of ``excluded``, of the job's own nodes (a job
        that shares its nodes would get more of one of them), nor of the nodes Slurm orders
        before its batch host (:meth:`.nodes.Nodes.ahead_of_batch_host`). Raises RuntimeError
        with salloc's message."""
        mine = [node for node in self.ctx.allocation if node not in excluded]
        mine += [node for node in self.run.nodes.ahead_of_batch_host() if node not in mine]
        left = self.ctx.time_left()
        minutes = (left // 60) if left is not None else 0
        argv = expansion.helper_args(
            self.ctx.policy.sbatch_args,
            self.ctx.job,
            self.run.nodes.partition(),
            size,
            [*excluded, *mine],
            minutes or 1,
        )
        if left is None:
            argv = [a for a in argv if not a.startswith(("--time=", "--time-min=", "--deadline="))]
        env = successor_env(self.ctx.env, self.ctx.root or self.ctx.self_id, "")
        cwd = self.ctx.env.get("SLURM_SUBMIT_DIR") or self.ctx.output_dir
        try:
            proc = self.ctx.slurm.allocate(argv, cwd, env)
        except OSError as exc:
            raise RuntimeError(f"salloc: {exc}") from exc
        return Helper.start(proc)

    def start_watch(self) -> None:
        """Watch this run's grower while the run goes on (:class:`.grow.GrowWatch`)."""
        self.watch = None
        if not self.grower or self.run.program.child is None:
            return
        grower, helper = self.grower, self.helper
        marker = os.path.join(self.ctx.output_dir, names.grow_ready(grower))

        def ready() -> bool:
            return helper.granted() if helper is not None else os.path.isdir(marker)

        def claim() -> bool:
            # Not while the run is being ended (a cancel, a warning): it ends as it would. A
            # helper allocation has no supervisor that could give up: nothing to claim.
            if self.ctx.state.signal:
                return False
            return helper is not None or self.ctx.claim(grower)

        def warn() -> None:
            # The run ends on the warning signal, not by itself (a SIGTERM seen since stays).
            self.ctx.state.mark_warning()

        link = GrowerLink(
            ready,
            claim,
            lambda: self.ctx.queue_state(grower),
            warn,
            self.replace,
        )
        self.watch = GrowWatch(self.run.program.control(self.ctx.policy.lead), grower, link)
        self.watch.start()

    def replace(self) -> None:
        """The grower ended without taking over (its run would have been no larger, it gave
        up, someone cancelled it): another one, while the run goes on (and is not being
        ended). Runs in a thread of its own, started by the grow watch."""
        with self.lock:
            if self.ctx.state.ending:
                return
            gone, self.grower = self.grower, ""
            helper, self.helper = self.helper, None
        if helper is not None:  # it may hold its nodes still (the run did not make way)
            helper.stop()
            self.cancel_job(gone)
        self.ctx.log(f"the grower job {gone} ended without taking over")
        self.submit()

    def drop(self) -> None:
        """The chain does not go on in this run's grower: it goes."""
        if self.grower:
            self.cancel_job(self.grower)
        if self.helper is not None:
            self.helper.stop()
        self.grower, self.helper = "", None

    def cancel_job(self, job: str) -> None:
        """Cancel grower ``job`` (the job's log says so when Slurm refuses)."""
        if not self.ctx.slurm.cancel(job):
            self.ctx.log(f"could not cancel the grower job {job}")

    def hand_over(self) -> str:
        """This run claimed the move to its grower and made way for it: "handed" once the
        handoff is logged (the grower waits for it); when the grower is gone meanwhile, "again"
        if the chain runs again inside this job, else "handed" once it continues in another;
        "decide" when this job is being cancelled or requeued by Slurm: its end is decided as
        any other."""
        grower = self.grower
        info = self.ctx.slurm.show_job(self.ctx.job)
        if self.run.ending.being_cancelled(info) or self.run.ending.requeued_by_slurm(info):
            return "decide"
        if self.helper is not None:
            return self.join()
        state = self.ctx.queue_state(grower)
        if not state:  # once may be a failed ask
            self.ctx.sleep(1)
            state = self.ctx.queue_state(grower)
        if state != "RUNNING":
            self.ctx.log(f"the grower job {grower} is gone ({state or 'not in the queue'})")
            self.grower = ""
            short = self.ctx.time_short()
            self.run.agents.stop()
            return self.run_again(short, f"grower {grower} gone")
        self.ctx.event(
            "handoff",
            GROW,
            f"continued as job {grower}: it holds more nodes than this run's "
            f"{len(self.ctx.run_nodes)}",
            next=grower,
            nodes=[],
            **self.ctx.position(),
        )
        self.ctx.log(f"continuing as job {grower}, on more nodes, from the last checkpoint")
        self.grower = ""
        self.run.standby.cancel()  # the grower submits its own
        self.run.continuation.no_slurm_requeue()
        return "handed"

    def join(self) -> str:
        """This run made way for its helper allocation: its nodes join the job, and the chain
        runs again inside it, on the larger set ("again"); when Slurm refused, on the nodes it
        had, and later growers move instead of joining. "handed" when too little time is left
        and the chain continues in another job."""
        helper = self.grower
        self.run.agents.stop()
        try:
            joined = self.run.nodes.join(helper)
        finally:
            self.grower, self.helper = "", None
        if joined is None:
            self._no_expansion = f"Slurm did not add the nodes of job {helper} to this job"
            joined = []
        why = f"{','.join(joined)} joined from job {helper}" if joined else "none joined"
        return self.run_again(self.ctx.time_short(), why, joined)

    def run_again(self, short: bool, why: str, joined: list[str] | None = None) -> str:
        """After a growth or a move that fell through, the run's agents stopped: the chain runs
        again inside this job, on the nodes :meth:`.nodes.Nodes.take` chooses ("again", a
        ``requeue`` of cause grow saying ``why``, and which nodes ``joined`` after a growth in
        place), unless the job has too little time left (``short``) or too few nodes: then it
        continues in another job ("handed")."""
        grown = {} if joined is None else {"joined": joined}
        if not short and self.run.nodes.take():
            nodes = ",".join(self.ctx.run_nodes)
            self.ctx.event(
                "requeue",
                GROW,
                f"continued in job {self.ctx.self_id} on {nodes} ({why})",
                None,
                how=IN_JOB,
                **grown,
                stopped_run=self.ctx.restart,
                **self.ctx.position(),
            )
            self.ctx.log(f"running again in this job on {nodes}, from the last checkpoint")
            return "again"
        self.run.continuation.continue_chain(GROW)
        return "handed"

    def wait_for_handover(self) -> int | None:
        """This job is a grower and Slurm runs it: when its run is larger than the one it grows,
        say so and wait until that run hands over (it checkpoints first): None. The job's exit
        code, 0, when it does not run the program: when its run would be no larger (it goes;
        that run goes on), when Slurm requeued it before it took over, or when that run ended
        otherwise (the chain went on elsewhere, or is over) or did not claim the move in time.
        Logs nothing in the chain before the handoff: until then the grower is not part of
        it."""
        pred = self.ctx.grow_for
        if self.ctx.restart > 0 or self.ctx.is_done():
            self.ctx.log(f"job {pred} did not hand over to this job; it does not run")
            return 0
        starts = [e for e in self.ctx.chain.events if e.event == "start" and e.job_id == pred]
        theirs = len(starts[-1].text("nodelist").split(",")) if starts else 0
        if self.ctx.policy.in_job:
            self.run.nodes.take()  # the nodes it could run on (the pre-flight check comes after)
        if len(self.ctx.run_nodes) <= theirs:
            self.ctx.log(
                f"this job can run on {len(self.ctx.run_nodes)} nodes, job {pred} runs on "
                f"{theirs}; it does not take over"
            )
            return 0
        marker = os.path.join(self.ctx.output_dir, names.grow_ready(self.ctx.self_id))
        with contextlib.suppress(OSError):
            private_mkdir(marker)
        deadline = self.ctx.clock() + self.ctx.policy.lead + GROW_WAIT_MARGIN_S
        look, alive, unknown = 0.0, True, 0
        self.ctx.log(f"job {pred} runs on {theirs} nodes; waiting for it to hand over")
        try:
            while not self.ctx.chain.continued_as(self.ctx.self_id):
                now = self.ctx.clock()
                if now >= look:
                    look = now + 2
                    state = self.ctx.queue_state(pred)
                    unknown = 0 if state else unknown + 1
                    # Not in the queue twice in a row: gone (once may be a failed ask).
                    alive = state in ("RUNNING", "COMPLETING") or (not state and unknown < 2)
                giving_up = not alive or now >= deadline or bool(self.ctx.state.signal)
                # Claimed here: that run can no longer move. Claimed there: that run is making
                # way, and hands over unless it ends otherwise.
                if giving_up and (self.run.standby.owns_takeover(self.ctx.self_id) or not alive):
                    if self.ctx.chain.continued_as(self.ctx.self_id):
                        break
                    self.ctx.log(f"job {pred} did not hand over to this job; it does not run")
                    return 0
                self.ctx.sleep(0.25)
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(marker)
        self.ctx.unclaim(self.ctx.self_id)
        return None
