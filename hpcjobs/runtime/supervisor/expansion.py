"""Growing in place (docs/requeue.md, "Growing back"): where Slurm permits job expansion and the
job holds no GRES, a run below its full size asks Slurm only for the nodes it misses. Its grower
is then a **helper allocation**: ``salloc --no-shell --dependency=expand:<job>`` (Slurm merges
only an allocation without steps, so not a batch job), waiting in the queue like any job. Once
Slurm grants it, the run checkpoints as before a move (:class:`.grow.GrowWatch`), the helper's
nodes join the job (:meth:`.nodes.Nodes.join`), and the chain runs again inside the job, on the
larger set.

Slurm's ``select/cons_tres`` refuses to merge an allocation when either job holds GRES (GPUs):
such a job grows by moving (:mod:`.growth`).
"""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Sequence

from hpcjobs.contract.slurmtext import JOB_EXPANSION, field, options

#: The job's options that a helper allocation repeats (salloc knows them; the others are a
#: batch job's: output files, signals, requeue, the node count the helper replaces).
HELPER_OPTIONS = (
    "--account=",
    "--qos=",
    "--reservation=",
    "--ntasks-per-node=",
    "--cpus-per-task=",
    "--mincpus=",
    "--mem=",
    "--mem-per-cpu=",
    "--tmp=",
    "--sockets-per-node=",
    "--cores-per-socket=",
    "--threads-per-core=",
    "--constraint=",
    "--hint=",
    "--wckey=",
    "--job-name=",
)

#: The fields of ``scontrol show job`` that name the trackable resources a job asked for or
#: holds; "gres" in any of them rules out expansion.
TRES_FIELDS = ("TRES", "AllocTRES", "ReqTRES", "TresPerNode", "TresPerJob", "TresPerTask")

#: What salloc prints once it has a job id (stderr), and once Slurm granted the allocation.
QUEUED = re.compile(r"(?:Pending|Granted) job allocation (\d+)")
GRANTED = re.compile(r"Granted job allocation (\d+)")

#: How long starting a helper may take before salloc prints its job id (as sbatch's timeout).
START_TIMEOUT_S = 60.0


def helper_args(
    sbatch_args: Sequence[str],
    job: str,
    partition: str,
    size: str,
    excluded: Sequence[str],
    minutes: int,
) -> list[str]:
    """salloc's options for a helper allocation that gives ``size`` nodes (``1``, ``1-2``) to
    running job ``job``, in ``partition`` (the one the job runs in): the job's own account,
    QOS and per-node resources (not its licenses: the job holds them already), without
    ``excluded`` (and the job's own ``--exclude``), for at most ``minutes``; Slurm removes it
    from the queue once it could no longer run a minute (``--time-min``) before ``job``'s time
    limit (``--deadline``)."""
    exclude = list(excluded)
    kept = []
    for arg in sbatch_args:
        if arg.startswith("--exclude="):
            exclude.append(arg[len("--exclude=") :])
        elif arg.startswith(HELPER_OPTIONS):
            kept.append(arg)
    argv = [
        "--no-shell",
        f"--dependency=expand:{job}",
        f"--nodes={size}",
        f"--time={max(minutes, 1)}",
        "--time-min=1",
        f"--deadline=now+{max(minutes, 1)}minutes",
        *([f"--partition={partition}"] if partition else []),
        *kept,
    ]
    if exclude:
        argv.append("--exclude=" + ",".join(exclude))
    return argv


def holds_gres(job_info: str) -> bool:
    """Whether the job (``scontrol show job``) asked for or holds GRES (GPUs)."""
    return any("gres" in field(job_info, name).lower() for name in TRES_FIELDS)


def controller_permits(config_text: str) -> bool:
    """Whether ``scontrol show config`` says ``SchedulerParameters=permit_job_expansion``."""
    for line in config_text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == "SchedulerParameters":
            return JOB_EXPANSION in options(value)
    return False


def why_not(site: bool | None, config_text: str, job_info: str) -> str:
    """Why this job cannot grow in place ("" when it can): ``site`` is the site config's
    ``job_expansion`` (None: the controller's ``config_text`` decides)."""
    if site is False:
        return "the site config says job_expansion: false"
    if holds_gres(job_info):
        return "Slurm cannot add nodes to a running job that holds GPUs"
    if site is None and not controller_permits(config_text):
        return f"the site's Slurm does not permit job expansion ({JOB_EXPANSION})"
    return ""


class Helper:
    """One helper allocation: salloc, in the background until Slurm grants the allocation (or
    it is cancelled). ``job``: its id once salloc printed it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.job = ""
        self.said: list[str] = []
        self._granted = False
        self._known = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read, name="grow-helper", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S) -> Helper:
        """Follow salloc ``proc`` until it printed its job id. Raises RuntimeError with what
        it said when it ended (or timed out) first."""
        helper = cls(proc)
        helper._known.wait(timeout)
        if not helper.job:
            if proc.poll() is None:
                proc.terminate()  # salloc revokes a request it already made
                if not helper._done.wait(5):
                    proc.kill()
            helper._done.wait(5)
            raise RuntimeError(" ".join(helper.said[-3:]) or "salloc printed no job id")
        return helper

    def granted(self) -> bool:
        """Whether Slurm granted the allocation (salloc said so and exited 0)."""
        return self._done.is_set() and self._granted and self.proc.returncode == 0

    def stop(self) -> None:
        """salloc is no longer needed: end it if it still waits (the caller cancels the
        job)."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def _read(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").strip()
                if len(self.said) < 50:
                    self.said.append(line)
                found = QUEUED.search(line)
                if found and not self.job:
                    self.job = found.group(1)
                    self._known.set()
                if GRANTED.search(line):
                    self._granted = True
        finally:
            stream.close()
            self.proc.wait()
            self._done.set()
            self._known.set()
