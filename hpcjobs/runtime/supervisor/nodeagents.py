"""The node agents, from the batch host: one per node (:mod:`.agent`), started before each run
and ended after it; the warning goes to the program through them (:mod:`.deliver`)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING

from hpcjobs.contract import names
from hpcjobs.contract.jobenv import ENV_GPU_INTERVAL, ENV_GPU_QUERY, ENV_PROGRESS_DIR

from . import deliver
from .agent import (
    AGENT_STEP,
    ENV_NODE_TMP,
    WARN_SIGNAL,
    node_name,
    warned_file,
    write_warned,
)
from .agent import interval as agent_interval
from .context import RunContext, private_mkdir

if TYPE_CHECKING:
    from .supervise import Supervisor


#: How long the agents get to write once more and clean up (an agent on a dead node never
#: answers: its srun is killed then).
AGENTS_STOP_S = 5
#: How often the agents are asked again to end while they have not: through Slurm (a scancel
#: each time), and to the one agent of a job of one node (a signal, nothing more).
AGENTS_RESEND_S = 1.0
LOCAL_AGENT_RESEND_S = 0.1


class NodeAgents:
    """The node agents of the current run: their launcher (``srun``, or the one agent of a job
    of one node), and whether they were asked to end."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether they run as a job step of their own (through srun; else one local agent).
        self.in_step = False
        #: Asks the agents to end while the supervisor decides (see :meth:`ask_to_end`), and
        #: whether that reached them.
        self.asking: threading.Thread | None = None
        self.asked = False
        #: Without agents: the processes on this node the warning went to in this run.
        self.warned_here: list[tuple[int, str]] = []

    def warn(self) -> None:
        """Have the warning delivered to the program on every node of the run: each node's
        agent picks, per process, the signal it listens for (:mod:`.deliver`). Without agents,
        to the processes on this node."""
        self.ctx.state.warn_due = False
        candidates = deliver.candidates(self.ctx.policy.signal)
        if self.signal(WARN_SIGNAL):
            listed = " or ".join("SIG" + name for name in candidates)
            self.ctx.log(
                f"warning: each node's agent delivers it to the processes that listen ({listed})"
            )
            return
        done = deliver.deliver(
            self.ctx.env.get(deliver.ENV_TOKEN, ""),
            candidates,
            node=node_name(),
            warned={pid for pid, _name in self.warned_here},
        )
        self.warned_here += done.sent
        if self.ctx.progress_dir:
            write_warned(
                self.ctx.progress_dir, node_name(), deliver.Delivery(self.warned_here, done.deaf)
            )
        self.ctx.log(f"warning: {done.summary()} on this node (no node agents)")

    def warned(self) -> tuple[int, list[str]]:
        """What the agents say they delivered: the processes signalled in all, and each node's
        summary. O(nodes) small reads, once per run."""
        count, lines = 0, list[str]()
        if not self.ctx.progress_dir:
            return count, lines
        prefix = warned_file("")
        for path in sorted(
            glob.glob(os.path.join(glob.escape(self.ctx.progress_dir), prefix + "*"))
        ):
            with contextlib.suppress(OSError, ValueError), open(path, encoding="utf-8") as handle:
                sent, _, summary = handle.readline().strip().partition(" ")
                count += int(sent)
                lines.append(f"{os.path.basename(path)[len(prefix) :]}: {summary}")
        return count, lines

    def start(self) -> None:
        """One node agent per node (:mod:`.agent`): it gathers the node's progress reports and
        samples its GPUs. On more than one node in a job step of its own, one task per node,
        that overlaps the job's other steps (srun --overlap shares CPUs, memory and GPUs). The
        run's token (:data:`.deliver.ENV_TOKEN`) goes to them and to the step: it marks the
        program's processes the agents deliver the warning to."""
        self.asking, self.asked = None, False
        self.warned_here = []
        self.ctx.env[deliver.ENV_TOKEN] = deliver.new_token(self.ctx.job)
        # This node's folder is there before the program starts (a plain command runs here).
        mine = self.ctx.env.get(ENV_PROGRESS_DIR, "")
        with contextlib.suppress(OSError):
            if mine:
                private_mkdir(mine)
        argv = [*self.ctx.supervisor_argv, "agent", "--shared", self.ctx.progress_dir]
        argv += ["--every", str(agent_interval(self.ctx.policy.stall_timeout))]
        argv += ["--since", f"{time.time():.3f}"]
        argv += ["--warn", ",".join(deliver.candidates(self.ctx.policy.signal))]
        every = self.ctx.env.get(ENV_GPU_INTERVAL, "0")
        query = self.ctx.env.get(ENV_GPU_QUERY, "")
        if every.isdecimal() and int(every) > 0 and query:
            folder = os.path.join(self.ctx.output_dir, names.gpu_dir(self.ctx.root))
            try:
                private_mkdir(folder)
                argv += ["--gpu-every", every, "--gpu-query", query, "--gpu-dir", folder]
            except OSError:
                pass
        others = [node for node in self.ctx.allocation if node != self.ctx.batch]
        # The deputy runs the program too, where it can: a failed spare ends no run, and its
        # agent would never be replaced.
        others.sort(key=lambda node: node not in self.ctx.run_nodes)
        if others:
            # Should the batch host fail, Slurm keeps this job (--no-kill): the deputy ends it.
            argv += ["--deputy", others[0], "--batch-host", self.ctx.batch]
            argv += ["--chain-log", self.ctx.events.path]
        nodes = self.ctx.env.get("SLURM_JOB_NUM_NODES", "1")
        if nodes.isdecimal() and int(nodes) > 1 and shutil.which("srun"):
            # With spare nodes the agents outlive a failed node (srun --no-kill): the deputy
            # among them.
            where = ["--nodelist=" + ",".join(self.ctx.allocation)] if self.ctx.allocation else []
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
        self.in_step = argv[0] == "srun"
        try:
            # srun's own messages (a task it killed, say) must not mix with the step's: the
            # job's stderr is where a crash is classified from.
            stderr = subprocess.DEVNULL if self.in_step else None
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stderr=stderr, env=self.ctx.env
            )
        except OSError as exc:
            self.ctx.log(f"could not start the node agents ({exc}); no progress is gathered")

    def signal(self, name: str = "HUP") -> bool:
        """Send the agents SIG``name``: SIGHUP asks them to end (they write once more and
        remove their node-local folders; :meth:`stop` waits for them), their
        :data:`.agent.WARN_SIGNAL` to deliver the warning. Whether the signal went out."""
        agents = self.process
        if agents is None or agents.poll() is not None:
            return False
        if not self.in_step:
            agents.send_signal(getattr(signal, "SIG" + name))
            return True
        # To the agents themselves, through Slurm.
        sent = False
        for line in self.ctx.slurm.queue_value(self.ctx.job, "%i %j", steps=True):
            words = line.split()
            if len(words) == 2 and words[1] == AGENT_STEP:
                sent = self.ctx.slurm.cancel(words[0], name) or sent
        return sent

    def ask_to_end(self) -> None:
        """Start asking the agents to end, from a thread: the decision does not wait for
        Slurm's answers."""

        def ask() -> None:
            with contextlib.suppress(Exception):
                self.asked = self.signal()

        self.asking = threading.Thread(target=ask, name="agents-stop", daemon=True)
        self.asking.start()

    def stop(self) -> None:
        """End the agents and wait for them (at most AGENTS_STOP_S, then they are killed)."""
        agents = self.process
        deadline = time.monotonic() + AGENTS_STOP_S
        if self.asking is not None:
            self.asking.join(timeout=max(0.0, deadline - time.monotonic()))
        # Wait first where ask_agents reached them. Then SIGHUP again, each second through
        # Slurm (one scancel each), every 0.1 s to an agent of this node: one sent before an
        # agent set its handler is lost where the job inherited SIGHUP ignored (nohup), or
        # kills it before it wrote (no harm).
        asked = self.asked
        again = AGENTS_RESEND_S if self.in_step else LOCAL_AGENT_RESEND_S
        while agents is not None and agents.poll() is None:
            if time.monotonic() >= deadline:
                agents.kill()
                break
            if not asked:
                self.signal()
            asked = False
            with contextlib.suppress(subprocess.TimeoutExpired):
                agents.wait(timeout=min(again, max(0.0, deadline - time.monotonic())))
        # An agent killed before it cleaned up leaves this node's folder: it goes too.
        shutil.rmtree(self.ctx.env.get(ENV_PROGRESS_DIR, ""), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.rmdir(self.ctx.env.get(ENV_NODE_TMP, ""))
