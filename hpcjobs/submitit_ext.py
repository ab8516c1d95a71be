"""submitit executors whose jobs run through hpcjobs' own batch scripts.

:class:`HpcExecutor` is a :class:`submitit.SlurmExecutor`: ``submit``, ``map_array``,
``submit_array`` and ``batch`` work as in submitit, and so do the jobs they return. What
differs is the script: every job is rendered by :func:`hpcjobs.render.render_job`, exactly as
``hpcjobs submit`` renders it, with the site's partition defaults, NCCL/UCX/Gloo variables,
per-rank CPU/GPU/NIC binding (``srun``, one task per GPU), the warning signal, and the requeue
library (event log, budgets per cause, fast continuation). Each rank runs
``python -m hpcjobs.submitit_ext FOLDER`` (:func:`run_task`), which loads the pickled call and
writes its result like submitit does.

**Continuations.** A preempted or timed-out job continues in a new job with a new id. The new
run links ``<folder>/<new id>_submitted.pkl`` to the previous run's pickle before it loads it, and
:class:`HpcJob` follows the chain's event log (``<folder>/chain-<first id>.tsv``): ``state``,
``done()``, ``result()``, ``stdout()``, ``stderr()`` and ``cancel()`` of the job object returned
at submission always speak for the newest run. Array tasks are followed one by one.

**Resuming.** A :class:`~hpcjobs.resumable.Resumable` callable gets its stop flag installed
before it runs and resumes from its checkpoint folder (one per job, and per array task). A
callable with submitit's ``checkpoint()`` method (``submitit.helpers.Checkpointable``) is
checkpointed by global rank 0 on the warning signal or SIGTERM, as submitit does; the new state
is pickled for this job's continuation only. Plain functions start over.

This is the only module of hpcjobs that imports submitit; ``import hpcjobs`` does not load it.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import signal
import socket
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from submitit.core import core, utils
from submitit.slurm import slurm as submitit_slurm

from hpcjobs.chain import Chain, read_chain
from hpcjobs.config.locate import SITE_ENV
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import BadInputError, HpcJobsError
from hpcjobs.jobspec import JobSpec, parse_spec, resolve_spec
from hpcjobs.records import make_private_dir
from hpcjobs.render import RenderedJob, render_job
from hpcjobs.resumable import Interrupted, Resumable
from hpcjobs.runner import LocalRunner
from hpcjobs.safetext import MAX_COUNT, check_int, require_safe
from hpcjobs.slurm.arrays import parse_array, split_array
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.stopflag import signal_from_env
from hpcjobs.submission import submit_rendered
from hpcjobs.textlines import split_lines

log = logging.getLogger(__name__)

R = TypeVar("R", covariant=True)

#: The module every rank runs: ``python -u -m hpcjobs.submitit_ext FOLDER``.
TASK_MODULE = "hpcjobs.submitit_ext"

#: Executor parameters and what each one sets (defaults in parentheses).
PARAMETERS: dict[str, str] = {
    "job_name": "job name (the function's name)",
    "partition": "partition (the site's default)",
    "nodes": "number of nodes (1)",
    "gpus_per_node": "GPUs per node (all of the partition's)",
    "ntasks_per_node": "ranks per node (one per GPU)",
    "cpus_per_task": "CPUs per rank (the node's CPUs shared by the ranks)",
    "time": "time limit: minutes (int) or Slurm time text (the site's)",
    "account": "account to charge (the site's)",
    "qos": "quality of service (the site's)",
    "mem": "memory per node, sbatch syntax, e.g. '64G'",
    "mem_per_cpu": "memory per CPU, sbatch syntax",
    "mem_per_gpu": "memory per GPU, sbatch syntax",
    "constraint": "node features, sbatch syntax",
    "exclude": "nodes to avoid",
    "nodelist": "nodes to use",
    "exclusive": "whole nodes (True, or 'user'/'mcs')",
    "reservation": "reservation to run in",
    "mail_type": "mail events, e.g. 'END,FAIL'",
    "mail_user": "mail address",
    "comment": "job comment",
    "dependency": "Slurm dependency, e.g. 'afterok:1234'",
    "array_parallelism": "most array tasks running at once (256)",
    "additional_parameters": "other sbatch options, {'name': value} (True for a flag)",
    "env": "variables for the job, {'NAME': 'value'}",
    "checkpoint_dir": "folder holding one checkpoint folder per job (FOLDER/checkpoints)",
    "signal": "warning signal (the site's, e.g. USR2)",
    "signal_delay_s": "seconds between the warning signal and the time limit (the site's)",
    "max_requeues": "requeue budget: N in total, or {cause: N} (the site's)",
    "requeue": "come back after preemption, time limit or node failure (True)",
    "nccl_debug": "NCCL debugging variables (False)",
    "bind": "per-rank CPU/GPU/NIC binding (True)",
}

#: submitit's names for the same parameters (``update_parameters(timeout_min=60)`` works).
ALIASES: dict[str, str] = {
    "name": "job_name",
    "timeout_min": "time",
    "tasks_per_node": "ntasks_per_node",
    "mem_gb": "mem",
}

#: Parameters passed to sbatch as they are (``mem_per_cpu`` -> ``--mem-per-cpu``).
_SBATCH_PARAMETERS = (
    "mem",
    "mem_per_cpu",
    "mem_per_gpu",
    "constraint",
    "exclude",
    "nodelist",
    "exclusive",
    "reservation",
    "mail_type",
    "mail_user",
    "comment",
)

#: How long a task waits for its pickle (the job may start before submission has moved it).
PICKLE_WAIT_S = 60.0

#: sacct states of a run that has not ended (submitit's list).
_UNFINISHED = frozenset(
    {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED"}
)

_CONTINUED = re.compile(r"continued as job (\d+(?:_\d+)?)(?:\s|$)")


class UnknownParameterError(BadInputError, ValueError):
    """An executor parameter hpcjobs does not know (also a ValueError, as in submitit)."""


# ---- jobs that follow their chain of runs -------------------------------------------------


class ChainWatcher(submitit_slurm.SlurmInfoWatcher):
    """submitit's sacct watcher, aware that hpcjobs jobs come back after some endings.

    ``NODE_FAIL`` counts as unfinished for :attr:`node_fail_grace_s` (Slurm requeues such a
    job under the same id), and runs that a continuation replaced can be retired so that they
    are no longer polled.
    """

    node_fail_grace_s = 120.0

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self._node_fail_seen: dict[str, float] = {}

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        state = self.get_state(job_id, mode=mode).upper()
        if state.startswith("NODE_FAIL"):
            first = self._node_fail_seen.setdefault(job_id, time.monotonic())
            return time.monotonic() - first > self.node_fail_grace_s
        self._node_fail_seen.pop(job_id, None)
        return bool(super().is_done(job_id, mode="cache"))

    def retire(self, job_id: str) -> None:
        """Stop polling ``job_id`` (a run its continuation replaced)."""
        if job_id in self._registered:
            self._finished.add(job_id)


class HpcJob(submitit_slurm.SlurmJob[R]):
    """A submitit job that follows its continuations.

    ``job_id`` stays the first job's id; :attr:`job_ids` lists every run, and ``state``,
    ``done()``, ``result()``, ``results()``, ``exception()``, ``stdout()``, ``stderr()``,
    ``get_info()`` and ``cancel()`` speak for the newest one. For a job with several tasks
    (ranks), ``result()`` returns the result of global rank 0 and ``results()`` all of them.
    """

    watcher = ChainWatcher(delay_s=60)
    checkpoint_dir: Path | None = None

    def set_checkpoint_dir(self, path: Path) -> None:
        """Remember the job's checkpoint folder (known at submission)."""
        self.checkpoint_dir = path
        for sub in self._sub_jobs:
            assert isinstance(sub, HpcJob)
            sub.checkpoint_dir = path

    # ---- the chain -----------------------------------------------------------------------

    def chain(self) -> Chain:
        """The job's event log: every run, interruption and the final outcome."""
        return read_chain(self.paths.folder / f"chain-{self.job_id}.tsv")

    @property
    def job_ids(self) -> list[str]:
        """Every run's job id, the first one first (continuations have new ids)."""
        return self.chain().job_ids or [self.job_id]

    @property
    def current_job_id(self) -> str:
        """The newest run's job id (running, pending, or the last one to run)."""
        return self.job_ids[-1]

    def _current(self, chain: Chain) -> str:
        ids = chain.job_ids or [self.job_id]
        for old in ids[:-1]:
            self.watcher.retire(old)
        return ids[-1]

    # ---- state ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """The Slurm state of the newest run.

        It comes from accounting (submitit's sacct watcher). While accounting does not know the
        run yet (right after submission) the queue answers (one squeue, reused for
        :data:`QUEUE_STATE_TTL_S`): ``PENDING`` as a rule. A continuation that neither knows
        yet is ``PENDING`` too.
        """
        chain = self.chain()
        current = self._current(chain)
        state = str(self.watcher.get_state(current, mode="standard"))
        if chain.final is not None and state.upper() in _UNFINISHED:
            # The chain has ended: what Slurm said before is out of date, ask once more.
            state = str(self.watcher.get_state(current, mode="force"))
        if state == "UNKNOWN":
            state = queue_state(current) or state
        if state == "UNKNOWN" and current != self.job_id:
            return "PENDING"
        return state

    def get_info(self, mode: str = "force") -> dict[str, str]:
        """sacct's information about the newest run."""
        info: dict[str, str] = self.watcher.get_info(self._current(self.chain()), mode=mode)
        return info

    def done(self, force_check: bool = False) -> bool:
        """Whether the job is over: its chain ended, or its newest run left Slurm for good."""
        if self._sub_jobs:
            return all(sub.done(force_check=force_check) for sub in self._sub_jobs)
        chain = self.chain()
        if chain.final is not None:
            return True
        current = self._current(chain)
        if not self.watcher.is_done(current, mode="force" if force_check else "standard"):
            return False
        # The run is over for Slurm; a continuation it submitted is in the log by now.
        return self._current(self.chain()) == current

    # ---- results and logs ----------------------------------------------------------------

    def result(self) -> R:
        """The result of the job's function (of global rank 0 for a multi-task job)."""
        if self._sub_jobs:
            return self.results()[0]
        return super().result()

    def _get_outcome_and_result(self) -> tuple[str, Any]:
        assert not self._sub_jobs, "this should not be called for a multi-task job"
        task = self.task_id or 0
        deadline = time.monotonic() + self._results_timeout_s
        while True:
            chain = self.chain()
            found = newest_result(self.paths.folder, chain.job_ids or [self.job_id], task)
            if found is not None:
                return found
            final = chain.final
            expected = final is None or final.cause == "finish"
            if not expected or time.monotonic() > deadline:
                raise utils.UncompletedJobError(self._missing_result_message(chain, task))
            time.sleep(1)  # a slow shared file system may not show the file yet

    def _missing_result_message(self, chain: Chain, task: int) -> str:
        final = chain.final
        how = f"the job ended: {final.cause}, {final.detail}" if final else "no end recorded"
        lines = [
            f"Job {self.job_id} (task {task}) produced no result ({how}; state {self.state}).",
            f"Runs: {', '.join(chain.job_ids or [self.job_id])}; logs in {self.paths.folder}.",
        ]
        tail = split_lines((self._get_logs_string("stderr") or "").strip())[-20:]
        if tail:
            lines += ["Last lines of the error stream:", *tail]
        return "\n".join(lines)

    def _get_logs_string(self, name: str) -> str | None:
        if name not in ("stdout", "stderr"):
            raise ValueError(f'unknown log "{name}", use "stdout" or "stderr"')
        texts = []
        for job_id in self.job_ids:
            paths = utils.JobPaths(self.paths.folder, job_id=job_id, task_id=self.task_id)
            path = paths.stdout if name == "stdout" else paths.stderr
            if path.exists():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "".join(texts) if texts else None

    def cancel(self, check: bool = True) -> None:
        """Cancel the job: every run of its chain that is still queued or running."""
        try:
            SlurmClient(LocalRunner()).cancel(self.job_ids)
        except HpcJobsError:
            if check:
                raise
            log.warning("could not cancel job %s", self.job_id, exc_info=True)


#: Seconds an answer of the queue about one job is reused by :func:`queue_state`.
QUEUE_STATE_TTL_S = 2.0
_QUEUE_STATES: dict[str, tuple[float, str | None]] = {}


def queue_state(job_id: str, client: SlurmClient | None = None) -> str | None:
    """The state the queue (``squeue``) shows for ``job_id``; None if it does not show it.

    For a job that accounting does not know yet. One query, without retries (a state probe
    must not block), and reused for :data:`QUEUE_STATE_TTL_S` seconds so that polling
    ``job.state`` in a loop does not load the controller.
    """
    from hpcjobs.slurm.jobs import row_matches
    from hpcjobs.slurm.retry import NO_RETRY

    now = time.monotonic()
    seen = _QUEUE_STATES.get(job_id)
    if seen is not None and now - seen[0] < QUEUE_STATE_TTL_S:
        return seen[1]
    client = client or SlurmClient(LocalRunner(), policy=NO_RETRY, query_timeout_s=15.0)
    try:
        rows = client.queue([job_id])
    except HpcJobsError:
        log.debug("squeue for job %s failed", job_id, exc_info=True)
        return None
    state = next((r.state for r in rows if row_matches(job_id, r.job_id, r.raw_id)), None)
    for old in [k for k, (at, _) in _QUEUE_STATES.items() if now - at >= QUEUE_STATE_TTL_S]:
        del _QUEUE_STATES[old]
    _QUEUE_STATES[job_id] = (now, state)
    return state


def newest_result(folder: Path, job_ids: Sequence[str], task: int) -> tuple[str, Any] | None:
    """The result a chain of runs produced for ``task``, or None.

    A success is final whichever run wrote it (later runs find the done marker and stop at
    once). An error counts only from the newest run: an earlier run's error was followed by a
    continuation, which superseded it.
    """
    for position, job_id in enumerate(reversed(job_ids)):
        path = utils.JobPaths(folder, job_id=job_id, task_id=task).result_pickle
        if not path.exists():
            continue
        try:
            outcome, value = utils.pickle_load(path)
        except EOFError:  # being replaced right now; the caller polls again
            return None
        if outcome == "success" or position == 0:
            return str(outcome), value
    return None


# ---- the executor ----------------------------------------------------------------------------


class HpcExecutor(submitit_slurm.SlurmExecutor):
    """A submitit Slurm executor whose jobs are rendered from hpcjobs' templates.

    Args:
        folder: The shared folder for pickles, logs, event logs and checkpoints. It must
            not contain ``%`` (one folder serves every job; files are named by job id).
        site: The site config.
        python: The Python that runs the tasks on the nodes: an absolute path, optionally
            followed by arguments (a string is split like a shell). Default: this Python.
        client: The Slurm client to submit through (default: local Slurm commands).
        max_pickle_size_gb: Refuse submissions whose pickles exceed this (as submitit).
    """

    job_class = HpcJob

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        site: SiteConfig,
        python: str | Sequence[str] | None = None,
        client: SlurmClient | None = None,
        max_pickle_size_gb: float = 1.0,
    ) -> None:
        if "%" in str(folder):
            raise BadInputError(
                f"executor folder {str(folder)!r} contains '%'",
                hint="hpcjobs names every file in one folder by job id; pass a plain folder",
            )
        # No srun check here (submitit's): rendering needs no Slurm, submission says clearly
        # when sbatch is missing.
        core.PicklingExecutor.__init__(
            self, Path(folder), max_num_timeout=0, max_pickle_size_gb=max_pickle_size_gb
        )
        self.site = site
        self.python_argv = _python_argv(python)
        self.python = shlex.join(self.python_argv)
        self._client = client
        self._resolved = self._check({})

    # ---- parameters ----------------------------------------------------------------------

    @classmethod
    def _valid_parameters(cls) -> set[str]:
        return set(PARAMETERS)

    def _internal_update_parameters(self, **kwargs: Any) -> None:
        canonical: dict[str, Any] = {}
        for key, value in kwargs.items():
            name = ALIASES.get(key, key)
            if name == "mem" and key == "mem_gb":
                value = _mem_from_gb(value)
            canonical[name] = value
        unknown = sorted(k for k in kwargs if ALIASES.get(k, k) not in PARAMETERS)
        if unknown:
            listing = "\n".join(f"  {name}: {text}" for name, text in PARAMETERS.items())
            raise UnknownParameterError(
                f"unknown executor parameter(s): {', '.join(unknown)}; valid parameters:\n"
                + listing,
                hint="submitit's names timeout_min, mem_gb, tasks_per_node and name also work",
            )
        merged = {**self.parameters, **canonical}
        self._resolved = self._check(merged)
        self.parameters = merged

    def _check(self, parameters: Mapping[str, Any]) -> JobSpec:
        """Validate ``parameters`` by rendering a job with them; return the resolved spec."""
        spec = self._spec(parameters, self._task_argv(), name="submitit", array=None, uid="check")
        return render_job(spec, self.site).spec

    def _num_tasks(self) -> int:
        return (self._resolved.nodes or 1) * (self._resolved.ntasks_per_node or 1)

    # ---- rendering -----------------------------------------------------------------------

    def _task_argv(self) -> list[str]:
        return [*self.python_argv, "-u", "-m", TASK_MODULE, str(self.folder)]

    @property
    def _submitit_command_str(self) -> str:
        return shlex.join(self._task_argv())

    def _spec(
        self,
        parameters: Mapping[str, Any],
        command: list[str],
        *,
        name: str,
        array: str | None,
        uid: str,
    ) -> JobSpec:
        p = parameters
        data: dict[str, Any] = {
            "name": p.get("job_name") or name,
            "partition": p.get("partition"),
            "nodes": p.get("nodes"),
            "gpus_per_node": p.get("gpus_per_node"),
            "ntasks_per_node": p.get("ntasks_per_node"),
            "cpus_per_task": p.get("cpus_per_task"),
            "time": p.get("time"),
            "account": p.get("account"),
            "qos": p.get("qos"),
            "launcher": "srun",
            "command": command,
            "env": p.get("env"),
            "array": array,
            "dependency": p.get("dependency"),
            "checkpoint_dir": str(self._checkpoint_root(p) / uid),
            "requeue": _requeue_fields(p),
            "output_dir": str(self.folder),
            "sbatch_options": _sbatch_options(p) or None,
            "nccl_debug": p.get("nccl_debug"),
            "bind": p.get("bind"),
        }
        try:
            return parse_spec(
                {k: v for k, v in data.items() if v is not None}, source="executor parameters"
            )
        except BadInputError as exc:
            exc.hint = "see hpcjobs.submitit_ext.PARAMETERS (docs/python-api.md) for the syntax"
            raise

    def _checkpoint_root(self, parameters: Mapping[str, Any]) -> Path:
        """The folder holding one checkpoint folder per submission."""
        base = parameters.get("checkpoint_dir")
        return Path(str(base)).expanduser().absolute() if base else self.folder / "checkpoints"

    def render(
        self, *, count: int = 1, name: str = "submitit", uid: str = "preview"
    ) -> RenderedJob:
        """The job a submission would get (``count`` > 1: an array), rendered, not submitted."""
        array = _array_spec(count, self.parameters) if count > 1 else None
        spec = self._spec(self.parameters, self._task_argv(), name=name, array=array, uid=uid)
        return render_job(spec, self.site, array_task_checkpoints=True)

    def _make_submission_file_text(self, command: str, uid: str) -> str:
        spec = self._spec(
            self.parameters, shlex.split(command), name="submitit", array=None, uid=uid
        )
        return render_job(spec, self.site).script

    # ---- submission ----------------------------------------------------------------------

    @property
    def client(self) -> SlurmClient:
        """The Slurm client submissions go through."""
        if self._client is None:
            self._client = SlurmClient(LocalRunner())
        return self._client

    def _internal_process_submissions(
        self, delayed_submissions: list[utils.DelayedSubmission]
    ) -> list[core.Job[Any]]:
        count = len(delayed_submissions)
        make_private_dir(self.folder)
        pickles = [self._dump(d, count) for d in delayed_submissions]
        uid = uuid.uuid4().hex[:16]
        rendered = self.render(
            count=count, name=_callable_name(delayed_submissions[0].function), uid=uid
        )
        try:
            job_ids = self._submit_rendered(rendered, count)
        except BaseException:
            for path in pickles:
                path.unlink(missing_ok=True)
            raise
        tasks = list(range(self._num_tasks()))
        checkpoints = Path(str(rendered.spec.checkpoint_dir))
        make_private_dir(checkpoints.parent)
        jobs: list[core.Job[Any]] = []
        for index, (job_id, pickled) in enumerate(zip(job_ids, pickles, strict=True)):
            job: HpcJob[Any] = HpcJob(folder=self.folder, job_id=job_id, tasks=tasks)
            job.paths.move_temporary_file(pickled, "submitted_pickle")
            own = checkpoints / f"task-{index}" if count > 1 else checkpoints
            job.set_checkpoint_dir(own)
            _link(checkpoints.parent / job_id, own)  # checkpoints/<job id>, for people
            jobs.append(job)
        return jobs

    def _submit_command(self, command: str) -> core.Job[Any]:
        """Submit a shell command as a job (submitit's low-level entry; rarely useful)."""
        uid = uuid.uuid4().hex[:16]
        spec = self._spec(
            self.parameters, shlex.split(command), name="submitit", array=None, uid=uid
        )
        rendered = render_job(spec, self.site)
        job_id = self._submit_rendered(rendered, 1)[0]
        return HpcJob(folder=self.folder, job_id=job_id, tasks=list(range(self._num_tasks())))

    def _submit_rendered(self, rendered: RenderedJob, count: int) -> list[str]:
        """Submit; return one job id per call, in order (``<array id>_<index>`` for arrays)."""
        limit = self.client.max_array_size() if count > 1 else None
        self._throttle()
        result = submit_rendered(rendered, client=self.client, max_array_size=limit)
        self._last_job_submitted = time.time()
        for job_id in result.job_ids:
            _link(self.folder / f"{job_id}_submission.sh", result.script_path)
        if count == 1:
            return [result.job_ids[0]]
        assert rendered.spec.array is not None and limit is not None
        chunks = split_array(parse_array(rendered.spec.array), limit)
        return [
            f"{array_id}_{index}"
            for chunk, array_id in zip(chunks, result.job_ids, strict=True)
            for index in chunk.spec.indices
        ]

    def _dump(self, delayed: utils.DelayedSubmission, count: int) -> Path:
        path = self.folder / f".{uuid.uuid4().hex}.pkl"
        delayed.set_timeout(_minutes(self._resolved.time), 0)
        write_pickle(path, delayed)
        size_gb = path.stat().st_size / 1024**3
        if size_gb * count > self.max_pickle_size_gb:
            path.unlink()
            raise BadInputError(
                f"submitting about {count} x {size_gb:.2f} GB of pickled functions and "
                f"arguments, more than max_pickle_size_gb={self.max_pickle_size_gb}",
                hint="pass paths instead of data, or raise the executor's max_pickle_size_gb",
            )
        return path


# ---- what each rank runs -----------------------------------------------------------------


def run_task(folder: str | os.PathLike[str]) -> None:
    """Run this rank's share of a job: load the pickled call, run it, store its result.

    Like submitit's own runner, except that: the rank's output goes to
    ``<folder>/<job id>_<rank>_log.out/.err``; a continuation first links its pickle to the
    previous run's; signals are left to hpcjobs (a :class:`Resumable` gets its stop flag, a
    submitit ``Checkpointable`` is checkpointed by rank 0, anything else keeps the warning
    signal ignored); a run that stops with :class:`~hpcjobs.resumable.Interrupted` stores no
    result; and once every rank has a result the chain's done marker is written, so a run
    requeued during the grace window does not start over.
    """
    base = Path(folder)
    os.environ["SUBMITIT_FOLDER"] = str(base)
    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")
    env = submitit_slurm.SlurmJobEnvironment()
    job_id, rank = str(env.job_id), int(env.global_rank)
    paths = utils.JobPaths(base, job_id=job_id, task_id=rank)
    redirect_output(paths.stdout, paths.stderr)
    _setup_logging(rank)
    root = os.environ.get("HPCJOBS_CHAIN_ROOT") or job_id
    if root != job_id:
        previous = previous_run(base, root, job_id)
        _link(paths.submitted_pickle, base / f"{previous}_submitted.pkl")
    log.info(
        "job %s (chain %s), rank %d of %d on %s",
        job_id,
        root,
        rank,
        env.num_tasks,
        socket.gethostname(),
    )
    # An earlier run under this id (Slurm requeued it) may have left a result: it is stale.
    paths.result_pickle.unlink(missing_ok=True)
    delayed = _load_submission(paths.submitted_pickle)
    _prepare(delayed, paths.submitted_pickle, rank)
    try:
        result = delayed.result()
        write_pickle(paths.result_pickle, ("success", result))
    except Exception:
        write_pickle(paths.result_pickle, ("error", traceback.format_exc()))
        log.error("the job's function raised an exception", exc_info=True)
        raise
    log.info("finished; result stored in %s", paths.result_pickle)
    mark_done_when_complete(base, job_id, int(env.num_tasks), root)


def previous_run(folder: Path, root: str, job_id: str) -> str:
    """The run that submitted ``job_id`` as its continuation (the chain's root if unknown)."""
    for event in read_chain(folder / f"chain-{root}.tsv").events:
        match = _CONTINUED.search(event.detail)
        if event.event == "requeue" and match and match.group(1) == job_id:
            return event.job_id
    return root


def mark_done_when_complete(folder: Path, job_id: str, num_tasks: int, root: str) -> bool:
    """Write the chain's done marker once every task of this run has stored a result."""
    results = (
        utils.JobPaths(folder, job_id=job_id, task_id=t).result_pickle for t in range(num_tasks)
    )
    if not all(path.exists() for path in results):
        return False
    run_dir = Path(os.environ.get("HPCJOBS_RUN_DIR") or folder)
    marker = run_dir / f"DONE-{root}"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    return True


def redirect_output(stdout: Path, stderr: Path) -> None:
    """Send this process's stdout and stderr to files (appended: reruns keep older output)."""
    for stream, fd, path in ((sys.stdout, 1, stdout), (sys.stderr, 2, stderr)):
        stream.flush()
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


def write_pickle(path: Path, value: Any) -> None:
    """Pickle ``value`` to ``path`` atomically, readable by the owner only.

    A symlink at ``path`` is replaced, never written through: a continuation's pickle is a
    link to an earlier run's, which must keep its content.
    """
    tmp = path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))  # private from birth
    try:
        utils.cloudpickle_dump(value, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def _link(link: Path, target: Path) -> None:
    """Make ``link`` a relative symlink to ``target`` (atomically; kept if it exists)."""
    if link.is_symlink() or link.exists():
        return
    relative = os.path.relpath(target, link.parent)
    tmp = link.with_name(f".{link.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    os.symlink(relative, tmp)
    os.replace(tmp, link)


def _load_submission(path: Path) -> utils.DelayedSubmission:
    deadline = time.monotonic() + PICKLE_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {PICKLE_WAIT_S:g} s for {path}, which never appeared")
        time.sleep(0.5)
    delayed: utils.DelayedSubmission = utils.DelayedSubmission.load(path)
    return delayed


def _prepare(delayed: utils.DelayedSubmission, pickle_path: Path, rank: int) -> None:
    """Signals and state for the callable, before it runs."""
    function = delayed.function
    if isinstance(function, Resumable):
        function.prepare()
    elif hasattr(function, "__submitit_checkpoint__") or hasattr(function, "checkpoint"):
        install_checkpoint_handler(delayed, pickle_path, rank)


def install_checkpoint_handler(
    delayed: utils.DelayedSubmission, pickle_path: Path, rank: int
) -> Callable[[int, FrameType | None], None]:
    """submitit's ``checkpoint()`` protocol on the warning signal and SIGTERM.

    Global rank 0 calls the callable's checkpoint method and pickles the call it returns for
    the next run, then exits without a result; the batch script decides whether a next run
    comes. Other ranks ignore the signals and are stopped when rank 0 exits.
    """
    handling = False

    def handle(signum: int, _frame: FrameType | None) -> None:
        nonlocal handling
        name = signal.Signals(signum).name
        if rank != 0 or handling:
            log.info("%s received; rank 0 checkpoints", name)
            return
        handling = True
        log.warning("%s received: checkpointing", name)
        new = delayed._checkpoint_function()
        if new is None:
            log.warning("checkpoint() returned None: a next run starts from the submitted call")
        else:
            new.set_timeout(delayed._timeout_min, delayed._timeout_countdown)
            write_pickle(pickle_path, new)
        raise Interrupted(f"checkpointed on {name}")

    for sig in {signal_from_env(), signal.SIGTERM}:
        signal.signal(sig, handle)
    return handle


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s %(name)s[rank {rank}]: %(message)s",
    )


# ---- building the executor ---------------------------------------------------------------


def make_executor(
    site: str | os.PathLike[str] | SiteConfig | None = None,
    *,
    folder: str | os.PathLike[str] | None = None,
    python: str | Sequence[str] | None = None,
    client: SlurmClient | None = None,
    **parameters: Any,
) -> HpcExecutor:
    """Build an :class:`HpcExecutor` for ``site`` (see :func:`hpcjobs.executor`)."""
    config = site if isinstance(site, SiteConfig) else _load_site(site)
    if folder is None:
        folder = default_folder(config, parameters.get("partition"))
    executor = HpcExecutor(folder, site=config, python=python, client=client)
    if parameters:
        executor.update_parameters(**parameters)
    return executor


def default_folder(site: SiteConfig, partition: str | None = None) -> Path:
    """The site's output folder for jobs named ``submitit`` (``slurm.output_dir``)."""
    spec = JobSpec(name="submitit", partition=partition, command=["submitit"])
    return Path(str(resolve_spec(spec, site).output_dir))


def _load_site(value: str | os.PathLike[str] | None) -> SiteConfig:
    from hpcjobs.config.loader import load_site

    chosen = value if value is not None else os.environ.get(SITE_ENV) or None
    return load_site(Path(chosen) if isinstance(chosen, os.PathLike) else chosen)


# ---- small conversions -------------------------------------------------------------------


def _python_argv(python: str | Sequence[str] | None) -> list[str]:
    if python is None:
        argv = [str(Path(sys.executable).absolute())]
    elif isinstance(python, str):
        argv = shlex.split(python)
    else:
        argv = [str(item) for item in python]
    if not argv or not os.path.isabs(argv[0]):
        raise BadInputError(
            f"the executor's python must be an absolute path, not {python!r}",
            hint="for example python='/opt/venv/bin/python'; jobs do not search PATH for it",
        )
    return argv


def _requeue_fields(p: Mapping[str, Any]) -> dict[str, Any] | None:
    fields: dict[str, Any] = {}
    if p.get("signal") is not None:
        fields["signal"] = p["signal"]
    if p.get("signal_delay_s") is not None:
        fields["lead_time"] = p["signal_delay_s"]
    if p.get("requeue") is not None:
        fields["enabled"] = p["requeue"]
    budget = p.get("max_requeues")
    if isinstance(budget, Mapping):
        causes = {str(k).replace("-", "_"): v for k, v in budget.items()}
        total = causes.pop("total", None)
        fields["max_requeues"] = causes
        if total is not None:
            fields["max_total"] = total
    elif budget is not None:
        fields["max_total"] = budget
    return fields or None


def _sbatch_options(p: Mapping[str, Any]) -> list[str]:
    options: list[tuple[str, Any]] = [(k, p[k]) for k in _SBATCH_PARAMETERS if k in p]
    extra = p.get("additional_parameters") or {}
    if not isinstance(extra, Mapping):
        raise BadInputError(
            "additional_parameters must be a mapping of sbatch option names to values",
            hint="for example additional_parameters={'gres-flags': 'enforce-binding'}",
        )
    options += list(extra.items())
    result = []
    for key, value in options:
        name = str(key).replace("_", "-").lstrip("-")
        if value is None or value is False:
            continue
        # Named here, not later as "sbatch_options[N]", so the message says which parameter.
        where = f"additional_parameters[{key!r}]" if key in extra else str(key)
        require_safe(str(key), f"executor parameter name {where}")
        if value is not True:
            require_safe(str(value), f"executor parameter {where}")
        result.append(f"--{name}" if value is True else f"--{name}={value}")
    return result


def _array_spec(count: int, p: Mapping[str, Any]) -> str:
    try:
        parallel = check_int(p.get("array_parallelism") or 256, minimum=1, text_ok=True)
    except ValueError as exc:
        raise BadInputError(f"invalid executor parameter array_parallelism: {exc}") from None
    return f"0-{count - 1}%{max(1, min(count, parallel))}"


def _mem_from_gb(value: Any) -> str:
    hint = "give the memory per node in GB, for example mem_gb=64 or mem_gb=1.5"
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        if not 1 <= value * 1024 <= MAX_COUNT:
            raise BadInputError(f"invalid executor parameter mem_gb: {value!r}", hint=hint)
        return f"{int(value * 1024)}M"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return f"{check_int(value, minimum=1, maximum=MAX_COUNT // 1024)}G"
    except ValueError as exc:
        raise BadInputError(f"invalid executor parameter mem_gb: {exc}", hint=hint) from None


def _minutes(time_text: str | None) -> int:
    from hpcjobs.config.slurmtime import parse_slurm_time

    seconds = parse_slurm_time(time_text) if time_text else None
    return (seconds or 0) // 60


def _callable_name(function: object) -> str:
    name = getattr(function, "__name__", None) or type(function).__name__
    return str(name)


def main(argv: Iterable[str] | None = None) -> None:
    """``python -m hpcjobs.submitit_ext FOLDER``: run one rank of an executor job."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m hpcjobs.submitit_ext FOLDER\n")
        raise SystemExit(2)
    run_task(args[0])


__all__ = [
    "ALIASES",
    "PARAMETERS",
    "ChainWatcher",
    "HpcExecutor",
    "HpcJob",
    "UnknownParameterError",
    "make_executor",
    "newest_result",
    "run_task",
]


if __name__ == "__main__":
    # Run under the module's own name, so that pickles and isinstance checks see one module.
    from hpcjobs.submitit_ext import main as _main

    _main()
