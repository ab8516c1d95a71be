"""``hpcjobs logs``: print or follow a job's output, across requeues."""

from __future__ import annotations

import getpass
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcjobs.cli.common import slurm_access
from hpcjobs.cli.options import Count, host_option
from hpcjobs.errors import EXIT_SLURM, BadInputError, SlurmError
from hpcjobs.jobs.chain import load_chain
from hpcjobs.jobs.follow import Follower, PollSchedule, read_run, tail_file
from hpcjobs.jobs.records import expand_output_pattern, find_record, read_record
from hpcjobs.jobs.submission import take_option
from hpcjobs.slurm.classify import AccountingDisabledError, UnknownJobError
from hpcjobs.slurm.client import check_job_ids
from hpcjobs.slurm.parse import log_path as slurm_log_path
from hpcjobs.slurm.statusquery import query_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from hpcjobs.runner import Runner
    from hpcjobs.slurm.client import SlurmClient


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("job_id", metavar="JOBID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends.")
@click.option("--stderr", "use_stderr", is_flag=True, help="Show the error log, not the output.")
@click.option("--task", type=Count(0), help="Array task to show.")
@click.option(
    "--restart",
    type=Count(0),
    help="Show only run N (0 = first run): the part after the script's "
    "'hpcjobs: run N of job ...' line.",
)
@host_option
@click.pass_context
def logs(
    ctx: click.Context,
    job_id: str,
    follow: bool,
    use_stderr: bool,
    task: int | None,
    restart: int | None,
    host: str | None,
) -> None:
    """Print the output log of JOBID; with -f, follow it until the job ends.

    Following survives requeues: the same file is reopened by every run (and started over if
    the job does not append). The job's state is checked with one Slurm query per interval.
    Exits 3 if Slurm does not know the job.

    Jobs hpcjobs continues after a preemption or timeout keep writing to the first job's log,
    and -f keeps following until the whole chain has ended. With --host the log is read on
    the login node.
    """
    (wanted,) = check_job_ids([job_id if task is None else f"{job_id.split('_')[0]}_{task}"])
    runner, client = slurm_access(ctx, host)
    if host is not None:
        _remote_logs(ctx, runner, client, wanted, follow=follow, stderr=use_stderr, host=host)
        return
    if follow:
        try:
            _wait_until_started(client, wanted)
        except KeyboardInterrupt:
            ctx.exit(130)
    path = log_path(client, wanted, stderr=use_stderr)
    start = 0
    if restart is not None:
        text = _read(path)
        part = read_run(text, restart)
        if part is None:
            raise BadInputError(
                f"{path} has no run {restart}",
                hint="runs are found by the line 'hpcjobs: run N of job ID' that the job "
                "script prints when it starts; see 'hpcjobs history' for the runs",
            )
        if not follow:
            click.echo(part, nl=False)
            return
        start = len(text[: text.index(part)].encode("utf-8"))
    if not follow:
        if not path.exists():
            click.echo(f"No log yet: {path}", err=True)
            return
        click.echo(_read(path), nl=False)
        return
    click.echo(f"==> {path} <==", err=True)
    try:
        tail_file(
            path,
            alive=_alive_check(client, wanted, runner),
            on_data=lambda data: click.echo(data, nl=False),
            start=start,
        )
    except KeyboardInterrupt:
        ctx.exit(130)


def log_path(client: SlurmClient, job_id: str, *, stderr: bool = False) -> Path:
    """Where the job writes its output (or error) log.

    The controller knows it while it holds the job; after that, the submission record does.

    Raises:
        UnknownJobError: neither Slurm nor a record knows the job (exit 3).
        BadInputError: an array id without a task.
    """
    info = client.show_job(job_id)
    if info is not None:
        if "_" not in job_id and info.get("ArrayTaskId") not in (None, ""):
            raise BadInputError(
                f"job {job_id} is an array", hint="choose a task with --task N (or JOBID_N)"
            )
        value = slurm_log_path(info, stderr=stderr)
        if value:
            return Path(value)
    record = find_record(job_id)
    if record is not None:
        return _path_from_record(record, job_id, stderr=stderr)
    _raise_not_found(client, job_id)
    raise AssertionError("unreachable")


def _path_from_record(record_path: Path, job_id: str, *, stderr: bool) -> Path:
    record = read_record(record_path)
    args = [str(a) for a in record.get("sbatch_args", [])]
    output, _ = take_option(args, "--output", "-o")
    error, _ = take_option(args, "--error", "-e")
    name, _ = take_option(args, "--job-name", "-J")
    workdir, _ = take_option(args, "--chdir", "-D")
    base, _, task = job_id.partition("_")
    default = "slurm-%A_%a.out" if task else "slurm-%j.out"
    pattern = (error or output or default) if stderr else (output or default)
    filled = expand_output_pattern(
        pattern,
        job_id=job_id if not task else base,
        array_job_id=base,
        task=task or None,
        name=name or "",
        user=getpass.getuser(),
    )
    folder = Path(workdir or str(record.get("workdir") or os.getcwd()))
    return folder / filled


def _raise_not_found(client: SlurmClient, job_id: str) -> None:
    try:
        known = bool(client.accounting([job_id], duplicates=False))
    except AccountingDisabledError:
        known = False
    if known:
        raise SlurmError(
            f"job {job_id} has ended and Slurm no longer says where its log is",
            hint="it was not submitted with hpcjobs from this account, so there is no record "
            "of its output path; look in the folder it was submitted from",
        )
    raise UnknownJobError([job_id])


def _wait_until_started(client: SlurmClient, job_id: str) -> None:
    """Wait while the job is pending: Slurm names its log (``%a``, node) only once it runs."""
    delays = PollSchedule().delays()
    info = client.show_job(job_id)
    told = False
    while info is not None and info.get("JobState") == "PENDING":
        if not told:
            reason = info.get("Reason", "")
            why = "" if reason in ("", "None", "(null)") else f" ({reason})"
            click.echo(f"==> job {job_id} is pending{why}; waiting for it to start", err=True)
            told = True
        time.sleep(next(delays))
        info = client.show_job(job_id)


def _alive_check(
    client: SlurmClient, job_id: str, runner: Runner | None = None, host: str | None = None
) -> Callable[[], bool]:
    """A function telling whether to keep following: the job, or a continuation of it, runs."""
    followed = {"job": job_id, "follower": Follower()}

    def alive() -> bool:
        follower: Follower = followed["follower"]  # type: ignore[assignment]
        if runner is not None and follower.done():
            # The job ended: a continuation of its chain may carry on in the same log.
            ref = load_chain(job_id, runner, host=host)
            if ref is None or ref.chain.final is not None or ref.current == followed["job"]:
                return False
            followed["job"] = ref.current
            followed["follower"] = follower = Follower()
            click.echo(f"\n==> job {job_id} continues as job {ref.current}", err=True)
        report = query_status(client, [str(followed["job"])])
        for event in follower.update(report.jobs):
            if event.requeued:
                click.echo(
                    f"\n==> job {event.job_id} requeued (restart {event.restarts})", err=True
                )
        if report.unknown:
            return False
        if not follower.done():
            return True
        if runner is None:
            return False
        ref = load_chain(job_id, runner, host=host)  # a continuation to follow next?
        return ref is not None and ref.chain.final is None and ref.current != followed["job"]

    return alive


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise BadInputError(f"cannot read {path}: {exc.strerror}") from exc


__all__ = ["EXIT_SLURM", "log_path", "logs"]


def _remote_logs(
    ctx: click.Context,
    runner: Runner,
    client: SlurmClient,
    job_id: str,
    *,
    follow: bool,
    stderr: bool,
    host: str | None = None,
) -> None:
    """Print (and with ``follow``, tail) a log that lives on the login node."""
    info = client.show_job(job_id)
    path = slurm_log_path(info or {}, stderr=stderr)
    if not path:
        raise SlurmError(
            f"Slurm does not say where job {job_id}'s log is",
            hint="the controller forgets finished jobs after a few minutes; read the log "
            "in the job's output dir on the login node",
        )
    offset = 0
    alive = _alive_check(client, job_id, runner, host) if follow else None
    try:
        while True:
            chunk = runner.run(["tail", "-c", f"+{offset + 1}", path], check=False, timeout=60)
            if chunk.stdout:
                click.echo(chunk.stdout, nl=False)
                offset += len(chunk.stdout.encode("utf-8"))
            if alive is None or not alive():
                return
            time.sleep(2.0)
    except KeyboardInterrupt:
        ctx.exit(130)
