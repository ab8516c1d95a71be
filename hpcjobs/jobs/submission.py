"""Submit a rendered job to Slurm exactly once, and keep a record of it.

:func:`submit_rendered` takes anything shaped like the renderer's output (see
:class:`RenderedJobLike`), writes the script and a record into a new 0700 folder in the job's
output dir (:mod:`hpcjobs.jobs.records`), and submits it through a :class:`SlurmClient`: transient
failures are retried, permanent ones fail at once with Slurm's message, and a unique token in
the job's comment makes sure an ambiguous failure never leaves a duplicate job behind.

**Large arrays.** Slurm refuses array indices at or above the cluster's ``MaxArraySize``
(``scontrol show config``). A larger ``--array`` is split into chunks, one sbatch call and one
job id per chunk, each chunk rebased to start at 0. Each chunk's script exports, right after
its ``#SBATCH`` header::

    HPCJOBS_ARRAY_OFFSET      # first global index of this chunk
    HPCJOBS_ARRAY_TASK_ID     # SLURM_ARRAY_TASK_ID + HPCJOBS_ARRAY_OFFSET

so a job that reads ``$HPCJOBS_ARRAY_TASK_ID`` (or adds ``${HPCJOBS_ARRAY_OFFSET:-0}`` to
``$SLURM_ARRAY_TASK_ID``) sees the task numbers the user asked for, split or not. Arrays that
fit are submitted unchanged and have neither variable. A ``%N`` throttle is shared between the
chunks so that at most N tasks run at once in total. A render loads this module, and most jobs
are no array: :mod:`hpcjobs.slurm.arrays` is imported only for one that is.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from hpcjobs import __version__
from hpcjobs.errors import BadInputError, HpcJobsError, SlurmError
from hpcjobs.jobs.records import FileStore, LocalFiles, record_text, remember
from hpcjobs.jobs.supervisorapp import write_supervisor
from hpcjobs.logger import logger
from hpcjobs.safetext import require_safe
from hpcjobs.slurm.sbatchline import DEFAULT_MAX_ARRAY_SIZE, sbatch_argv

if TYPE_CHECKING:
    from hpcjobs.slurm.arrays import ArrayChunk
    from hpcjobs.slurm.client import SlurmClient

OFFSET_VAR = "HPCJOBS_ARRAY_OFFSET"
TASK_VAR = "HPCJOBS_ARRAY_TASK_ID"
DEPENDENCY_TYPES = ("afterok", "afterany", "afternotok")

#: One ``--after`` item (a string: compiled on first use, for a job that has one).
_AFTER = r"([0-9]+(?:_[0-9]+)?)(?::(afterok|afterany|afternotok))?"


class ArrayLimitSource(Protocol):
    """Who can tell the cluster's ``MaxArraySize`` (a :class:`SlurmClient` can)."""

    def max_array_size(self) -> int:
        """The largest array index plus one the cluster accepts."""
        ...


class RenderedJobLike(Protocol):
    """What submission needs from a rendered job (the renderer's ``RenderedJob`` fits)."""

    @property
    def script(self) -> str: ...

    @property
    def sbatch_args(self) -> Sequence[str]: ...

    @property
    def spec(self) -> object: ...

    @property
    def site_name(self) -> str: ...

    @property
    def output_dir(self) -> Path: ...

    @property
    def supervisor(self) -> Path | None: ...

    @property
    def identity(self) -> Mapping[str, Any]: ...


class SubmitResult(NamedTuple):
    """What a submission produced."""

    job_ids: list[str]
    script_path: Path
    record_path: Path
    token: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_ids[0] if self.job_ids else None,
            "job_ids": self.job_ids,
            "script": str(self.script_path),
            "record": str(self.record_path),
            "token": self.token,
        }


class SubmissionPlan(NamedTuple):
    """Everything one submission will send, decided before anything is written or sent.

    ``submit --dry-run`` prints it; :func:`submit_rendered` carries it out. Building it runs
    every check a submission runs: the ``--array``, ``--dependency`` and ``--after`` syntax, the
    comment, and the split of an array that does not fit ``MaxArraySize``.
    """

    base_args: list[str]
    array: str | None
    comment: str | None = None
    chunks: Sequence[ArrayChunk] = ()
    max_array_size: int | None = None

    @property
    def split(self) -> bool:
        """Whether the array goes out as rebased chunks, one script and one job id each."""
        return bool(self.chunks) and not (len(self.chunks) == 1 and self.chunks[0].offset == 0)

    def script_names(self) -> list[str]:
        """The script file of each sbatch call, in order."""
        if not self.split:
            return ["job.sh"]
        return [f"job.chunk{i}.sh" for i in range(len(self.chunks))]

    def calls(self, folder: Path, token: str) -> list[tuple[list[str], Path, str]]:
        """``(sbatch options, script, token)`` per sbatch call."""
        scripts = [folder / name for name in self.script_names()]
        if not self.chunks:
            return [(self.base_args, scripts[0], token)]
        if not self.split:
            return [([*self.base_args, f"--array={self.array}"], scripts[0], token)]
        return [
            ([*self.base_args, f"--array={chunk.spec.render()}"], script, f"{token}.{i}")
            for i, (chunk, script) in enumerate(zip(self.chunks, scripts, strict=True))
        ]

    def argvs(self, folder: Path, token: str) -> list[list[str]]:
        """The exact command line of each sbatch call (see :func:`sbatch_argv`)."""
        return [
            sbatch_argv(script, args, token=call_token, comment=self.comment)
            for args, script, call_token in self.calls(folder, token)
        ]


def plan_submission(
    rendered: RenderedJobLike,
    *,
    client: ArrayLimitSource | None,
    max_array_size: int | None = None,
    after: Sequence[str] | None = None,
) -> SubmissionPlan:
    """Check what ``rendered`` would send and decide the sbatch calls; write and send nothing.

    Args:
        rendered: the rendered job.
        client: asked for the cluster's ``MaxArraySize`` when an array needs it and
            ``max_array_size`` is not given; None uses Slurm's default.
        max_array_size: the cluster's ``MaxArraySize``, if known.
        after: dependencies, each ``JOBID[:afterok|afterany|afternotok]``.

    Raises:
        BadInputError: a malformed array, dependency or comment (exit 2).
        SlurmError: Slurm could not tell its ``MaxArraySize`` (exit 3).
    """
    args = list(rendered.sbatch_args)
    array, args = take_option(args, "--array", "-a")
    dependency, args = take_option(args, "--dependency", "-d")
    comment, args = take_option(args, "--comment", None)
    if comment is not None:
        require_safe(comment, "the job comment (--comment)")
    if array is None:
        spec_array = getattr(rendered.spec, "array", None)
        array = str(spec_array) if spec_array else None
    dependency = _merge_dependency(dependency, after or [])
    if dependency:
        args.append(f"--dependency={dependency}")
    if array is None:
        return SubmissionPlan(args, None, comment)
    from hpcjobs.slurm.arrays import parse_array, split_array

    spec = parse_array(array)
    limit = max_array_size
    if limit is None:
        limit = client.max_array_size() if client is not None else DEFAULT_MAX_ARRAY_SIZE
    return SubmissionPlan(args, array, comment, split_array(spec, limit), limit)


def submit_rendered(
    rendered: RenderedJobLike,
    *,
    client: SlurmClient,
    max_array_size: int | None = None,
    after: list[str] | None = None,
    index_dir: Path | None = None,
    files: FileStore | None = None,
    host: str | None = None,
) -> SubmitResult:
    """Write the script and record of ``rendered``, then submit it (split if needed).

    Args:
        rendered: the rendered job: script, sbatch options, spec, site name, output dir.
        client: the Slurm client to submit through.
        max_array_size: the cluster's ``MaxArraySize``; asked from Slurm when an array needs it.
        after: dependencies, each ``JOBID[:afterok|afterany|afternotok]`` (default afterok).
        index_dir: where the job-id index lives (default ``$XDG_STATE_HOME/hpcjobs/jobs``).
        files: where the script and record are written (default: this machine); a remote
            submission passes its SSH runner, which writes over SFTP.
        host: the login node of a remote submission, noted in the local job index.

    Returns:
        The job ids (one per array chunk), the script and record paths, and the token.

    Raises:
        BadInputError: a malformed array, dependency or comment (exit 2).
        SlurmError: Slurm refused the job or could not be reached (exit 3).
    """
    plan = plan_submission(rendered, client=client, max_array_size=max_array_size, after=after)
    store = files or LocalFiles()

    token = secrets.token_hex(16)
    created = datetime.now(timezone.utc)
    folder = _submission_dir(store, Path(rendered.output_dir), created, token)
    script_path = folder / "job.sh"
    store.write_text(str(script_path), rendered.script)
    if rendered.supervisor is not None:
        write_supervisor(rendered.supervisor, store)  # the script runs it from there
    scripts = _chunk_scripts(store, folder, rendered.script, plan)
    record_path = folder / "record.json"
    record = _initial_record(rendered, plan, client, token, created, host, script_path, scripts)
    store.write_text(str(record_path), record_text(record))

    job_ids: list[str] = []
    try:
        _send_calls(client, plan, folder, token, job_ids)
    except HpcJobsError as exc:
        _record_failure(exc, record, job_ids, store, record_path, rendered, index_dir, host)
        raise
    record.update(
        state="submitted", job_ids=job_ids, submitted=datetime.now(timezone.utc).isoformat()
    )
    store.write_text(str(record_path), record_text(record))
    remember(
        job_ids, record_path, index_dir=index_dir, output_dir=str(rendered.output_dir), host=host
    )
    return SubmitResult(
        job_ids=job_ids, script_path=script_path, record_path=record_path, token=token
    )


def _initial_record(
    rendered: RenderedJobLike,
    plan: SubmissionPlan,
    client: SlurmClient,
    token: str,
    created: datetime,
    host: str | None,
    script_path: Path,
    scripts: list[Path],
) -> dict[str, Any]:
    """The submission record as written before the first sbatch call (state ``submitting``)."""
    args = plan.base_args
    return {
        "token": token,
        "state": "submitting",
        "created": created.isoformat(),
        "hpcjobs_version": __version__,
        "slurm_version": client.version(),
        "site": rendered.site_name,
        "spec": _jsonable(rendered.spec),
        "output_dir": str(rendered.output_dir),
        "workdir": take_option(args, "--chdir", "-D")[0] or (None if host else os.getcwd()),
        "host": host,
        "script": script_path.name,
        "sbatch_args": args,
        "comment": plan.comment,
        "array": _array_record(plan, scripts),
        "job_ids": [],
    }


def _send_calls(
    client: SlurmClient, plan: SubmissionPlan, folder: Path, token: str, job_ids: list[str]
) -> None:
    """Make the plan's sbatch calls in order, appending each job id to ``job_ids``."""
    for index, (chunk_args, script, chunk_token) in enumerate(plan.calls(folder, token)):
        job_ids.append(client.submit(script, chunk_args, token=chunk_token, comment=plan.comment))
        logger(__name__).info("submitted chunk %d as job %s", index, job_ids[-1])


def _record_failure(
    exc: HpcJobsError,
    record: dict[str, Any],
    job_ids: list[str],
    store: FileStore,
    record_path: Path,
    rendered: RenderedJobLike,
    index_dir: Path | None,
    host: str | None,
) -> None:
    """Note a failed sbatch call in the record, and index and name the chunks already sent."""
    record.update(state="partial" if job_ids else "failed", job_ids=job_ids, error=exc.message)
    store.write_text(str(record_path), record_text(record))
    if job_ids:
        remember(
            job_ids,
            record_path,
            index_dir=index_dir,
            output_dir=str(rendered.output_dir),
            host=host,
        )
        exc.hint = (
            f"jobs {', '.join(job_ids)} of this array were submitted before the failure; "
            f"cancel them with 'hpcjobs cancel {' '.join(job_ids)}' or keep them"
        )


def parse_after(items: Sequence[str]) -> list[tuple[str, str]]:
    """``[(type, job_id)]`` from ``JOBID[:afterok|afterany|afternotok]`` items.

    Raises:
        BadInputError: an item is malformed.
    """
    parsed = []
    for item in items:
        match = re.fullmatch(_AFTER, item.strip())
        if not match:
            raise BadInputError(
                f"bad dependency {item!r}",
                hint="use JOBID or JOBID:afterok, JOBID:afterany, JOBID:afternotok",
            )
        parsed.append((match.group(2) or "afterok", match.group(1)))
    return parsed


def _merge_dependency(existing: str | None, after: Sequence[str]) -> str | None:
    """One ``--dependency`` value: the rendered one and ``after``, all required (``,``)."""
    by_type: dict[str, list[str]] = {}
    for kind, job_id in parse_after(after):
        by_type.setdefault(kind, []).append(job_id)
    parts = [existing] if existing else []
    parts += [":".join([kind, *ids]) for kind, ids in by_type.items()]
    return ",".join(parts) or None


def _chunk_scripts(store: FileStore, folder: Path, script: str, plan: SubmissionPlan) -> list[Path]:
    """The script each sbatch call submits: ``job.sh``, or one per rebased chunk."""
    paths = [folder / name for name in plan.script_names()]
    if plan.split:
        for path, chunk in zip(paths, plan.chunks, strict=True):
            store.write_text(str(path), with_offset(script, chunk.offset))
    return paths


def with_offset(script: str, offset: int) -> str:
    """``script`` with the array offset exported right after its ``#SBATCH`` header.

    sbatch reads directives only up to the first command, so the header (shebang, comments,
    blank lines) stays first and intact.
    """
    # Lines end at "\n" only: bash does not break lines at U+2028, "\r" and friends, so
    # neither may this (str.splitlines would, and could move text out of a comment).
    lines = [line + "\n" for line in script.split("\n")]
    lines[-1] = lines[-1][:-1]
    cut = 0
    while cut < len(lines) and (not lines[cut].strip() or lines[cut].lstrip().startswith("#")):
        cut += 1
    block = (
        f"# Added by hpcjobs: this array was split to fit MaxArraySize; task numbers are global.\n"
        f"export {OFFSET_VAR}={offset}\n"
        f'export {TASK_VAR}="$((SLURM_ARRAY_TASK_ID + {OFFSET_VAR}))"\n'
    )
    if cut and not lines[cut - 1].endswith("\n"):
        lines[cut - 1] += "\n"
    return "".join([*lines[:cut], block, *lines[cut:]])


def _array_record(plan: SubmissionPlan, scripts: list[Path]) -> dict[str, Any] | None:
    if plan.array is None:
        return None
    return {
        "spec": plan.array,
        "max_array_size": plan.max_array_size,
        "chunks": [
            {"offset": chunk.offset, "array": chunk.spec.render(), "script": script.name}
            for chunk, script in zip(plan.chunks, scripts, strict=True)
        ],
    }


def _submission_dir(store: FileStore, output_dir: Path, created: datetime, token: str) -> Path:
    store.makedirs(str(output_dir))
    stamp = created.strftime("%Y%m%dT%H%M%SZ")
    folder = output_dir / f"submit-{stamp}-{token[:8]}"
    store.makedirs(str(folder))
    return folder


def take_option(args: list[str], long: str, short: str | None) -> tuple[str | None, list[str]]:
    """Remove an option from sbatch args; return its (last) value and the other args."""
    value: str | None = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == long or (short and arg == short):
            if i + 1 >= len(args):
                raise BadInputError(f"sbatch option {arg} has no value")
            value = args[i + 1]
            i += 2
            continue
        if arg.startswith(long + "="):
            value = arg[len(long) + 1 :]
        elif short and arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
            value = arg[len(short) :]
        else:
            rest.append(arg)
        i += 1
    return value, rest


def _jsonable(spec: object) -> Any:
    """The job spec as JSON-ready data (pydantic model, dataclass, mapping or object)."""
    dump = getattr(spec, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if is_dataclass(spec) and not isinstance(spec, type):
        return asdict(spec)
    if isinstance(spec, dict):
        return spec
    return str(spec)


__all__ = [
    "OFFSET_VAR",
    "TASK_VAR",
    "RenderedJobLike",
    "SlurmError",
    "SubmissionPlan",
    "SubmitResult",
    "parse_after",
    "plan_submission",
    "submit_rendered",
    "take_option",
    "with_offset",
]
