"""The sandbox seen from the login node, for the live requeue and fault tests: submit the
deterministic workload (``requeue_workload.py``), watch its chain, interrupt it, clean up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

from hpcjobs.contract.names import progress_dir
from hpcjobs.jobs.chain import Chain, chain_file, read_chain
from hpcjobs.runner import LocalRunner
from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.sandbox.cluster import OTHER_USER
from tests.live.waiting import wait_for

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")
WORKLOAD = str(Path(__file__).with_name("requeue_workload.py"))


@dataclass
class Cluster:
    """The test sandbox seen from the login node: submit, watch, interrupt, clean up."""

    env: dict[str, str]
    folder: Path
    slurm_major: tuple[int, int]
    jobs: list[str] = field(default_factory=list)

    def preempted_run(self, state: str, exit_code: str = "0:0") -> tuple[str, str]:
        """``(state, exit code)`` in sacct of a run that ended during a preemption's grace time
        (or of the run after Slurm requeued a preempted job) and would otherwise be recorded
        ``state``: Slurm >= 24.05 records ``PREEMPTED`` whatever the exit (measured on 24.11)."""
        return ("PREEMPTED", "0:0") if self.slurm_major >= (24, 5) else (state, exit_code)

    @property
    def runner(self) -> LocalRunner:
        return LocalRunner(env=self.env)

    def slurm(self, *argv: str, check: bool = True) -> str:
        return self.runner.run(list(argv), check=check, timeout=60).stdout

    # ---- submitting --------------------------------------------------------------------------

    def submit(
        self,
        name: str,
        *options: str,
        steps: int,
        extra: tuple[str, ...] = (),
        site: str = "sandbox",
    ) -> Job:
        """``hpcjobs --site sandbox submit`` the workload (``site``: another site name or file);
        returns the job and its folders.

        Waits first until no preemptor of an earlier test is left in the queue: one still
        pending would preempt this job too."""
        wait_for("earlier preemptors to leave the queue", self._no_preemptor, 120)
        out = self.folder / name
        out.mkdir(mode=0o755)
        result = out / "result.json"
        argv = [HPCJOBS, "--site", site, "submit", "-J", name, "--output-dir", str(out)]
        argv += [*options, "--", PYTHON, WORKLOAD, "--steps", str(steps)]
        argv += ["--result", str(result), *extra]
        proc = subprocess.run(
            argv,
            env={**os.environ, **self.env},
            cwd=out,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split()[-1]
        self.jobs.append(job_id)
        return Job(self, job_id, out, steps)

    def preempt(self) -> str:
        """Submit an ``urgent`` job that needs every node: it preempts whatever runs in batch."""
        out = self.slurm(
            "sbatch", "--parsable", "-p", "urgent", "-N", "3", "--exclusive",
            "-J", "preemptor", "-o", "/dev/null", "--wrap", "sleep 5",
        )  # fmt: skip
        job_id = out.strip().split(";")[0]
        self.jobs.append(job_id)
        return job_id

    def fill_as_other_user(self, nodes: list[str], gpus: int, cpus: int = 0) -> list[str]:
        """Make the cluster busy: on each of ``nodes``, a job of the sandbox's second user
        that holds ``gpus`` GPUs (or, with ``cpus``, that many CPUs and no GPU; not requeued:
        a node failure ends it). Their ids, once they run; cancel them with :meth:`cancel`."""
        ids = []
        holds = f"--cpus-per-task={cpus}" if cpus else f"--gres=gpu:{gpus}"
        for node in nodes:
            proc = subprocess.run(
                ["sbatch", "--parsable", "-N", "1", "-w", node, holds,
                 "--no-requeue", "-t", "10", "-J", "busy", "-o", "/dev/null",
                 "--wrap", "sleep 600"],
                user=OTHER_USER,
                cwd="/",
                env={**os.environ, **self.env},
                capture_output=True,
                text=True,
                timeout=60,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
            ids.append(proc.stdout.strip().split(";")[0])
        self.jobs.extend(ids)
        for job_id in ids:
            wait_for(
                f"job {job_id} to run", lambda j=job_id: self.state(j).startswith("RUNNING"), 60
            )
        return ids

    def cancel(self, *job_ids: str) -> None:
        """Cancel ``job_ids`` and wait until they have left the queue."""
        self.slurm("scancel", *job_ids, check=False)
        for job_id in job_ids:
            wait_for(f"job {job_id} to leave the queue", partial(self.gone, job_id), 60)

    def _no_preemptor(self) -> bool:
        return not self.slurm("squeue", "-h", "-n", "preemptor", "-o", "%i").strip()

    # ---- watching ----------------------------------------------------------------------------

    def state(self, job_id: str) -> str:
        """``STATE REASON`` from squeue, or "" once the job has left the queue."""
        return self.slurm("squeue", "-h", "-j", job_id, "-o", "%T %r", check=False).strip()

    def gone(self, job_id: str) -> bool:
        return self.state(job_id) == ""

    def runs(self, job_id: str) -> list[dict[str, str]]:
        """Every run of a job (``sacct -D``: one row per requeue), oldest first."""
        text = self.slurm(
            "sacct", "-n", "-X", "-D", "-P", "-j", job_id,
            "-o", "JobID,State,ExitCode,Start,End,NodeList",
        )  # fmt: skip
        keys = ("job_id", "state", "exit_code", "start", "end", "nodes")
        return [
            dict(zip(keys, line.split("|"), strict=False)) for line in text.splitlines() if line
        ]

    def settled_runs(self, job_id: str, count: int) -> list[dict[str, str]]:
        """The job's ``count`` runs once accounting has recorded how each ended."""

        def probe() -> list[dict[str, str]] | None:
            rows = self.runs(job_id)
            done = len(rows) == count and all(r["end"] not in ("", "Unknown") for r in rows)
            return rows if done else None

        return wait_for(f"sacct to record {count} run(s) of job {job_id}", probe, 30)

    def clear_requeue_hold(self, job_id: str, timeout: float = 90) -> None:
        """Slurm holds a requeued job ~2 min (PENDING, BeginTime); its owner may lift that."""
        wait_for(
            f"job {job_id} to be requeued (PENDING BeginTime)",
            lambda: self.state(job_id) == "PENDING BeginTime",
            timeout,
        )
        self.slurm("scontrol", "update", f"jobid={job_id}", "StartTime=now")

    def node_up(self, node: str) -> bool:
        """The node takes jobs again (sinfo prints one line per partition)."""
        states = self.slurm("sinfo", "-h", "-n", node, "-o", "%T", check=False).split()
        return bool(states) and all(s in ("idle", "mixed", "allocated") for s in states)

    def explain(self, job_ids: list[str]) -> str:
        """What Slurm says about ``job_ids``, for a failing test's report: the queue, each job's
        record and runs, the nodes that are not up and why, and the controller's log lines that
        name one of the jobs."""
        parts = ["queue:\n" + self.slurm("squeue", "-a", "-o", "%i %j %T %r %E %N", check=False)]
        for job_id in job_ids:
            parts.append(self.slurm("scontrol", "show", "job", job_id, check=False))
            columns = "JobID,State,ExitCode,Start,End,NodeList,Reason%30"
            parts.append(self.slurm("sacct", "-X", "-D", "-j", job_id, "-o", columns, check=False))
        parts.append("nodes:\n" + self.slurm("sinfo", "-N", "-o", "%N %T %E", check=False))
        parts.append("controller log:\n" + "\n".join(self._controller_log(job_ids)[-60:]))
        return "\n".join(parts)

    def _controller_log(self, job_ids: list[str]) -> list[str]:
        conf = Path(self.env.get("SLURM_CONF", ""))
        try:
            text = conf.read_text()
            (path,) = [
                line.split("=", 1)[1].strip()
                for line in text.splitlines()
                if line.startswith("SlurmctldLogFile=")
            ]
            lines = Path(path).read_text(errors="replace").splitlines()
        except (OSError, ValueError):
            return ["(no controller log)"]
        words = [f"JobId={j}" for j in job_ids] + [f"job {j}" for j in job_ids]
        words += [f"StepId={j}" for j in job_ids]
        notable = ("requeue", "DOWN", "not responding", "NODE_FAIL", "Preempt")
        return [line for line in lines if any(w in line for w in (*words, *notable))]

    def cancel_all(self, extra: list[str]) -> None:
        ids = sorted(set(self.jobs + extra))
        if ids:
            self.slurm("scancel", *ids, check=False)


@dataclass
class Job:
    """One submitted chain: its first job id, output folder and workload size."""

    cluster: Cluster
    root: str
    folder: Path
    steps: int

    @property
    def chain_file(self) -> Path:
        return chain_file(self.folder, self.root)

    @property
    def chain(self) -> Chain:
        return read_chain(self.chain_file)

    @property
    def log(self) -> str:
        path = self.folder / f"slurm-{self.root}.out"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    @property
    def checkpoints(self) -> CheckpointDir:
        return CheckpointDir(self.folder / "checkpoints")

    @property
    def result(self) -> dict[str, object] | None:
        path = self.folder / "result.json"
        return json.loads(path.read_text()) if path.exists() else None

    def events(self) -> list[tuple[str, str]]:
        return [(e.event, e.cause) for e in self.chain.events]

    def progress_at_least(self, step: int, timeout: float = 60) -> int:
        """Wait until the workload has reached ``step`` (its PROGRESS note)."""

        def probe() -> int | None:
            reached = self.checkpoints.progress()
            return reached if reached is not None and reached >= step else None

        return wait_for(f"job {self.root} to reach step {step}", probe, timeout, every=0.1)

    def agents_reporting(self, timeout: float = 60) -> list[str]:
        """Wait until the node agent on every node of the job has written its first summary
        (the deputy, which watches the batch host, among them); the job's nodes."""
        folder = self.folder / progress_dir(self.root)

        def probe() -> list[str] | None:
            text = self.cluster.slurm("squeue", "-h", "-j", self.root, "-o", "%N", check=False)
            hostlist = text.strip()
            if not hostlist:
                return None
            nodes = self.cluster.slurm("scontrol", "show", "hostnames", hostlist).split()
            up = nodes and all((folder / f"node-{node}").is_file() for node in nodes)
            return nodes if up else None

        return wait_for(f"the node agents of job {self.root}", probe, timeout, every=0.2)

    def running(self, job_id: str, timeout: float = 60) -> None:
        wait_for(
            f"job {job_id} to run",
            lambda: self.cluster.state(job_id).startswith("RUNNING"),
            timeout,
            every=0.1,
        )

    def ended(self, timeout: float = 120) -> Chain:
        """Wait for the chain's final event and for every job of the chain to leave the queue."""

        def probe() -> Chain | None:
            chain = self.chain
            return chain if chain.final is not None else None

        chain = wait_for(f"chain {self.root} to end", probe, timeout)
        for job_id in chain.job_ids:
            wait_for(f"job {job_id} to leave the queue", partial(self.cluster.gone, job_id), 60)
        self.cluster.jobs.extend(chain.job_ids)
        return self.chain

    def continuation(self, after: int) -> str:
        """The job id the chain continued in after its ``after``-th requeue (1-based)."""

        def probe() -> str | None:
            stops = self.chain.interruptions()
            if len(stops) < after:
                return None
            how = stops[after - 1].how
            return how.split()[3] if how.startswith("continued as job") else None

        new = wait_for(f"requeue {after} of chain {self.root}", probe, 60, every=0.1)
        self.cluster.jobs.append(new)
        return new


_REFERENCE: dict[int, dict[str, object]] = {}


def reference(steps: int, folder: Path) -> dict[str, object]:
    """The result of an uninterrupted run of the workload, computed here without Slurm."""
    if steps not in _REFERENCE:
        work = folder / f"reference-{steps}"
        work.mkdir()
        env = {**os.environ, "HPCJOBS_CHECKPOINT_DIR": str(work / "checkpoints")}
        argv = [PYTHON, WORKLOAD, "--steps", str(steps), "--step-time", "0"]
        argv += ["--checkpoint-every", str(steps + 1), "--result", str(work / "result.json")]
        subprocess.run(argv, env=env, check=True, timeout=60, capture_output=True)
        _REFERENCE[steps] = json.loads((work / "result.json").read_text())
    return _REFERENCE[steps]


def seconds(stamp: str) -> float:
    """An sacct time stamp (local time, 1 s resolution) as epoch seconds."""
    return datetime.fromisoformat(stamp).timestamp()
