"""The Debian packages the sandbox needs, and installing them when we may."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable

from hpcjobs.errors import CommandError, HostSetupError, SandboxError
from hpcjobs.runner import LocalRunner, Runner

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server")

#: A program each package provides, to tell whether it is installed.
PROGRAMS = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurm-client": "sinfo",
    "slurmdbd": "slurmdbd",
    "munge": "munged",
    "mariadb-server": "mariadb-install-db",
}

SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def which(program: str) -> str | None:
    """Like :func:`shutil.which`, but also looks in the sbin folders a user's PATH may lack."""
    found = shutil.which(program)
    if found:
        return found
    for folder in SBIN_DIRS:
        candidate = os.path.join(folder, program)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def missing_packages() -> list[str]:
    return [pkg for pkg, prog in PROGRAMS.items() if which(prog) is None]


def apt_command(packages: list[str]) -> list[str]:
    return ["apt-get", "install", "-y", "--no-install-recommends", *packages]


def ensure_installed(
    *, runner: Runner | None = None, progress: Callable[[str], None] | None = None
) -> None:
    """Install missing packages with apt when running as root; otherwise explain how."""
    missing = missing_packages()
    if not missing:
        return
    command = apt_command(missing)
    if os.geteuid() != 0 or which("apt-get") is None:
        raise SandboxError(
            f"the sandbox needs these Debian packages: {', '.join(missing)}",
            hint=f"install them with: sudo {shlex.join(command)}",
        )
    run = runner or LocalRunner()
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    if progress:
        progress(f"installing {', '.join(missing)} with apt-get (one time)")
    for argv, timeout in ((["apt-get", "update", "-q"], 600), (command, 1800)):
        # A failing apt-get is a problem of this machine, not of Slurm (exit code 5, not 3).
        try:
            run.run(argv, timeout=timeout, env=env)
        except CommandError as exc:
            raise HostSetupError(f"{argv[0]} {argv[1]} failed: {exc.message}") from exc
    still = missing_packages()
    if still:
        raise HostSetupError(f"apt-get did not provide: {', '.join(still)}")
