"""Start the sandbox's daemons one by one: munged, MariaDB, slurmdbd, slurmctld and slurmd.

Each start is idempotent (a daemon already running is left alone), checks its port is free,
and waits until the daemon answers. On a foreign Debian release the daemons run inside its
root; every path is the same inside and outside.
"""

from __future__ import annotations

import contextlib
import errno
import secrets
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hpcjobs.atomicfile import PRIVATE_DIR
from hpcjobs.errors import CommandError, SandboxError
from hpcjobs.sandbox import packages, procs
from hpcjobs.sandbox.layout import Layout, Settings
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.textlines import split_lines

if TYPE_CHECKING:
    from hpcjobs.runner import Runner
    from hpcjobs.sandbox.root import DebianRoot

Progress = Callable[[str], None]


def database_password(layout: Layout) -> str:
    """The accounting database's password: the one slurmdbd.conf has, else a new one."""
    try:
        for line in split_lines(layout.slurmdbd_conf.read_text()):
            if line.startswith("StoragePass="):
                return line.split("=", 1)[1]
    except FileNotFoundError:
        pass
    return secrets.token_urlsafe(24)


class DaemonStarter:
    """Starts the daemons of one sandbox (its layout, and its Debian root if it has one)."""

    def __init__(
        self, layout: Layout, root: DebianRoot | None, runner: Runner, slurm: SlurmClient
    ) -> None:
        self.layout = layout
        self.root = root
        self.runner = runner
        self.slurm = slurm

    @property
    def marker_dir(self) -> Path:
        """What the daemons carry in their ownership marker: the cluster's own files."""
        return self.layout.root

    def _program(self, name: str) -> str:
        """Where program ``name`` is, on the host or (as seen from inside) in the root."""
        if self.root is None:
            return _host_program(name)
        for folder in (*packages.SBIN_DIRS, "/usr/bin", "/bin"):
            path = f"{folder}/{name}"
            if self.root.has_program(path):
                return path
        raise SandboxError(
            f"{name!r} is not installed in the root {self.root.path}",
            hint="run 'hpcjobs sandbox down --purge' and 'up' again to rebuild it",
        )

    def _daemon(self, argv: list[str]) -> list[str]:
        """A daemon's argv, run inside the root when there is one."""
        return self.root.argv(argv) if self.root else argv

    def _env(self) -> dict[str, str]:
        return procs.marker_env(self.marker_dir, self.layout.client_env())

    def _ok(self, argv: list[str]) -> bool:
        try:
            return self.runner.run(argv, check=False, timeout=15).ok
        except CommandError:
            return False

    def start_munge(self, progress: Progress) -> None:
        """Start munged, unless it runs, and wait until it issues credentials."""
        lay = self.layout
        if procs.running_pid(lay.pid_file("munged"), self.marker_dir):
            return
        progress("starting munged")
        with contextlib.suppress(FileNotFoundError):
            lay.munge_socket.unlink()
        procs.start_daemon(
            self._daemon(
                [
                    self._program("munged"),
                    f"--socket={lay.munge_socket}",
                    f"--key-file={lay.munge_key}",
                    f"--log-file={lay.log_file('munged')}",
                    f"--pid-file={lay.pid_file('munged')}",
                    f"--seed-file={lay.munge_dir / 'munged.seed'}",
                ]
            ),
            self._env(),
            lay.log_file("munged-start"),
        )
        wait_until(
            "munged",
            lambda: self._ok(["munge", "-n", "-S", str(lay.munge_socket)]),
            30,
            lay.log_file("munged"),
        )

    def start_mariadb(self, settings: Settings, progress: Progress) -> None:
        """Start MariaDB (initialising it on first use) and grant slurmdbd its database."""
        lay = self.layout
        if not procs.running_pid(lay.pid_file("mariadbd"), self.marker_dir):
            ensure_port_free("MariaDB", settings.mysql_port)
            if not (lay.mysql_dir / "mysql").is_dir():
                self._install_mariadb(progress)
            progress("starting MariaDB")
            procs.start_foreground(
                self._daemon(
                    [
                        self._program("mariadbd"),
                        "--no-defaults",
                        f"--datadir={lay.mysql_dir}",
                        "--user=root",
                        "--bind-address=127.0.0.1",
                        f"--port={settings.mysql_port}",
                        f"--socket={lay.mysql_socket}",
                        f"--pid-file={lay.pid_file('mariadbd')}",
                        f"--log-error={lay.log_file('mariadbd')}",
                        "--skip-log-bin",
                        "--skip-ssl",
                        "--innodb-buffer-pool-size=64M",
                        "--innodb-lock-wait-timeout=900",
                    ]
                ),
                self._env(),
                lay.log_file("mariadbd-start"),
            )
        wait_until(
            "MariaDB",
            lambda: self._ok(self._mysql(["-e", "SELECT 1"])),
            60,
            lay.log_file("mariadbd"),
        )
        self._grant_slurm_user()

    def _install_mariadb(self, progress: Progress) -> None:
        """Create MariaDB's data folder and system tables."""
        lay = self.layout
        progress("initialising the accounting database")
        lay.mysql_dir.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        result = self.runner.run(
            [
                self._program("mariadb-install-db"),
                "--no-defaults",
                f"--datadir={lay.mysql_dir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            timeout=300,
            check=False,
        )
        if not result.ok:
            lay.log_file("mariadb-install").write_text(result.stdout + result.stderr)
            raise SandboxError(
                "initialising MariaDB failed",
                hint=f"see {lay.log_file('mariadb-install')}",
            )

    def _grant_slurm_user(self) -> None:
        """Create (or update) the database user slurmdbd logs in as, with its password."""
        password = database_password(self.layout)
        statements = []
        for host in ("127.0.0.1", "localhost"):
            statements += [
                f"CREATE USER IF NOT EXISTS 'slurm'@'{host}' IDENTIFIED BY '{password}'",
                f"ALTER USER 'slurm'@'{host}' IDENTIFIED BY '{password}'",
                f"GRANT ALL ON slurm_acct_db.* TO 'slurm'@'{host}'",
            ]
        # The password goes on stdin, never on a command line that `ps` would show.
        self.runner.run(self._mysql([]), stdin=";\n".join(statements) + ";\n", timeout=60)

    def _mysql(self, args: list[str]) -> list[str]:
        return [
            self._program("mariadb"),
            "--no-defaults",
            "--skip-ssl",
            f"--socket={self.layout.mysql_socket}",
            "-u",
            "root",
            *args,
        ]

    def start_slurmdbd(self, settings: Settings, progress: Progress) -> None:
        """Start slurmdbd, unless it runs, and wait until its port accepts connections."""
        lay = self.layout
        if procs.running_pid(lay.pid_file("slurmdbd"), self.marker_dir):
            return
        ensure_port_free("slurmdbd", settings.dbd_port)
        progress("starting slurmdbd")
        procs.start_daemon(
            self._daemon([self._program("slurmdbd")]), self._env(), lay.log_file("slurmdbd-start")
        )
        wait_until("slurmdbd", lambda: port_open(settings.dbd_port), 60, lay.log_file("slurmdbd"))

    def start_slurmctld(self, settings: Settings, progress: Progress) -> None:
        """Start slurmctld, unless it runs, and wait until ``scontrol ping`` finds it up."""
        lay = self.layout
        if not procs.running_pid(lay.pid_file("slurmctld"), self.marker_dir):
            ensure_port_free("slurmctld", settings.ctld_port)
            progress("starting slurmctld")
            procs.start_daemon(
                self._daemon([self._program("slurmctld"), "-f", str(lay.slurm_conf)]),
                self._env(),
                lay.log_file("slurmctld-start"),
            )
        wait_until(
            "slurmctld",
            lambda: "is UP" in self.slurm.probe(["scontrol", "ping"], timeout=15).stdout,
            60,
            lay.log_file("slurmctld"),
        )

    def start_slurmds(self, settings: Settings, progress: Progress) -> None:
        """Start one slurmd per node that has none running."""
        lay = self.layout
        few = settings.nodes <= 9
        if not few:
            progress(f"starting slurmd {settings.hostlist}")
        for i, node in enumerate(settings.node_names, start=1):
            if procs.running_pid(lay.pid_file(f"slurmd-{node}"), self.marker_dir):
                continue
            ensure_port_free(f"slurmd {node}", settings.node_port(i))
            if few:
                progress(f"starting slurmd {node}")
            # An absolute -f matters: jobs inherit SLURM_CONF from slurmd.
            procs.start_daemon(
                self._daemon([self._program("slurmd"), "-f", str(lay.slurm_conf), "-N", node]),
                self._env(),
                lay.log_file(f"slurmd-{node}-start"),
            )


def _host_program(name: str) -> str:
    """Where program ``name`` is installed on this host."""
    path = packages.which(name)
    if path is None:
        raise SandboxError(f"{name!r} is not installed", hint="run 'hpcjobs sandbox up' as root")
    return path


def port_open(port: int) -> bool:
    """Whether something accepts connections on ``port`` of 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def ensure_port_free(component: str, port: int) -> None:
    """Raise SandboxError when another program already listens on ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the daemons themselves: connections in TIME_WAIT do not make a port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SandboxError(
                    f"port {port} for {component} is already in use by another program",
                    hint="stop that program, or pick other ports with "
                    "'hpcjobs sandbox up --port-base N'",
                ) from exc
            raise


def wait_until(what: str, ready: Callable[[], bool], timeout: float, log_file: Path) -> None:
    """Poll ``ready`` until it is true; SandboxError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise SandboxError(
                f"{what} did not become ready within {timeout:g} s", hint=f"see {log_file}"
            )
        time.sleep(0.2)
