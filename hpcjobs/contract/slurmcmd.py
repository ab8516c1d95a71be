"""The Slurm commands the job runs (the supervisor, the node agents), as argv lists: the one
small Slurm runner of the job side.

Only the standard library: the job runs where hpcjobs may not be installed. Every call has a
timeout; a command that the cancel's SIGTERM killed (Slurm signals every process of the job)
is run once more, so that a cancel never turns into a wrong answer.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from .causes import RESIZING
from .slurmtext import field


class Result(NamedTuple):
    rc: int
    out: str
    err: str


class Slurm:
    """Runs Slurm's commands for one job's supervisor, with ``env`` (default: its own)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = env

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 20,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        retry: bool = True,
        partial: bool = False,
    ) -> Result:
        """Run ``argv``; one killed by SIGTERM runs once more when ``retry`` (never for a
        command that may have done its work before it was killed: sbatch, srun). With
        ``partial``, a command that timed out still gives what it printed until then."""
        for _ in range(2 if retry else 1):
            try:
                proc = subprocess.run(
                    list(argv),
                    capture_output=True,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                    cwd=cwd,
                    env=dict(env if env is not None else self.env or os.environ),
                )
            except FileNotFoundError:
                return Result(127, "", f"{argv[0]}: not found")
            except subprocess.TimeoutExpired as exc:
                printed = exc.stdout if partial and isinstance(exc.stdout, bytes) else b""
                out = printed.decode("utf-8", "replace")
                return Result(124, out, f"{argv[0]}: timed out after {timeout} s")
            except OSError as exc:
                return Result(126, "", f"{argv[0]}: {exc}")
            if proc.returncode != -signal.SIGTERM:
                break
        out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        return Result(proc.returncode, out, err)

    def show_job(self, job: str) -> str:
        result = self.run(["scontrol", "show", "job", job])
        return result.out if result.rc == 0 else ""

    def hostnames(self, hostlist: str) -> list[str]:
        if not hostlist or hostlist == "(null)":
            return []
        return self.run(["scontrol", "show", "hostnames", hostlist]).out.split()

    def node_addr(self, node: str) -> str:
        return field(self.run(["scontrol", "show", "node", node]).out, "NodeAddr")

    def partition_nodes(self, partition: str) -> int | None:
        info = self.run(["scontrol", "show", "partition", partition, "-o"]).out
        total = field(info, "TotalNodes")
        return int(total) if total.isdecimal() else None

    def partition_hosts(self, partition: str) -> list[str]:
        """The nodes of ``partition`` as ``sinfo -N`` orders them, by name as the node table
        usually is ([] when unknown; a node listed twice counts once)."""
        argv = ["sinfo", "-h", "-N", "-p", partition, "-o", "%N"]
        names = self.run(argv).out.split()
        return list(dict.fromkeys(names))

    def acct_state(self, job: str) -> str:
        """``job``'s final state in accounting (its newest run), or ""."""
        out = self.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], timeout=10).out
        lines = out.strip().splitlines()
        return lines[-1].split(" ", 1)[0] if lines else ""

    def acct_runs(self, job: str) -> list[tuple[str, str]]:
        """(state, end) of every run of ``job`` in accounting, the first run first; a run Slurm
        resized is one (its records of earlier sizes, ``RESIZING``, are left out)."""
        out = self.run(["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o", "State,End"]).out
        runs = []
        for line in out.splitlines():
            state, _, end = line.partition("|")
            if state.split(" ", 1)[0] != RESIZING:
                runs.append((state, end))
        return runs

    def acct_last(self, job: str) -> tuple[str, str, str]:
        """(state, end, nodes) of ``job``'s newest run in accounting."""
        out = self.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State,End,NodeList"]).out
        lines = out.strip().splitlines()
        if not lines:
            return "", "", ""
        parts = ([*lines[-1].split("|"), "", "", ""])[:3]
        return parts[0].split(" ", 1)[0], parts[1], parts[2]

    def queue_value(self, job: str, fmt: str, steps: bool = False) -> list[str]:
        argv = ["squeue", "-h", "-j", job, "-o", fmt] + (["-s"] if steps else [])
        return self.run(argv).out.splitlines()

    def node_states(self, nodes: str) -> list[tuple[str, str]]:
        out = self.run(["sinfo", "-h", "-N", "-n", nodes, "-o", "%N %T"]).out
        pairs = []
        for line in out.splitlines():
            words = line.split()
            if len(words) == 2:
                pairs.append((words[0], words[1]))
        return pairs

    def cancel(self, job: str, signal_name: str = "") -> bool:
        """Cancel ``job`` (a job or a step), or send it ``signal_name``. A signal goes through
        the controller (``--ctld``): without it scancel sends it to every node itself and
        waits for each answer (4 to 17 s for 131 nodes on a loaded host, measured)."""
        argv = ["scancel", "--quiet"]
        argv += ["--ctld", "--signal=" + signal_name] if signal_name else []
        return self.run([*argv, job]).rc == 0

    def update(self, job: str, setting: str) -> bool:
        return self.run(["scontrol", "update", "jobid=" + job, setting]).rc == 0

    def shrink(self, job: str, nodes: Sequence[str], folder: str) -> bool:
        """Release every node of ``job`` but ``nodes`` from its allocation. Slurm writes
        ``slurm_job_<id>_resize.{sh,csh}`` (the job's new SLURM_* settings) in the folder
        scontrol runs in: ``folder``, which the caller removes."""
        argv = ["scontrol", "update", "jobid=" + job, "NodeList=" + ",".join(nodes)]
        return self.run(argv, cwd=folder).rc == 0

    def join(self, helper: str, job: str, folder: str) -> bool:
        """Give the nodes of ``helper`` (an allocation submitted ``--dependency=expand:<job>``)
        to ``job`` (job expansion): False when Slurm refused. As :meth:`shrink`, Slurm writes
        the job's resize script in ``folder``."""
        if self.run(["scontrol", "update", "jobid=" + helper, "NumNodes=0"], retry=False).rc:
            return False
        # The nodes are the job's now; this only writes the job's new settings.
        self.run(["scontrol", "update", "jobid=" + job, "NumNodes=ALL"], cwd=folder)
        return True

    def config(self) -> str:
        """``scontrol show config`` ("" when it fails)."""
        result = self.run(["scontrol", "show", "config"])
        return result.out if result.rc == 0 else ""

    def allocate(
        self, argv: Sequence[str], cwd: str, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        """Start ``salloc`` with ``argv`` in the background (it waits until Slurm grants the
        allocation); its messages come on stderr. Raises OSError when it cannot start."""
        return subprocess.Popen(
            ["salloc", *list(argv)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )

    def requeue(self, job: str) -> bool:
        return self.run(["scontrol", "requeue", job]).rc == 0

    def submit(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> Result:
        argv = ["sbatch", "--parsable", *list(argv)]
        return self.run(argv, timeout=60, cwd=cwd, env=env, retry=False)
