"""Submitting a run: the one use case behind ``hpcjobs submit`` and the Python executor.

1. claim the run's checkpoint folder (:mod:`hpcjobs.jobs.checkpointclaim`): a folder of another run
   stops the submission, unless ``reuse`` says what to do with it;
2. write the script and the record, and submit (:func:`hpcjobs.jobs.submission.submit_rendered`);
3. add the job ids to the folder's RUN file, so that a later submission can tell whether the
   run that claimed it may still start.

So a job submitted from Python has what one submitted from the shell has: a claimed folder,
a record, an entry in the job index; ``history`` and ``report`` know it the same way.
Following the job and printing stay with the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast

from hpcjobs.contract.slurmstates import is_terminal
from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.checkpointclaim import Prepared, Reuse, note_submitted, prepare_run_folder
from hpcjobs.jobs.records import FileStore, LocalFiles
from hpcjobs.jobs.submission import RenderedJobLike, SubmitResult, submit_rendered
from hpcjobs.runner import Runner
from hpcjobs.slurm.client import SlurmClient


class _RunSpec(Protocol):
    """What the use case reads of a job spec (the renderer's ``JobSpec`` fits)."""

    checkpoint_dir: object
    name: str | None


@dataclass(frozen=True)
class Submitted:
    """What :func:`submit_run` did: the submission, and the checkpoint folder's decision."""

    result: SubmitResult
    folder: Prepared


def claim_folder(
    rendered: RenderedJobLike,
    *,
    client: SlurmClient | None,
    runner: Runner,
    files: FileStore | None = None,
    reuse: Reuse | None = None,
    dry_run: bool = False,
) -> Prepared:
    """Check the checkpoint folder of ``rendered`` against its run and claim it (unless
    ``dry_run``). A folder another run claimed and never checkpointed into is taken over
    when none of that run's jobs may still start (one Slurm query; ``client`` None: made on
    ``runner`` then, so that a dry run that never asks builds, or imports, none)."""

    def queued(job_ids: list[str]) -> bool | None:
        from hpcjobs.slurm.backend import make_client
        from hpcjobs.slurm.statusquery import query_status

        try:
            report = query_status(client or make_client(runner), job_ids)
        except HpcJobsError:
            return None
        return any(not is_terminal(job.state) for job in report.jobs)

    spec = cast("_RunSpec", rendered.spec)
    return prepare_run_folder(
        runner,
        files or LocalFiles(),
        str(spec.checkpoint_dir),
        rendered.identity,
        reuse=reuse,
        dry_run=dry_run,
        job_name=spec.name,
        queued=queued,
    )


def submit_run(
    rendered: RenderedJobLike,
    *,
    client: SlurmClient,
    runner: Runner,
    files: FileStore | None = None,
    host: str | None = None,
    after: list[str] | None = None,
    reuse: Reuse | None = None,
    max_array_size: int | None = None,
    on_note: Callable[[str], None] | None = None,
) -> Submitted:
    """Claim the checkpoint folder, submit ``rendered``, note the job ids in the folder.

    Args:
        rendered: the rendered job.
        client: the Slurm client to submit through.
        runner: runs the folder's commands where the job is submitted (locally, or over SSH).
        files: writes files there (default: this machine); a remote submission passes its SSH
            runner, which writes over SFTP.
        host: the login node of a remote submission.
        after: dependencies (see :func:`submit_rendered`).
        reuse: what to do with a folder of another run: ``fresh`` or ``resume``.
        max_array_size: the cluster's ``MaxArraySize`` (asked from Slurm when needed).
        on_note: gets the folder's decision when it is worth a line to the user.

    Raises:
        BadInputError: the folder belongs to another run, or bad input (exit 2).
        SlurmError: Slurm refused the job or could not be reached (exit 3).
    """
    folder = claim_folder(rendered, client=client, runner=runner, files=files, reuse=reuse)
    note = folder.note()
    if note and on_note is not None:
        on_note(note)
    result = submit_rendered(
        rendered,
        client=client,
        max_array_size=max_array_size,
        after=after or None,
        files=files,
        host=host,
    )
    note_submitted(files or LocalFiles(), folder, result.job_ids)
    return Submitted(result, folder)
