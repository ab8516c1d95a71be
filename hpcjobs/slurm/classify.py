"""Sort Slurm client failures into what may be retried and what may not.

Slurm's commands exit 1 for almost every error, so the class comes from the stderr text (the
messages of ``slurm_errno.c``, which are the same in 22.05 and 24.11):

* **transient**: the controller could not be reached or asked us to come back later. The
  request was not applied, so repeating it is safe.
* **ambiguous**: the request may have been applied before the reply was lost (socket timeout,
  receive failure, zero bytes). Repeating a query is safe; repeating ``sbatch`` is not until
  we have looked for the job it may have created.
* **permanent**: Slurm understood and refused (bad partition, account, QOS, limits, script).
* **unknown job**: the job id is not (or no longer) known to the controller.
* **accounting disabled**: ``sacct`` cannot work on this cluster.

Anything unrecognised is permanent: failing fast is cheaper than hammering a controller.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence

from hpcjobs.errors import CommandError, CommandNotFoundError, CommandTimeoutError, SlurmError
from hpcjobs.textlines import split_lines


class ErrorKind(enum.Enum):
    """How a failed Slurm command may be handled."""

    TRANSIENT = "transient"
    AMBIGUOUS = "ambiguous"
    PERMANENT = "permanent"
    UNKNOWN_JOB = "unknown job"
    ACCOUNTING_DISABLED = "accounting disabled"

    @property
    def retryable(self) -> bool:
        return self in (ErrorKind.TRANSIENT, ErrorKind.AMBIGUOUS)


# Order matters: the first match wins.
_PATTERNS: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        (ErrorKind.ACCOUNTING_DISABLED, r"accounting storage is disabled"),
        (ErrorKind.UNKNOWN_JOB, r"invalid job id specified"),
        # Ambiguous: the controller may have acted before the reply was lost.
        (ErrorKind.AMBIGUOUS, r"socket timed out on send/recv"),
        (ErrorKind.AMBIGUOUS, r"zero bytes were transmitted or received"),
        (ErrorKind.AMBIGUOUS, r"\((?:receive|shutdown) failure\)"),
        (ErrorKind.AMBIGUOUS, r"connection reset by peer"),
        # Transient: nothing was applied, or Slurm asks to come back later.
        (ErrorKind.TRANSIENT, r"\((?:connect|send) failure\)"),
        (ErrorKind.TRANSIENT, r"unable to contact slurm controller"),
        (ErrorKind.TRANSIENT, r"unable to establish controller machine"),
        (ErrorKind.TRANSIENT, r"temporarily unable to accept job"),
        (ErrorKind.TRANSIENT, r"resource temporarily unavailable"),
        (ErrorKind.TRANSIENT, r"job queue (?:is )?full|maxjobcount limit"),
        (ErrorKind.TRANSIENT, r"requested nodes are busy|nodes? (?:are )?busy"),
        (ErrorKind.TRANSIENT, r"job creation temporarily disabled"),
        (ErrorKind.TRANSIENT, r"rpc rate limited|rate limit exceeded"),
        (ErrorKind.TRANSIENT, r"backup controller in standby"),
        (ErrorKind.TRANSIENT, r"slurmctld (?:is )?not responding"),
        (ErrorKind.TRANSIENT, r"connection refused"),
        (ErrorKind.TRANSIENT, r"problem talking to the database"),
        (ErrorKind.TRANSIENT, r"slurmdbd.*(?:not responding|unavailable)"),
        (ErrorKind.TRANSIENT, r"communication connection failure"),
    )
)


def classify_text(stderr: str) -> ErrorKind:
    """The :class:`ErrorKind` for a Slurm command's stderr."""
    for kind, pattern in _PATTERNS:
        if pattern.search(stderr):
            return kind
    return ErrorKind.PERMANENT


def classify_error(exc: CommandError) -> ErrorKind:
    """The :class:`ErrorKind` of a failed command.

    Our own timeout means Slurm did not answer in time: the request may have been applied.
    A missing program is permanent.
    """
    if isinstance(exc, CommandNotFoundError):
        return ErrorKind.PERMANENT
    if isinstance(exc, CommandTimeoutError):
        return ErrorKind.AMBIGUOUS
    return classify_text(f"{exc.stderr}\n{exc.stdout}")


def slurm_message(stderr: str) -> str:
    """Slurm's own words from stderr: its last error line, without the program prefix.

    ``"sbatch: error: Batch job submission failed: Invalid partition name specified"``
    becomes ``"Batch job submission failed: Invalid partition name specified"``.
    """
    lines = [ln.strip() for ln in split_lines(stderr.strip()) if ln.strip()]
    errors = [ln for ln in lines if re.search(r"\b(?:error|fatal)\b", ln, re.IGNORECASE)]
    line = (errors or lines or [""])[-1]
    return re.sub(r"^[\w.-]+: (?:error|fatal): ", "", line)


#: Slurm's client found no slurm.conf: no SLURM_CONF, no /etc/slurm/slurm.conf, no DNS SRV record.
_NO_CONFIG = re.compile(r"could not establish a configuration source", re.IGNORECASE)
#: SLURM_CONF (or the default path) names a file that cannot be read.
_BAD_CONFIG = re.compile(
    r"cannot stat file (\S+?):|unable to process configuration file", re.IGNORECASE
)


#: What a shell runs to use the local sandbox (:meth:`hpcjobs.sandbox.layout.Layout.shell_env`).
#: Defined here, the lowest layer that names it in a hint (config and sandbox import it).
SANDBOX_ENV_COMMAND = 'eval "$(hpcjobs sandbox env)"'


def config_hint(stderr: str) -> str | None:
    """A hint for a Slurm client that cannot find or read the cluster's config, else None."""
    if _NO_CONFIG.search(stderr):
        return (
            "Slurm cannot find the cluster config: SLURM_CONF is not set and there is no "
            "/etc/slurm/slurm.conf (nor a configless DNS record). On a cluster, run hpcjobs on "
            f"a login node (or use --host); for the local sandbox, run '{SANDBOX_ENV_COMMAND}' "
            "in this shell first"
        )
    bad = _BAD_CONFIG.search(stderr)
    if bad:
        where = f" {bad.group(1)}" if bad.group(1) else ""
        return (
            f"Slurm cannot read its config file{where}: check SLURM_CONF; for the local "
            "sandbox, check that it is up ('hpcjobs sandbox status') and run "
            f"'{SANDBOX_ENV_COMMAND}' again"
        )
    return None


class SlurmCommandError(SlurmError):
    """A Slurm command failed for good. Carries Slurm's own message and the error class.

    Without an explicit ``hint``, one comes from :func:`config_hint` when Slurm could not find
    or read its config.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        argv: Sequence[str] = (),
        stderr: str = "",
        attempts: int = 1,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint if hint is not None else config_hint(stderr))
        self.kind = kind
        self.argv = tuple(argv)
        self.stderr = stderr
        self.attempts = attempts


class UnknownJobError(SlurmError):
    """Slurm knows none of (some of) the job ids asked about."""

    def __init__(self, job_ids: Sequence[str], *, hint: str | None = None) -> None:
        ids = ", ".join(job_ids)
        noun = "job" if len(job_ids) == 1 else "jobs"
        super().__init__(
            f"unknown {noun} {ids}: neither the queue nor accounting knows {ids}",
            hint=hint
            or "check the id with 'hpcjobs status --mine'; finished jobs stay in 'squeue' "
            "only for a few minutes and need accounting (sacct) after that",
        )
        self.job_ids = tuple(job_ids)


class AccountingDisabledError(SlurmError):
    """``sacct`` does not work here: the cluster has no accounting storage."""
