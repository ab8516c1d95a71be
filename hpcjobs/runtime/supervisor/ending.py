"""How a run ended, once its step has exited: the facts from Slurm, the job's stderr and the
ranks' output (:class:`.decide.EndFacts`), classified by :mod:`.decide`; a stall, a crash with
an infrastructure signature, or a node failure is logged as a fault with its suspect."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract.causes import (
    APPLICATION,
    CANCELLED,
    INFRASTRUCTURE,
    STALL,
    STRAGGLER,
)
from hpcjobs.contract.slurmtext import field

from . import decide
from .context import RunContext
from .signatures import all_patterns
from .srunlog import first_failure, has_node_failure, launch_failure
from .state import TERM, WARNING

if TYPE_CHECKING:
    from .supervise import Supervisor


#: At most this much of the job's stderr is read to classify a run's end.
STDERR_LIMIT = 16 * 1024 * 1024


class Ending:
    """Classifies the end of this job's runs."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    def was_cancelled(self, job: str, info: str) -> bool:
        """Whether ``job`` (``info``: its 'scontrol show job') was cancelled: CANCELLED there,
        or, while it still shows COMPLETING, in accounting."""
        state = field(info, "JobState")
        if state.startswith("CANCELLED"):
            return True
        return state == "COMPLETING" and self.ctx.slurm.acct_state(job).startswith("CANCELLED")

    def requeued_by_slurm(self, info: str) -> bool:
        """Whether Slurm has requeued this job since this run began (``info``: its 'scontrol
        show job'); Slurm counts a requeue as soon as it decides it."""
        restarts = field(info, "Restarts")
        return restarts.isdecimal() and int(restarts) > self.ctx.restart

    def being_cancelled(self, info: str | None = None) -> bool:
        """Whether this job is being cancelled: Slurm says so, or a plain SIGTERM reached the
        supervisor while Slurm shows neither a preemption, nor a node failure, nor its own
        requeue of the job (``scontrol requeue`` sends SIGTERM too)."""
        if info is None:
            info = self.ctx.slurm.show_job(self.ctx.job)
        if self.was_cancelled(self.ctx.job, info):
            return True
        if re.search(r"PreemptTime=[0-9]|Reason=NodeDown|JobState=NODE_FAIL", info):
            return False
        if self.requeued_by_slurm(info):
            return False
        return self.ctx.state.signal == TERM

    def run_stderr(self) -> str:
        """This run's part of the job's stderr (at most STDERR_LIMIT bytes)."""
        if not self.ctx.err_file:
            return ""
        try:
            with open(self.ctx.err_file, "rb") as handle:
                handle.seek(self.ctx.err_offset)
                return handle.read(STDERR_LIMIT).decode("utf-8", "replace")
        except OSError:
            return ""

    def crash(self) -> tuple[str, str, str]:
        """After a non-zero exit no signal explains: (cause, suspect, evidence). Infrastructure
        when srun could not launch the tasks on a node (that node is blamed, not the tasks
        the aborted step then killed), when the first failing task's output shows a
        signature, or when it died of SIGBUS or SIGKILL; else application, and nobody is
        blamed."""
        stderr = self.run_stderr()
        launch = launch_failure(stderr)
        if launch is not None:
            return INFRASTRUCTURE, launch.node, "srun: " + launch.line[:290]
        failure = first_failure(stderr)
        if failure is None:
            return APPLICATION, "", ""
        node, tasks, what = failure
        files: list[str] = []
        if self.ctx.capture_dir:
            own = os.path.join(self.ctx.capture_dir, f"{node}.rank-{failure.first_task}")
            pattern = os.path.join(glob.escape(self.ctx.capture_dir), glob.escape(node) + ".rank-*")
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
        for pattern in all_patterns(self.ctx.policy.patterns):
            argv += ["-e", pattern]
        out = self.ctx.slurm.run([*argv, "--", *list(files)], timeout=60).out
        first = out.split("\n", 1)[0] if out else ""
        return first.replace("\r", "")[:300]

    def fault_log(self, cause: str, suspect: str, evidence: str) -> None:
        self.ctx.event(
            "fault",
            cause,
            "node={} evidence={}".format(suspect or "-", evidence),
            node=suspect or None,
            stopped_job=self.ctx.self_id,
            evidence=evidence,
            exited=round(self.run.program.exited_at, 3) or None,
        )
        self.ctx.log("{}{}: {}".format(cause, f" on node {suspect}" if suspect else "", evidence))

    def end_cause(self, rc: int) -> str:
        """How this run ended (:func:`decide.end_cause`), from Slurm and this run's stderr."""
        info = self.ctx.slurm.show_job(self.ctx.job)
        requeued = None
        if self.requeued_by_slurm(info):
            # Slurm counts a requeue as soon as it decides it: the job comes back with the same
            # id, and the program's exit (0 after a checkpoint) must not mark the job done.
            runs = self.ctx.slurm.acct_runs(self.ctx.job)
            requeued = runs[self.ctx.restart][0] if len(runs) > self.ctx.restart else ""
        node_failed = bool(re.search(r"JobState=NODE_FAIL|Reason=NodeDown", info)) or (
            has_node_failure(self.run_stderr())
        )
        preempted = bool(re.search(r"PreemptTime=[0-9]", info))
        early = requeued is not None or node_failed or preempted
        cancelled = not early and self.was_cancelled(self.ctx.job, info)
        left = None
        if (
            not early
            and not cancelled
            and (self.ctx.state.signal == WARNING or self.run.program.requested())
        ):
            left = self.ctx.time_left()
        warned, summaries = self.run.agents.warned()
        if summaries:
            self.ctx.log("the warning went out as: " + "; ".join(summaries))
        facts = decide.EndFacts(
            rc,
            self.ctx.state.signal,
            requeued,
            node_failed,
            preempted,
            cancelled,
            left,
            self.ctx.policy.lead,
            requested=self.run.program.requested(),
            stopped=self.ctx.state.term_sent or warned > 0,
        )
        self.ctx.state.end_rule = decide.exit_rule(facts)
        return decide.end_cause(facts)

    def classify(self, rc: int) -> tuple[str, str, str]:
        """How this run ended, once the step has exited: (cause, suspect, evidence); a stall,
        a straggler's swap and an infrastructure crash are logged as faults here."""
        cause = self.end_cause(rc)
        suspect = evidence = ""
        watch = self.run.program.watch
        stall = watch.found if watch is not None else None
        slow = watch.straggler if watch is not None else None
        ours = not cause.startswith("requeued_") and cause != CANCELLED
        if slow is not None and ours:
            # The watch ended the run at a checkpoint, to swap a straggler for a spare.
            cause, suspect, evidence = STRAGGLER, slow.node, slow.evidence()
            self.fault_log(STRAGGLER, suspect, evidence)
        elif stall is not None and ours:
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
                self.ctx.log(
                    f"application failure: {evidence} (no infrastructure signature; no node blamed)"
                )
        return cause, suspect, evidence
