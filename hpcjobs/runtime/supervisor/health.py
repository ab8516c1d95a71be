"""The site's health check (docs/requeue.md, "Health checks"): on a suspect node before it is
excluded (a node that passes is not), and, in a job with spare nodes, on every node of the job
at once before its first run (the pre-flight check), so that a spare runs in place of a node
that fails it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hpcjobs.contract.causes import (
    INFRASTRUCTURE,
)

from . import decide
from .context import RunContext

if TYPE_CHECKING:
    from .supervise import Supervisor


#: What each node runs for the pre-flight check: the site's check (``$1``), at most ``$2`` s,
#: then one line for :func:`.decide.preflight_failures`, whatever the check did (``$0`` is
#: the line's first word).
PREFLIGHT_SH = (
    'out=$(timeout -k 5 "$2" bash -c "$1" 2>&1 </dev/null); rc=$?\n'
    "last=$(printf '%s\\n' \"$out\" | tr -d '\\r' | grep -v '^[[:space:]]*$' | tail -n 1"
    " | cut -c1-200)\n"
    'printf \'%s %s %s %s\\n\' "$0" "${SLURMD_NODENAME:-$(hostname -s)}" "$rc" "$last"\n'
)


class Health:
    """Runs the site's health check through Slurm and logs what it says."""

    def __init__(self, run: Supervisor) -> None:
        self.run = run
        self.ctx: RunContext = run.ctx

    def healthy(self, node: str) -> bool:
        """Whether the site's health check passes on ``node`` (False when there is none)."""
        check = self.ctx.policy.health_check
        if not check:
            return False
        argv = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + node]
        argv += ["--job-name=hpcjobs-health-check", "--quiet", "bash", "-c", check]
        result = self.ctx.slurm.run(argv, timeout=self.ctx.policy.health_timeout, retry=False)
        lines = (result.out + result.err).strip().splitlines()
        last = lines[-1][:200] if lines else ""
        if result.rc == 0:
            self.ctx.event("health", "pass", f"node={node} {last}", node=node, exit=0, output=last)
            self.ctx.log(f"health check passed on {node}; it is not excluded")
            return True
        self.health_failed(node, result.rc, last)
        self.ctx.log(f"health check failed on {node} (exit code {result.rc})")
        return False

    def health_failed(self, node: str, code: int | None, output: str) -> None:
        """Log that ``node`` failed the site's health check (``code`` None: no answer)."""
        shown = "none" if code is None else str(code)
        self.ctx.event(
            "health", "fail", f"node={node} exit={shown} {output}", node=node, exit=code,
            output=output,
        )  # fmt: skip

    def preflight(self) -> list[str]:
        """With spare nodes and a site health check, before the job's first run: the check on
        every node of the job at once (one srun, one task per node, each at most
        ``health_timeout`` s). The nodes that fail it are logged and excluded; the caller takes
        them out of the job, so that a spare runs in their place. [] when none fails, or when
        every node fails (:func:`.decide.preflight_blames`)."""
        check = self.ctx.policy.health_check
        nodes = self.ctx.slurm.hostnames(self.ctx.env.get("SLURM_JOB_NODELIST", ""))
        if not check or not nodes:
            return []
        count = str(len(nodes))
        argv = ["srun", "--overlap", "--nodes=" + count, "--ntasks=" + count]
        argv += ["--ntasks-per-node=1", "--nodelist=" + ",".join(nodes)]
        argv += ["--job-name=hpcjobs-preflight", "--quiet", "bash", "-c", PREFLIGHT_SH]
        argv += [decide.PREFLIGHT_MARK, check, str(self.ctx.policy.health_timeout)]
        started = self.ctx.clock()
        timeout = self.ctx.policy.health_timeout + 30  # each node's check ends 5 s after its limit
        result = self.ctx.slurm.run(argv, timeout=timeout, retry=False, partial=True)
        seconds = round(self.ctx.clock() - started, 2)
        failed = decide.preflight_failures(result.out, nodes)
        blamed = decide.preflight_blames(failed, nodes)
        for node, failure in failed.items() if blamed else ():
            self.health_failed(node, failure.exit, failure.output)
        if not failed:
            verdict, what = "pass", f"passed on all {count} nodes"
        elif blamed:
            verdict, what = "fail", "failed on " + ",".join(failed)
        else:
            why = (result.err.strip().splitlines() or ["no node printed a result"])[-1][:200]
            verdict, what = "skip", f"failed on every node ({why}); it blames none"
        self.ctx.event(
            "preflight",
            verdict,
            f"health check {what} in {seconds} s",
            checked=len(nodes),
            failed=list(failed) if blamed else [],
            seconds=seconds,
        )
        self.ctx.log(f"pre-flight health check {what} ({seconds} s)")
        if not blamed:
            return []
        self.run.nodes.exclude(INFRASTRUCTURE, list(failed))
        if self.ctx.batch in failed:
            self.ctx.log(f"the batch host {self.ctx.batch} failed the pre-flight check")
        return list(failed)

    def too_few_healthy(self, failed: Sequence[str]) -> None:
        """The job cannot run without nodes that failed the pre-flight check (its batch host,
        or more nodes than it has spares): a job without them takes over (the hand-off) where
        the chain excludes them; where it cannot (the partition has no room), the run starts
        with them, and says so."""
        if set(failed) & set(self.ctx.chain.excluded()):
            return  # handoff_if_excluded() hands over
        self.ctx.log(
            "job {} cannot run without {}, and the chain cannot exclude them (the partition "
            "has no room): the run starts with them".format(self.ctx.job, ",".join(failed))
        )
