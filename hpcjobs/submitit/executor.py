"""The executor: a submitit ``SlurmExecutor`` whose jobs are rendered from hpcjobs' templates."""

from __future__ import annotations

import os
import shlex
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpcjobs.config import SITE_ENV
from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.records import make_private_dir
from hpcjobs.jobs.submit import submit_run
from hpcjobs.logger import logger
from hpcjobs.runner import LocalRunner
from hpcjobs.script.jobspec import JobSpec, parse_spec, resolve_spec
from hpcjobs.script.render import RenderedJob, render_job
from hpcjobs.slurm.arrays import parse_array, split_array
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.submitit.compat import core, utils
from hpcjobs.submitit.compat import slurm as submitit_slurm
from hpcjobs.submitit.hpcjob import HpcJob
from hpcjobs.submitit.params import (
    ALIASES,
    PARAMETERS,
    UnknownParameterError,
    array_spec,
    callable_name,
    mem_from_gb,
    minutes,
    python_argv,
    requeue_fields,
    sbatch_options,
)
from hpcjobs.submitit.pickles import link_pickle, write_pickle
from hpcjobs.submitit.task import TASK_MODULE

log = logger(__name__)


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
        self.python_argv = python_argv(python)
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
                value = mem_from_gb(value)
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
            "requeue": requeue_fields(p),
            "output_dir": str(self.folder),
            "sbatch_options": sbatch_options(p) or None,
            "nccl_debug": p.get("nccl_debug"),
            "bind": p.get("bind"),
        }
        try:
            return parse_spec(
                {k: v for k, v in data.items() if v is not None}, source="executor parameters"
            )
        except BadInputError as exc:
            exc.hint = "see hpcjobs.submitit.params.PARAMETERS (docs/python-api.md) for the syntax"
            raise

    def _checkpoint_root(self, parameters: Mapping[str, Any]) -> Path:
        """The folder holding one checkpoint folder per submission."""
        base = parameters.get("checkpoint_dir")
        return Path(str(base)).expanduser().absolute() if base else self.folder / "checkpoints"

    def render(
        self, *, count: int = 1, name: str = "submitit", uid: str = "preview"
    ) -> RenderedJob:
        """The job a submission would get (``count`` > 1: an array), rendered, not submitted."""
        array = array_spec(count, self.parameters) if count > 1 else None
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
            count=count, name=callable_name(delayed_submissions[0].function), uid=uid
        )
        try:
            job_ids = self._submit_rendered(rendered, count)
        except BaseException:
            for path in pickles:
                path.unlink(missing_ok=True)
            raise
        tasks = list(range(self._num_tasks()))
        checkpoints = Path(str(rendered.spec.checkpoint_dir))  # parent: private (_submit_rendered)
        jobs: list[core.Job[Any]] = []
        for index, (job_id, pickled) in enumerate(zip(job_ids, pickles, strict=True)):
            job: HpcJob[Any] = HpcJob(folder=self.folder, job_id=job_id, tasks=tasks)
            job.paths.move_temporary_file(pickled, "submitted_pickle")
            own = checkpoints / f"task-{index}" if count > 1 else checkpoints
            job.set_checkpoint_dir(own)
            link_pickle(checkpoints.parent / job_id, own)  # checkpoints/<job id>, for people
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
        # The folder of every submission's checkpoint folder: private before a claim makes it.
        make_private_dir(Path(str(rendered.spec.checkpoint_dir)).parent)
        self._throttle()
        # The use case of 'hpcjobs submit': the checkpoint folder claimed, the record written,
        # the job ids noted in the folder (history and report know the job the same way). The
        # folder is on this machine, as the pickles are, whatever runs Slurm's commands.
        result = submit_run(
            rendered, client=self.client, runner=LocalRunner(), max_array_size=limit
        ).result
        self._last_job_submitted = time.time()
        for job_id in result.job_ids:
            link_pickle(self.folder / f"{job_id}_submission.sh", result.script_path)
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
        delayed.set_timeout(minutes(self._resolved.time), 0)
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
    chosen = value if value is not None else os.environ.get(SITE_ENV) or None
    return load_site(Path(chosen) if isinstance(chosen, os.PathLike) else chosen)
