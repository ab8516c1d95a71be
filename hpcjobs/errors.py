"""The one exception hierarchy of hpcjobs, and the exit code of each kind of error.

Library code raises these; only the CLI turns them into a message and an exit status.
Exit codes: 0 ok, 1 job failed, 2 bad input (a local setup that cannot be made, such as packages
apt-get could not install, counts here: it is not a Slurm error), 3 Slurm error, 4 SSH/transport
error.

A command that fails is a :class:`CommandError` (exit 2: the machine is not set up as hpcjobs
needs). It becomes a Slurm error only where it was a Slurm command: every one goes through
:class:`~hpcjobs.slurm.client.SlurmClient`, which turns its failures into
:class:`~hpcjobs.slurm.classify.SlurmCommandError` (exit 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from hpcjobs.textlines import split_lines

EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_SLURM = 3
EXIT_TRANSPORT = 4


class HpcJobsError(Exception):
    """An error hpcjobs raises on purpose. The CLI prints it without a traceback.

    Only its subclasses are raised (``tests/unit/test_cli.py`` checks the sources): each says
    its exit code. A subclass of another library's that forgets to is bad input, not a
    failed job."""

    exit_code: ClassVar[int] = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadInputError(HpcJobsError):
    """Bad user input: usage, job spec, or any other value the user passed."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(BadInputError):
    """A site or user config cannot be found, read, parsed or validated."""


class TemplateError(BadInputError):
    """A job template is missing, malformed or refers to an undefined value."""


class SandboxError(HpcJobsError):
    """The local sandbox cluster cannot be set up, started or stopped."""

    exit_code = EXIT_SLURM


class HostSetupError(HpcJobsError):
    """Preparing this machine failed: apt-get, debootstrap, a virtualenv. Not a Slurm error."""

    exit_code = EXIT_BAD_INPUT


class SlurmError(HpcJobsError):
    """Slurm refused a request or could not be reached."""

    exit_code = EXIT_SLURM


class CommandError(HpcJobsError):
    """An external command exited non-zero. Carries argv, exit code and stderr.

    Not a :class:`SlurmError`: ``SlurmClient`` wraps the failures of Slurm's commands.
    """

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self,
        argv: Sequence[str],
        returncode: int,
        stderr: str,
        *,
        stdout: str = "",
        hint: str | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        detail = _last_lines(stderr) or _last_lines(stdout) or "(no output)"
        super().__init__(f"{self.argv[0]} failed with exit code {returncode}: {detail}", hint=hint)


class CommandNotFoundError(CommandError):
    """The program to run is not installed or not on PATH."""

    def __init__(self, argv: Sequence[str], *, hint: str | None = None) -> None:
        super().__init__(argv, 127, f"{argv[0]}: command not found", hint=hint)
        self.message = f"{argv[0]!r} was not found on PATH"
        self.args = (self.message,)


class CommandTimeoutError(CommandError):
    """The command did not finish within its timeout and was killed."""

    def __init__(self, argv: Sequence[str], timeout: float, *, hint: str | None = None) -> None:
        super().__init__(argv, -9, f"timed out after {timeout:g} s", hint=hint)
        self.timeout = timeout


class TransportError(HpcJobsError):
    """The SSH connection to a login node failed."""

    exit_code = EXIT_TRANSPORT


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in split_lines(text.strip()) if line.strip()]
    return " | ".join(lines[-count:])
