"""The one seam through which hpcjobs runs external commands.

Every Slurm command goes through a :class:`Runner`: argv lists only (never a shell string),
a timeout on every call, and failures that carry argv, exit code and stderr. The local runner
drops ``SBATCH_*``/``SALLOC_*``/``SRUN_*`` from the child environment, because those variables
silently override the options hpcjobs passes. An SSH runner implements the same protocol.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hpcjobs.errors import CommandError, CommandNotFoundError, CommandTimeoutError
from hpcjobs.logger import logger

log = logger(__name__)

#: Environment prefixes that would change what sbatch/salloc/srun do behind our back.
SCRUBBED_PREFIXES = ("SBATCH_", "SALLOC_", "SRUN_")

DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class Result:
    """What a finished command returned."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(Protocol):
    """Runs one command and returns its :class:`Result`."""

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        """Run ``argv``. With ``check``, a non-zero exit raises :class:`CommandError`."""
        ...


def child_environment(
    base: Mapping[str, str], overlay: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a child: ``base`` without scrubbed prefixes, plus ``overlay``."""
    env = {k: v for k, v in base.items() if not k.startswith(SCRUBBED_PREFIXES)}
    if overlay:
        env.update(overlay)
    return env


@dataclass
class LocalRunner:
    """Runs commands on this machine with :func:`subprocess.run` (no shell)."""

    env: Mapping[str, str] = field(default_factory=dict)
    default_timeout: float = DEFAULT_TIMEOUT

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        argv = checked_argv(argv)
        limit = self.default_timeout if timeout is None else timeout
        child_env = child_environment(os.environ, {**self.env, **(env or {})})
        log.debug("run: %s", shlex.join(argv))
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise CommandNotFoundError(argv) from exc
        try:
            raw_out, raw_err = proc.communicate(
                None if stdin is None else stdin.encode("utf-8"), timeout=limit
            )
        except subprocess.TimeoutExpired as exc:
            _kill_group(proc)
            raise CommandTimeoutError(argv, limit) from exc
        except BaseException:
            _kill_group(proc)
            raise
        # Bytes, decoded here: text mode would turn a "\r" inside a value (a job name) into a
        # line break, and would fail on output that is not in the locale's encoding.
        out = raw_out.decode("utf-8", errors="replace")
        err = raw_err.decode("utf-8", errors="replace")
        result = Result(tuple(argv), proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise CommandError(argv, proc.returncode, err, stdout=out)
        return result


def checked_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list of strings, refusing a single string, an empty list and NUL bytes.

    Every runner (local or SSH) checks its argv with this.

    Raises:
        TypeError: ``argv`` is a string.
        ValueError: ``argv`` is empty or an element holds a NUL byte.
    """
    if isinstance(argv, str):
        raise TypeError("argv must be a sequence of strings, not one string")
    items = [str(a) for a in argv]
    if not items:
        raise ValueError("argv must not be empty")
    for item in items:
        if "\0" in item:
            raise ValueError(f"argv element contains a NUL byte: {item!r}")
    return items


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole process group, then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
