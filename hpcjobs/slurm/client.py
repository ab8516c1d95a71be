"""``SlurmClient``: every call hpcjobs makes to Slurm, through one :class:`~hpcjobs.runner.Runner`.

Each method is one Slurm command under the shared retry policy (:mod:`hpcjobs.slurm.retry`),
and queries are batched: one ``squeue`` or ``sacct`` for any number of jobs.

Submission never creates a duplicate. Every ``sbatch`` carries a unique token in its
``--comment``. After an ambiguous failure (socket timeout, lost reply, our own timeout) the job
may exist already, so before trying again the client looks for a job with that token and
adopts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from hpcjobs.backoff import Backoff
from hpcjobs.errors import BadInputError, CommandError, CommandNotFoundError, SlurmError
from hpcjobs.logger import logger
from hpcjobs.runner import Result, Runner
from hpcjobs.slurm import clusterinfo, parse, retry, usage
from hpcjobs.slurm.classify import (
    AccountingDisabledError,
    ErrorKind,
    SlurmCommandError,
    classify_error,
    slurm_message,
)
from hpcjobs.slurm.retry import SLURM_RETRY
from hpcjobs.slurm.sbatchline import (
    DEFAULT_MAX_ARRAY_SIZE,
    comment_for,
    comment_has_token,
    sbatch_argv,
)
from hpcjobs.textlines import split_lines

log = logger(__name__)

T = TypeVar("T")

#: sbatch retries a busy controller by itself for up to ~2 minutes: leave it that time.
SUBMIT_TIMEOUT_S = 150.0
QUERY_TIMEOUT_S = 60.0

#: Pins the output format the parsers expect (a user's SLURM_TIME_FORMAT would change dates).
CLIENT_ENV = {"SLURM_TIME_FORMAT": "standard"}

_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")


class QueueSource(Protocol):
    """Where live-job information comes from: ``squeue`` or pyslurm."""

    name: str

    def queue(self, job_ids: Sequence[str] | None, *, mine: bool) -> list[parse.QueueRow]:
        """Jobs the controller knows: the given ids, or the caller's own jobs."""
        ...


@dataclass(frozen=True)
class CancelOutcome:
    """What ``scancel`` did, per job id."""

    signalled: tuple[str, ...]
    unknown: tuple[str, ...]
    finished: tuple[str, ...]


def check_job_ids(job_ids: Sequence[str]) -> list[str]:
    """Job ids as Slurm wants them (``123`` or ``123_4``).

    Raises:
        BadInputError: an id is malformed.
    """
    clean = []
    for job_id in job_ids:
        value = str(job_id).strip()
        if not _JOB_ID.fullmatch(value):
            raise BadInputError(
                f"not a job id: {job_id!r}", hint="job ids look like 1234 or 1234_5 (array task)"
            )
        clean.append(value)
    return clean


@dataclass
class SlurmClient:
    """Slurm's client commands, with retries, parsing and batching.

    Args:
        runner: runs each command (locally, or over SSH).
        policy: the retry policy for transient failures.
        queue_source: where live-job queries go; default ``squeue`` through ``runner``.
    """

    runner: Runner
    policy: Backoff = SLURM_RETRY
    queue_source: QueueSource | None = None
    query_timeout_s: float = QUERY_TIMEOUT_S
    submit_timeout_s: float = SUBMIT_TIMEOUT_S
    _version: str | None = field(default=None, init=False, repr=False)
    _config: dict[str, str] | None = field(default=None, init=False, repr=False)

    # ---- running commands ---------------------------------------------------------------

    def _run_once(self, argv: Sequence[str], *, timeout: float | None = None) -> Result:
        """One attempt; a non-zero exit raises :class:`CommandError` with stdout and stderr."""
        result = self.runner.run(
            list(argv), timeout=timeout or self.query_timeout_s, check=False, env=CLIENT_ENV
        )
        if result.returncode != 0:
            raise CommandError(argv, result.returncode, result.stderr, stdout=result.stdout)
        return result

    def _call(self, label: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` under the retry policy; a final failure becomes a clear Slurm error."""
        try:
            return retry.call(self.policy, fn, label=label)
        except CommandError as exc:
            raise self._final_error(label, exc) from exc

    def run(self, argv: Sequence[str], *, timeout: float | None = None) -> Result:
        """Run one Slurm command with retries and return its result.

        Raises:
            SlurmCommandError: the command failed for good (its ``kind`` says why).
            AccountingDisabledError: sacct on a cluster without accounting.
        """
        return self._call(argv[0], lambda: self._run_once(argv, timeout=timeout))

    def probe(self, argv: Sequence[str], *, timeout: float | None = None) -> Result:
        """Run one Slurm command once, for a question whose failure is itself the answer
        ("is slurmctld up yet?", "is accounting on?"): no retries, nothing raised.

        A missing program or a timeout comes back as a failed :class:`Result` (exit 127 or -9)
        with the reason in ``stderr``.
        """
        try:
            return self._run_once(argv, timeout=timeout)
        except CommandError as exc:
            return Result(tuple(argv), exc.returncode, exc.stdout, exc.stderr)

    def _final_error(self, label: str, exc: CommandError) -> SlurmError:
        kind = classify_error(exc)
        message = slurm_message(exc.stderr) or exc.message
        if kind is ErrorKind.ACCOUNTING_DISABLED:
            return AccountingDisabledError(
                f"{label}: {message}",
                hint="this cluster keeps no job accounting; finished jobs cannot be looked up",
            )
        hint = None
        if isinstance(exc, CommandNotFoundError):
            message = exc.message
            hint = "Slurm's client commands must be installed and on PATH (or use --site)"
        elif kind.retryable:
            hint = (
                f"Slurm did not answer after retrying for up to {self.policy.total_s:g} s; "
                "check 'scontrol ping' and try again later"
            )
        return SlurmCommandError(
            f"{label}: {message}", kind=kind, argv=exc.argv, stderr=exc.stderr, hint=hint
        )

    # ---- cluster facts --------------------------------------------------------------------

    def version(self) -> str:
        """The Slurm version (``sbatch --version``, a local call); ``"unknown"`` if it fails."""
        if self._version is None:
            try:
                result = self._run_once(["sbatch", "--version"], timeout=self.query_timeout_s)
                self._version = parse.parse_version(result.stdout + result.stderr)
            except (CommandError, ValueError) as exc:
                log.info("cannot tell the Slurm version: %s", exc)
                self._version = "unknown"
        return self._version

    def config(self) -> dict[str, str]:
        """``scontrol show config`` as a dict (one call, cached)."""
        if self._config is None:
            result = self.run(["scontrol", "show", "config"])
            self._config = parse.parse_config(result.stdout)
        return self._config

    def cluster(self, *, timeout: float | None = None) -> clusterinfo.ClusterView:
        """The cluster's settings, nodes (with GRES and partitions) and partitions: ``sinfo``,
        ``scontrol show node`` and ``show partition``, and :meth:`config`."""
        sinfo = ["sinfo", "--noheader", "--Node", "--all", f"--format={clusterinfo.SINFO_FORMAT}"]
        nodes = clusterinfo.parse_sinfo_nodes(self.run(sinfo, timeout=timeout).stdout)
        node_text = self.run(["scontrol", "--oneliner", "show", "node"], timeout=timeout).stdout
        clusterinfo.merge_scontrol_nodes(nodes, parse.parse_scontrol_records(node_text))
        part_argv = ["scontrol", "--all", "--oneliner", "show", "partition"]
        part_text = self.run(part_argv, timeout=timeout).stdout
        return clusterinfo.ClusterView(
            facts=clusterinfo.parse_cluster_facts(self.config()),
            nodes=nodes,
            partitions=clusterinfo.parse_partitions(parse.parse_scontrol_records(part_text)),
        )

    def run_on_node(
        self,
        node: str,
        command: Sequence[str],
        *,
        partition: str | None = None,
        job_name: str = "hpcjobs",
        timeout: float | None = None,
    ) -> str:
        """Run ``command`` as one task on ``node`` (``srun``, 5 minutes at most); its output."""
        argv = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--time=5"]
        argv += [f"--job-name={job_name}", "--quiet"]
        if partition:
            argv.append(f"--partition={partition}")
        return self.run([*argv, *command], timeout=timeout).stdout

    def reach(self, *, timeout: float | None = None) -> str:
        """``sinfo --version`` as the runner's host answers it (not cached, unlike
        :meth:`version`): the check that Slurm's commands work there.

        Raises:
            SlurmCommandError: they do not.
        """
        return self.run(["sinfo", "--version"], timeout=timeout).stdout.strip()

    def max_array_size(self) -> int:
        """The cluster's ``MaxArraySize``: array indices must stay below it."""
        value = self.config().get("MaxArraySize", "")
        return int(value) if value.isdigit() else DEFAULT_MAX_ARRAY_SIZE

    # ---- submission -----------------------------------------------------------------------

    def submit(
        self,
        script: Path,
        sbatch_args: Sequence[str],
        *,
        token: str,
        comment: str | None = None,
    ) -> str:
        """Submit ``script`` with ``sbatch_args``, exactly once, and return the job id.

        The job's ``--comment`` is ``hpcjobs:<token>``, followed by ``comment`` if given.

        Transient failures are retried. After an ambiguous failure the queue is searched for
        the token before every new attempt, and a job found there is adopted.

        Raises:
            SlurmCommandError: Slurm refused the job (permanent, at once) or could not be
                reached within the retry budget.
        """
        argv = sbatch_argv(script, sbatch_args, token=token, comment=comment)
        ambiguous = False

        def attempt() -> str:
            nonlocal ambiguous
            if ambiguous:
                # The last try may have created the job: adopt it rather than submit again.
                # A failing lookup raises, and the policy retries the whole attempt.
                found = self._lookup_token(token)
                if found:
                    log.warning("sbatch reported a failure, but job %s was created", found)
                    return found
            try:
                result = self._run_once(argv, timeout=self.submit_timeout_s)
            except CommandError as exc:
                if classify_error(exc) is ErrorKind.AMBIGUOUS:
                    ambiguous = True
                raise
            return parse.parse_sbatch_parsable(result.stdout)

        try:
            return retry.call(self.policy, attempt, label="sbatch")
        except CommandError as exc:
            final = self._final_error("sbatch", exc)
            if not ambiguous:
                raise final from exc
            try:
                found = self._lookup_token(token)
            except CommandError:
                found = None
            if found:
                log.warning("sbatch reported a failure, but job %s was created", found)
                return found
            final.hint = (
                "the last attempt may still have created the job; look for it with "
                f"'hpcjobs status --mine' (its comment is {comment_for(token)})"
            )
            raise final from exc

    def _lookup_token(self, token: str) -> str | None:
        """A job submitted with ``token``, or None. One attempt: failures raise CommandError."""
        argv = ["squeue", "--me", "-h", "-t", "all", "-O", parse.squeue_format(parse.TOKEN_FIELDS)]
        ids = _ids_with_token(parse.parse_token_rows(self._run_once(argv).stdout), token)
        if len(ids) > 1:
            log.warning("token %s matches several jobs: %s", token, ", ".join(ids))
        return ids[0] if ids else None

    def find_by_token(self, token: str) -> list[str]:
        """The ids of the caller's jobs whose comment carries ``token`` (one ``squeue``)."""
        argv = ["squeue", "--me", "-h", "-t", "all", "-O", parse.squeue_format(parse.TOKEN_FIELDS)]
        return _ids_with_token(parse.parse_token_rows(self.run(argv).stdout), token)

    # ---- queries --------------------------------------------------------------------------

    def queue(
        self, job_ids: Sequence[str] | None = None, *, mine: bool = False
    ) -> list[parse.QueueRow]:
        """Jobs the controller knows, in any state: ``job_ids``, or the caller's own jobs.

        One query however many ids. Ids the controller does not know are simply absent.
        """
        if job_ids is not None and not job_ids:
            return []
        if job_ids:
            job_ids = check_job_ids(job_ids)
        if self.queue_source is not None:
            try:
                return self.queue_source.queue(job_ids, mine=mine)
            except Exception as exc:  # any failure of the optional backend: use squeue
                log.warning(
                    "%s query failed (%s); using squeue from now on", self.queue_source.name, exc
                )
                self.queue_source = None
        return self.squeue(job_ids, mine=mine)

    def squeue(
        self, job_ids: Sequence[str] | None = None, *, mine: bool = False
    ) -> list[parse.QueueRow]:
        """:meth:`queue` through ``squeue`` (one call)."""
        argv = ["squeue", "-h", "-t", "all", "-O", parse.squeue_format(parse.SQUEUE_FIELDS)]
        if job_ids:
            argv += ["-j", ",".join(check_job_ids(job_ids))]
        if mine or not job_ids:
            argv.append("--me")
        try:
            result = self.run(argv)
        except SlurmCommandError as exc:
            # squeue -j with a single id the controller forgot fails instead of printing nothing.
            if exc.kind is ErrorKind.UNKNOWN_JOB:
                return []
            raise
        return parse.parse_squeue(result.stdout)

    def accounting(self, job_ids: Sequence[str], *, duplicates: bool = True) -> list[parse.AcctRow]:
        """Accounting records of ``job_ids`` (one ``sacct``); with ``duplicates`` every run.

        Raises:
            AccountingDisabledError: the cluster keeps no accounting.
        """
        if not job_ids:
            return []
        argv = ["sacct", "-X", "-P", "-n"]
        if duplicates:
            argv.append("-D")
        argv += ["-j", ",".join(check_job_ids(job_ids)), "-o", ",".join(parse.SACCT_FIELDS)]
        return parse.parse_sacct(self.run(argv).stdout)

    def usage(
        self,
        job_ids: Sequence[str] | None = None,
        *,
        user: str | None = None,
        since: str | None = None,
        until: str | None = None,
        account: str | None = None,
    ) -> list[usage.RunUsage]:
        """What every run of ``job_ids`` (or of the window) used, with its steps: one ``sacct``.

        Without ``job_ids``: ``user``'s jobs (all users' with only ``account``) that ran between
        ``since`` (default a week ago) and ``until``.

        Raises:
            AccountingDisabledError: the cluster keeps no accounting.
        """
        if job_ids is not None and not job_ids:
            return []
        ids = check_job_ids(job_ids) if job_ids else None
        argv = usage.sacct_argv(ids, user=user, since=since, until=until, account=account)
        return usage.parse_usage(self.run(argv).stdout)

    def show_job(self, job_id: str) -> dict[str, str] | None:
        """``scontrol show job -o`` for one job or array task; None if the controller forgot it."""
        (clean,) = check_job_ids([job_id])
        try:
            result = self.run(["scontrol", "show", "job", "-o", clean])
        except SlurmCommandError as exc:
            if exc.kind is ErrorKind.UNKNOWN_JOB:
                return None
            raise
        return parse.parse_job_record(result.stdout) or None

    # ---- control --------------------------------------------------------------------------

    def cancel(self, job_ids: Sequence[str], *, signal: str | None = None) -> CancelOutcome:
        """Cancel (or, with ``signal``, signal) jobs with one ``scancel``.

        Jobs the controller does not know come back in ``unknown``, jobs that already ended in
        ``finished``; neither raises. Only transient failures are retried, because a repeated
        signal is delivered twice.
        """
        clean = check_job_ids(job_ids)
        argv = ["scancel", "-v"]
        if signal:
            argv.append(f"--signal={signal}")
        argv += clean

        def attempt() -> Result:
            result = self.runner.run(
                argv, timeout=self.query_timeout_s, check=False, env=CLIENT_ENV
            )
            per_job = _scancel_job_errors(result.stderr)
            if result.returncode != 0 and not per_job:
                exc = CommandError(argv, result.returncode, result.stderr, stdout=result.stdout)
                if classify_error(exc) is ErrorKind.AMBIGUOUS:
                    # Not safe to repeat: report it as it is.
                    raise self._final_error("scancel", exc)
                raise exc
            return result

        result = self._call("scancel", attempt)
        errors = _scancel_job_errors(result.stderr)
        unknown = tuple(j for j in clean if errors.get(j) == _UNKNOWN)
        finished = tuple(j for j in clean if errors.get(j) == _FINISHED)
        failed = {j: e for j, e in errors.items() if e not in (_UNKNOWN, _FINISHED)}
        if failed:
            detail = "; ".join(f"{j}: {e}" for j, e in failed.items())
            raise SlurmCommandError(
                f"scancel: {detail}", kind=ErrorKind.PERMANENT, argv=argv, stderr=result.stderr
            )
        signalled = tuple(j for j in clean if j not in unknown and j not in finished)
        return CancelOutcome(signalled=signalled, unknown=unknown, finished=finished)


def _ids_with_token(rows: list[parse.TokenRow], token: str) -> list[str]:
    ids: list[str] = []
    for row in rows:
        if comment_has_token(row.comment, token) and row.job_id not in ids:
            ids.append(row.job_id)
    return ids


_UNKNOWN = "unknown job"
_FINISHED = "already finished"
_SCANCEL_ERROR = re.compile(r"error on job id (\S+?):\s*(.+)$", re.IGNORECASE)


def _scancel_job_errors(stderr: str) -> dict[str, str]:
    """Per-job errors in ``scancel -v`` stderr: unknown id, already finished, or a message."""
    errors: dict[str, str] = {}
    for line in split_lines(stderr):
        match = _SCANCEL_ERROR.search(line.strip())
        if not match:
            continue
        job_id, message = match.group(1), match.group(2).strip()
        lowered = message.lower()
        if "invalid job id" in lowered:
            errors[job_id] = _UNKNOWN
        elif "already complet" in lowered or "already done" in lowered:
            errors[job_id] = _FINISHED
        else:
            errors[job_id] = message
    return errors
