"""How a run begins: the chain it belongs to, its folders, how the run before it ended where
nobody could say, and whether it may run at all. Each check that can end the job before the
program starts returns the job's exit code; None lets the run go on."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import sys
import time
from typing import TYPE_CHECKING

from hpcjobs.contract import names
from hpcjobs.contract.eventlog import CONTINUED, SLURM, SLURM_FALLBACK
from hpcjobs.contract.jobenv import (
    ENV_CAPTURE_DIR,
    ENV_CHAIN_ROOT,
    ENV_FINGERPRINT,
    ENV_PROGRESS_DIR,
    ENV_RESTART_COUNT,
    ENV_RUN_FILE,
)
from hpcjobs.contract.slurmtext import line_value
from hpcjobs.contract.slurmtime import epoch

from . import decide, frameworks
from .agent import (
    ENV_NODE_TMP,
    local_dir,
    node_name,
    warned_file,
)
from .context import RunContext, private_mkdir
from .successor import ENV_GROW_FOR, ENV_STANDBY_FOR

if TYPE_CHECKING:
    from .supervise import Supervisor


class Start:
    """The beginning of this job's first run, and what every run does before it starts."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    def begin(self) -> int | None:
        """Before the program starts: None, or the job's exit code where it must not start."""
        self.settle_chain()
        checks = (
            self.wait_if_grower,
            self.check_checkpoint_dir,
            self.take_over_if_standby,
            self.after_slurm_requeue,
            self.stop_if_done,
        )
        for check in checks:
            code = check()
            if code is not None:
                return code
        if self.ctx.policy.in_job:
            failed = self.run.health.preflight()
            if not self.run.nodes.take(failed) and failed:
                self.run.health.too_few_healthy(failed)
        if self.run.nodes.handoff_if_excluded():
            return 0
        self.prepare_run()
        self.run.agents.start()  # from here on every run ends in finish(), which stops them
        # Runs before this one: starts in the log, or Slurm's own count if that is higher.
        self.announce(self.run_count())
        return None

    def run_count(self) -> int:
        """How many runs of the chain came before this one (``HPCJOBS_RESTART_COUNT``)."""
        count = max(self.ctx.chain.count("start"), self.ctx.restart)
        self.ctx.env[ENV_RESTART_COUNT] = str(count)
        return count

    def settle_chain(self) -> None:
        """The chain this run belongs to, and its folders: a continuation carries its chain's
        root; anything else starts a chain of its own."""
        private_mkdir(self.ctx.output_dir)
        self.private_logs()
        if self.ctx.root and not self.ctx.chain.names_job(
            self.ctx.env.get("SLURM_ARRAY_JOB_ID") or self.ctx.job or "x"
        ):
            self.ctx.root = self.ctx.self_id
            self.ctx.standby_for = self.ctx.grow_for = ""
            self.ctx.env.pop(ENV_STANDBY_FOR, None)
            self.ctx.env.pop(ENV_GROW_FOR, None)
        self.ctx.root = self.ctx.root or self.ctx.self_id
        self.ctx.env[ENV_CHAIN_ROOT] = self.ctx.root
        # The ranks report their progress on node-local storage (hpcjobs.runtime.progress);
        # the node agents summarize it into the chain's progress folder, next to the event log.
        self.ctx.progress_dir = os.path.join(self.ctx.output_dir, names.progress_dir(self.ctx.root))
        if self.ctx.root == self.ctx.self_id and self.ctx.restart == 0:
            self.set_aside_stale()
        tmp = self.ctx.env.get("TMPDIR") or "/tmp"
        self.ctx.env[ENV_NODE_TMP] = os.path.join(tmp, f"hpcjobs-{self.ctx.self_id}")
        self.ctx.env[ENV_PROGRESS_DIR] = local_dir(node_name(), self.ctx.env[ENV_NODE_TMP])
        with contextlib.suppress(OSError):
            private_mkdir(self.ctx.progress_dir)

    def wait_if_grower(self) -> int | None:
        """A grower runs only once the run it grows hands over (:mod:`.growth`)."""
        if self.ctx.grow_for and not self.ctx.chain.continued_as(self.ctx.self_id):
            return self.run.growth.wait_for_handover()
        return None

    def take_over_if_standby(self) -> int | None:
        """A standby that Slurm released logs how the run it stood by for ended
        (:mod:`.standby`)."""
        if self.ctx.standby_for and self.ctx.restart == 0 and not self.ctx.is_done():
            return self.run.standby.take_over()
        return None

    def stop_if_done(self) -> int | None:
        """The program said its work is done: the chain ends here, 0."""
        if not self.ctx.is_done():
            return None
        self.ctx.event("end", "finish", "done marker present")
        self.ctx.log("the job already finished (done marker present); nothing to do")
        self.run.continuation.end_chain()
        return 0

    def announce(self, count: int) -> None:
        """Log that run ``count`` of the chain begins (its ``start`` event)."""
        if count > 0 and self.ctx.latest_step() < 0:
            adopted = frameworks.adopt_lightning(os.getcwd())
            if adopted:
                self.ctx.log(
                    f"Lightning's newest ModelCheckpoint is newer than its HPC checkpoints: "
                    f"linked as {adopted}, which Lightning resumes from"
                )
        step, found = self.ctx.newest()
        nodelist = ",".join(self.ctx.run_nodes) or self.ctx.env.get("SLURM_JOB_NODELIST") or "?"
        batch = self.ctx.batch or "?"
        held: dict[str, int] = {"held": len(self.ctx.allocation)} if self.ctx.run_nodes else {}
        if self.ctx.run_nodes and self.ctx.policy.elastic:
            held["full"] = self.ctx.policy.nodes  # an elastic size: report counts a smaller run
        where: dict[str, object] = {}
        if found is not None:
            where = {"checkpoint_kind": found.kind, "checkpoint_path": found.path}
        self.ctx.event(
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
        sys.stdout.write(f"hpcjobs: run {count} of job {self.ctx.root}\n")
        sys.stdout.flush()
        if found is not None:
            self.ctx.log(
                f"run {count} of chain {self.ctx.root}; newest checkpoint: {found.describe()}"
            )
        elif step is not None and step >= 0:
            self.ctx.log(
                f"run {count} of chain {self.ctx.root}; resuming from checkpoint step {step}"
            )
        else:
            self.ctx.log(
                f"run {count} of chain {self.ctx.root}; no checkpoint yet (none in hpcjobs' layout "
                "in the checkpoint folder, nor in Lightning's, the HF Trainer's, Accelerate's or "
                "torch.distributed.checkpoint's there or in the working folder)"
            )

    def private_logs(self) -> None:
        """Slurm creates the job's output files with the job's umask: make them private, as
        everything else hpcjobs writes. Notes the job's stderr file (srun reports its tasks'
        ends there); without --error it is the stdout file (Slurm 26.05 prints an empty
        StdErr= then)."""
        info = self.ctx.slurm.show_job(self.ctx.job)
        if not info:
            return
        out, err = line_value(info, "StdOut"), line_value(info, "StdErr")
        for path in (out, err):
            try:
                if path and os.path.isfile(path) and os.stat(path).st_uid == os.getuid():
                    os.chmod(path, os.stat(path).st_mode & 0o700)
            except OSError:
                pass
        self.ctx.err_file = err if err and err != "(null)" else out

    def set_aside_stale(self) -> None:
        """The first run of a chain finds no log of its own: one already there belongs to an
        earlier job that had the same id (ids repeat when a cluster's job counter is reset)."""
        stamp = str(int(time.time()))
        log = self.ctx.events.path
        for path in (log, self.ctx.progress_dir, self.ctx.done_file()):
            if os.path.lexists(path):
                try:
                    os.replace(path, f"{path}.stale-{stamp}")
                except OSError:
                    continue
                if path == log:
                    self.ctx.log(f"set aside an event log left by an earlier job {self.ctx.root}")

    def check_checkpoint_dir(self) -> int | None:
        """The checkpoint folder can be created and written, and belongs to this run; 1 where
        it cannot be used."""
        folder = self.ctx.ckpt_dir
        error = ""
        try:
            private_mkdir(folder)
            if not os.access(folder, os.W_OK):
                error = "not writable"
        except OSError as exc:
            error = f"mkdir: cannot create directory '{exc.filename or folder}': {exc.strerror}"
        if error:
            self.ctx.event("end", "fail", f"checkpoint folder unusable: {folder}: {error}")
            self.ctx.log(
                f"cannot use the checkpoint folder {folder} ({error}); the command was not started"
            )
            self.run.continuation.end_chain()
            return 1
        return self.check_owner()

    def check_owner(self) -> int | None:
        """The checkpoint folder's ``RUN`` file names this run (``hpcjobs submit`` wrote it), or
        this run claims the folder (a script given to ``sbatch`` by hand); 1 where another run
        owns it."""
        fingerprint = self.ctx.env.get(ENV_FINGERPRINT, "")
        run_file = self.ctx.env.get(ENV_RUN_FILE, "")
        if not fingerprint or not run_file:
            return None
        if os.path.isfile(run_file):
            try:
                with open(run_file, encoding="utf-8", errors="replace") as handle:
                    found = re.search(r'"fingerprint": *"([0-9a-f]*)"', handle.read())
            except OSError:
                found = None
            owner = found.group(1) if found else ""
            if owner != fingerprint:
                self.ctx.event(
                    "end",
                    "fail",
                    f"checkpoint folder owned by another run: {run_file} names run "
                    f"{owner or '?'}, this job is run {fingerprint}",
                )
                self.ctx.log(
                    f"the checkpoint folder now belongs to another run ({run_file}); the "
                    "command was not started"
                )
                self.run.continuation.end_chain()
                return 1
            return None
        # Submitted without 'hpcjobs submit' (sbatch job.sh): claim the folder for this run.
        tmp = f"{run_file}.tmp-{os.getpid()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                claim = {
                    "claimed_by_job": self.ctx.self_id,
                    "fingerprint": fingerprint,
                    "format": 1,
                }
                handle.write(json.dumps(claim) + "\n")
            os.replace(tmp, run_file)
        except OSError:
            self.ctx.log(f"could not write {run_file}")
        return None

    def after_slurm_requeue(self) -> int | None:
        """This run is Slurm's requeue of the job (SLURM_RESTART_COUNT > 0): log it unless the
        run before did, and enforce the budgets."""
        if self.ctx.restart == 0 or self.ctx.is_done():
            return None
        last = self.ctx.chain.last_ending()
        event, cause, how = (last.event, last.cause, last.text("how")) if last else ("", "", "")
        if event == "requeue" and how == CONTINUED:
            following = last.text("next") if last else ""
            if following != self.ctx.self_id:
                # Continued in another job, yet Slurm requeued this one too (the Requeue=0
                # update failed or came too late): never run the chain twice.
                self.ctx.log(
                    f"Slurm requeued this job, but the chain already continues as job {following}; "
                    "exiting"
                )
                self.run.continuation.end_chain()
                return 0
            event = ""  # the continuation's first run was lost before it began
        if event != "requeue" or how not in (SLURM, SLURM_FALLBACK):
            # The run before ended without a word: ask accounting how, and date it.
            runs = self.ctx.slurm.acct_runs(self.ctx.job)
            state, end = runs[self.ctx.restart - 1] if len(runs) >= self.ctx.restart else ("", "")
            cause = decide.requeue_cause(state)
            self.ctx.event(
                "requeue",
                cause,
                f"requeued by Slurm (restart {self.ctx.restart})",
                epoch(end),
                how=SLURM,
                stopped_run=self.ctx.restart - 1,
                slurm_state=state or None,
                **self.ctx.position(),
            )
        return self.run.continuation.enforce_budget(cause)

    def prepare_run(self) -> None:
        """Empty the rank output copies, note where this run's stderr begins, and remove the
        node summaries of the run before (the stall watch must not judge them)."""
        self.ctx.capture_dir = os.path.join(self.ctx.output_dir, names.capture_dir(self.ctx.root))
        shutil.rmtree(self.ctx.capture_dir, ignore_errors=True)
        try:
            private_mkdir(self.ctx.capture_dir)
            self.ctx.env[ENV_CAPTURE_DIR] = self.ctx.capture_dir
        except OSError:
            self.ctx.capture_dir = ""
        try:
            self.ctx.err_offset = os.path.getsize(self.ctx.err_file) if self.ctx.err_file else 0
        except OSError:
            self.ctx.err_offset = 0
        # This run has begun: whoever logged how the run before it ended is settled.
        self.ctx.unclaim(self.ctx.self_id)
        # The summaries of the run before are no one's now (the histories stay), nor what its
        # agents said of its warning.
        folder = glob.escape(self.ctx.progress_dir)
        for path in glob.glob(os.path.join(folder, "node-*")) + glob.glob(
            os.path.join(folder, warned_file("*"))
        ):
            if not path.endswith(".log"):
                with contextlib.suppress(OSError):
                    os.unlink(path)
