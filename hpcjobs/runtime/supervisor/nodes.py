"""The job's nodes: which ones a run takes in a job with spare nodes (the others leave the job),
which ones failed and are excluded from later runs of the chain, and whether the chain runs
again inside this job after a fault (docs/requeue.md, "Spare nodes")."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract.causes import (
    NODE_FAILURE,
)
from hpcjobs.contract.eventlog import IN_JOB, RECOVERY_PARTS
from hpcjobs.contract.slurmtext import field

from . import decide
from .context import RunContext
from .ending import STDERR_LIMIT
from .program import STEP_ID
from .srunlog import failed_hostlists

if TYPE_CHECKING:
    from .supervise import Supervisor


#: Node states ('sinfo %T', lower case) of a node that failed: it is blamed for a run's end
#: and ruled out of the next run inside a job with spare nodes: down, drained, failing or
#: failed. A node being drained (``draining``) still runs what it has. A node only not
#: responding (``allocated*``) has not failed: Slurm declares it DOWN after SlurmdTimeout,
#: and a busy node misses a ping now and then (at 128 nodes, a hundred at once while a
#: thousand ranks started: counting them blamed them all).
NODE_FAILED = re.compile(r"down|drained|fail")

#: How long the supervisor waits for the job's steps to end before it releases nodes anyway
#: (a step of a hung node ends only once Slurm gives up on the node). A killed step of 1,024
#: processes on 128 nodes ended within 2 s.
STEPS_END_S = 45


def resize_settings(path: str) -> dict[str, str | None]:
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


class Nodes:
    """The nodes of the job and of its current run (kept in :class:`.context.RunContext`), and
    the chain's exclusions."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx
        #: The seconds of each part of the last decision to run again in the job
        #: (:data:`~hpcjobs.contract.eventlog.RECOVERY_PARTS`).
        self.took: dict[str, float] = {}

    def take(self, bad: Sequence[str] = ()) -> bool:
        """With spare nodes: choose the nodes the next run takes, and release from the job the
        nodes no run may take (the chain's excluded nodes, nodes Slurm shows down, ``bad``).
        False, changing nothing, when the job is not running or too few nodes are left."""
        began = self.ctx.clock()
        info = self.ctx.slurm.show_job(self.ctx.job)
        if field(info, "JobState") != "RUNNING":
            return False
        allocation = self.ctx.slurm.hostnames(field(info, "NodeList"))
        ruled_out = {*self.ctx.chain.excluded(), *bad}
        if allocation:
            states = self.ctx.slurm.node_states(",".join(allocation))
            ruled_out |= {node for node, state in states if NODE_FAILED.search(state)}
        usable = len([node for node in allocation if node not in ruled_out])
        size = decide.run_size(
            usable,
            self.ctx.policy.nodes or len(allocation),
            self.ctx.policy.min_nodes,
            self.ctx.policy.node_multiple,
        )
        step = decide.step_nodes(allocation, self.ctx.batch, ruled_out, size)
        if not step:
            return False
        keep = [node for node in allocation if node not in ruled_out]
        settings: dict[str, str | None] = {}
        self.took["nodes"] = self.ctx.clock() - began
        if len(keep) < len(allocation):
            began = self.ctx.clock()
            self.steps_ended()
            self.took["steps_end"] = self.ctx.clock() - began
            began = self.ctx.clock()
            settings = self.release(keep)
            self.took["release"] = self.ctx.clock() - began
        if keep != self.ctx.allocation:
            # The job's settings follow its nodes (Slurm takes a failed node out by itself).
            nodes, count = ",".join(keep), str(len(keep))
            settings.update(SLURM_JOB_NODELIST=nodes, SLURM_NODELIST=nodes)
            settings.update(SLURM_JOB_NUM_NODES=count, SLURM_NNODES=count)
            self.apply(settings)
        self.ctx.allocation, self.ctx.run_nodes = keep, step
        return True

    def steps_ended(self) -> None:
        """Wait until Slurm lists no step of this job but its batch and extern steps (at most
        :data:`STEPS_END_S`). A step still ending when nodes leave the job never finished on
        Slurm 22.05: its nodes' completions no longer matched the job's shrunk node list, and
        the next run's step waited ("Requested nodes are busy") until the job ended (seen at
        131 nodes, where 1,024 processes take seconds to end after the kill)."""
        deadline = self.ctx.clock() + STEPS_END_S
        waited = False
        while True:
            lines = self.ctx.slurm.queue_value(self.ctx.job, "%i", steps=True)
            left = [line.strip() for line in lines if STEP_ID.fullmatch(line.strip())]
            if not left:
                return
            if self.ctx.state.term_at:
                return  # Slurm is ending the job: log the decision before KillWait runs out
            if self.ctx.clock() >= deadline:
                self.ctx.log(
                    f"step(s) {', '.join(left)} still listed {STEPS_END_S} s after the run "
                    "ended; releasing nodes anyway"
                )
                return
            if not waited:
                waited = True
                self.ctx.log(f"waiting for step(s) {', '.join(left)} to end before nodes leave")
                for step in left:  # what is left of them (an agent on a node that hangs)
                    self.ctx.slurm.cancel(step, "KILL")
            self.ctx.sleep(0.5)

    def release(self, keep: Sequence[str]) -> dict[str, str | None]:
        """Shrink the job to ``keep``: the chain stops paying for the other nodes, and no run
        can use them. The SLURM_* settings of Slurm's resize script (None: unset)."""
        folder = tempfile.mkdtemp(prefix="hpcjobs-resize-")
        try:
            if not self.ctx.slurm.shrink(self.ctx.job, keep, folder):
                self.ctx.log(f"could not release nodes from job {self.ctx.job}; they stay unused")
            return resize_settings(os.path.join(folder, f"slurm_job_{self.ctx.job}_resize.sh"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def join(self, helper: str) -> list[str] | None:
        """Job expansion: the nodes of helper allocation ``helper`` join this job, and the
        job's settings follow (Slurm's resize script). The nodes that joined; None when Slurm
        refused them (the job keeps its nodes). The helper, empty or not, is cancelled, even
        when this fails."""
        before = set(
            self.ctx.allocation
            or self.ctx.slurm.hostnames(self.ctx.env.get("SLURM_JOB_NODELIST", ""))
        )
        settings: dict[str, str | None] = {}
        try:
            # As before a shrink: a step still ending while the job changes size may never end.
            self.steps_ended()
            folder = tempfile.mkdtemp(prefix="hpcjobs-resize-")
            try:
                merged = self.ctx.slurm.join(helper, self.ctx.job, folder)
                resize = os.path.join(folder, f"slurm_job_{self.ctx.job}_resize.sh")
                settings = resize_settings(resize)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            self.ctx.slurm.cancel(helper)
        if not merged:
            self.ctx.log(f"Slurm did not add the nodes of job {helper} to job {self.ctx.job}")
            return None
        nodes = self.ctx.slurm.hostnames(field(self.ctx.slurm.show_job(self.ctx.job), "NodeList"))
        ahead = nodes[: nodes.index(self.ctx.batch)] if self.ctx.batch in nodes else []
        if ahead and not before.issuperset(ahead):
            # The job's first node must stay its batch host (:meth:`ahead_of_batch_host`).
            self.ctx.log(f"releasing {' '.join(ahead)}: Slurm orders them before the batch host")
            nodes = [node for node in nodes if node not in ahead]
            settings.update(self.release(nodes))
        self.apply(settings)
        return [node for node in nodes if node not in before]

    def apply(self, settings: dict[str, str | None]) -> None:
        """The job's SLURM_* ``settings`` (a resize script's; None: unset) in the environment
        of its next steps."""
        for name, value in settings.items():
            if value is None:
                self.ctx.env.pop(name, None)
            else:
                self.ctx.env[name] = value

    def stays_in_job(self, cause: str, failed: Sequence[str]) -> bool:
        """With spare nodes, after a fault of a node: whether the chain runs again inside this
        job, on its remaining nodes (logged as a requeue, how=in_job). ``failed``: the nodes
        at fault; they leave the job even where the chain cannot exclude them (a later job of
        the chain must still fit the partition)."""
        if not self.ctx.policy.in_job or cause not in decide.IN_JOB_CAUSES:
            return False
        if self.ctx.state.signal:
            return False  # the job is being ended (a warning, a cancel): a new job goes on
        if self.ctx.time_short():
            # A run started now would get no warning before the time limit.
            self.ctx.log(f"{cause}: too little time left in job {self.ctx.job} to run again in it")
            return False
        # The agents end before a node leaves the job: Slurm would otherwise kill their step
        # there, and a step that outlives that kill drains the node ("Kill task failed").
        began = self.ctx.clock()
        self.run.agents.stop()
        self.took = {"agents_end": self.ctx.clock() - began}
        if not self.take(failed):
            self.ctx.log(f"{cause}: too few nodes left in job {self.ctx.job} to run again in it")
            return False
        if self.ctx.time_short():  # again: releasing nodes may have waited for the steps to end
            self.ctx.log(f"{cause}: too little time left in job {self.ctx.job} to run again in it")
            return False
        if self.run.standby.claimed and self.run.standby.claimed == self.run.standby.job:
            # The standby stays this job's: it logs a later end of this job without a word.
            self.ctx.unclaim(self.run.standby.job)
            self.run.standby.claimed = ""
        nodes = ",".join(self.ctx.run_nodes)
        self.ctx.event(
            "requeue",
            cause,
            f"continued in job {self.ctx.self_id} on {nodes}",
            how=IN_JOB,
            stopped_run=self.ctx.restart,
            took={part: round(self.took[part], 3) for part in RECOVERY_PARTS if part in self.took},
            **self.ctx.position(),
        )
        self.ctx.log(f"{cause}: running again in this job on {nodes}, from the last checkpoint")
        return True

    def handoff_if_excluded(self) -> bool:
        """This job landed on a node the chain excludes: hand over to a new job without it.
        Whether it did (this job then does not run the program)."""
        excluded = self.ctx.chain.excluded()
        if not excluded:
            return False
        mine = self.ctx.slurm.hostnames(self.ctx.env.get("SLURM_JOB_NODELIST", ""))
        bad = [node for node in mine if node in excluded]
        if not bad:
            return False
        try:
            new = self.run.continuation.submit_next("afterany:" + self.ctx.job, "")
        except RuntimeError as exc:
            self.ctx.log(
                "could not hand over to a job without {} ({}); running here".format(
                    ",".join(bad), exc
                )
            )
            return False
        self.ctx.event(
            "handoff",
            "-",
            "continued as job {}: this job's nodes include excluded {}".format(new, ",".join(bad)),
            next=new,
            nodes=bad,
        )
        self.ctx.log(
            "this job got excluded node(s) {}; continuing as job {}".format(",".join(bad), new)
        )
        return True

    def failed_nodes(self, job: str, nodes: str, batch: str, text: str | None = None) -> list[str]:
        """The nodes whose failure ended ``job``: srun names them in the job's stderr (``text``:
        the end of the job's stderr file) when the batch host lived on; when nothing names one,
        the batch host died with the job. Nodes Slurm now shows failed count too
        (:data:`NODE_FAILED`)."""
        if text is None:
            text = ""
            try:
                with open(self.ctx.err_file, "rb") as handle:
                    handle.seek(max(os.path.getsize(self.ctx.err_file) - STDERR_LIMIT, 0))
                    text = handle.read().decode("utf-8", "replace")
            except OSError:
                pass
        named: list[str] = []
        for hostlist in failed_hostlists(text, job):
            named += self.ctx.slurm.hostnames(hostlist)
        if not named and batch and batch != "(null)":
            named = [batch]
        if nodes and nodes != "(null)":
            states = self.ctx.slurm.node_states(nodes)
            named += [node for node, state in states if NODE_FAILED.search(state)]
        seen: list[str] = []
        for node in named:
            if node and node not in seen:
                seen.append(node)
        return seen

    def partition(self) -> str:
        """The partition the job runs in ("" when Slurm did not say)."""
        return self.ctx.env.get("SLURM_JOB_PARTITION", "").split(",")[0]

    def partition_nodes(self) -> int | None:
        """How many nodes the job's partition has (None: unknown)."""
        partition = self.partition()
        return self.ctx.slurm.partition_nodes(partition) if partition else None

    def ahead_of_batch_host(self) -> list[str]:
        """The nodes of the job's partition that Slurm orders before the job's batch host.
        None of them may join the job: once a job's first node is not its batch host, Slurm
        (22.05, measured) finds the batch script "missing from batch node" at the batch host's
        next registration, about a minute later, and ends the job as a node failure."""
        partition = self.partition()
        hosts = self.ctx.slurm.partition_hosts(partition) if partition else []
        return hosts[: hosts.index(self.ctx.batch)] if self.ctx.batch in hosts else []

    def room(self) -> int | None:
        """How many of the partition's nodes a later job of the chain can do without (None:
        unknown): every later job asks for the nodes this one asked for (spares too)."""
        total = self.partition_nodes()
        if total is None:
            return None
        fewest = self.ctx.policy.min_nodes or self.ctx.policy.nodes
        wanted = fewest + self.ctx.policy.spare_nodes if self.ctx.policy.in_job else 0
        return total - (wanted or int(self.ctx.env.get("SLURM_JOB_NUM_NODES", "1") or 1))

    def later_exclusions(self) -> list[str]:
        """The nodes a later job of the chain leaves out: the chain's exclusions, then the
        user's repeat offenders (:mod:`.repeats`) while the job still fits the partition."""
        excluded = self.ctx.chain.excluded()
        offenders = [n for n in self.run.repeats.kept_out() if n not in excluded]
        if not offenders:
            return excluded
        room = self.room()
        fit = len(offenders) if room is None else max(room - len(excluded), 0)
        if fit < len(offenders):
            left = offenders[fit:]
            self.ctx.log(
                f"not leaving out repeat offender(s) {' '.join(left)}: the chain's jobs need the "
                "rest of the partition"
            )
        return excluded + offenders[:fit]

    def exclude(self, cause: str, nodes: Sequence[str], evidence: str = "") -> None:
        """Exclude ``nodes`` from every later run of the chain, within the limits, and add a
        blame of each to the user's suspects (:mod:`.repeats`)."""
        self.run.repeats.blame(cause, nodes, evidence)
        room = self.room()
        limit = decide.exclusion_limit(self.ctx.policy.max_excluded, room)
        kept, released = decide.excluded_after(self.ctx.chain.excluded(), list(nodes), limit)
        detail = "nodes=" + (",".join(kept) or "-")
        if released:
            detail += f" released={','.join(released)} (at most {limit} excluded)"
        self.ctx.event("exclude", cause, detail, nodes=kept, released=released, limit=limit)
        message = f"excluding {','.join(kept) or 'no node'} from later runs"
        dropped = [n for n in released if n not in nodes]
        refused = [n for n in released if n in nodes]
        if dropped:
            message += f"; no longer excluding {' '.join(dropped)}"
        if refused:
            tight = room is not None and room < self.ctx.policy.max_excluded
            why = " (the chain's jobs need the rest of the partition)" if tight else ""
            message += (
                f"; not excluding {' '.join(refused)}: at most {limit} node(s) may be excluded{why}"
            )
        self.ctx.log(message)

    def fault_exclude(self, cause: str, suspect: str, evidence: str = "") -> bool:
        """Exclude the suspect from later runs, unless the site's health check clears it;
        whether it was blamed."""
        if not suspect or self.run.health.healthy(suspect):
            return False
        self.exclude(cause, [suspect], evidence)
        return True

    def lift(self, cause: str, nodes: Sequence[str], why: str) -> None:
        """Lift the chain's exclusion of ``nodes`` (those it excludes), saying ``why``."""
        current = self.ctx.chain.excluded()
        released = [n for n in nodes if n in current]
        if not released:
            return
        kept = [n for n in current if n not in released]
        detail = "nodes=" + (",".join(kept) or "-") + f" released={','.join(released)} ({why})"
        limit = self.ctx.policy.max_excluded
        self.ctx.event("exclude", cause, detail, nodes=kept, released=released, limit=limit)
        self.ctx.log(f"no longer excluding {' '.join(released)}: {why}")

    def blame_failed_nodes(self) -> list[str]:
        """A node of this run failed and this batch host lived on: log it, exclude it; the
        failed nodes."""
        # This run's stderr only: a job with spare nodes may have lost a node in an earlier run.
        nodelist = self.ctx.env.get("SLURM_JOB_NODELIST", "")
        failed = self.failed_nodes(self.ctx.job, nodelist, "", self.run.ending.run_stderr())
        suspect = ",".join(failed)
        self.run.ending.fault_log(
            NODE_FAILURE, suspect, f"srun: error: Node failure on {suspect or '?'}"
        )
        if failed:
            self.exclude(NODE_FAILURE, failed, f"srun: error: Node failure on {suspect}")
        return failed
