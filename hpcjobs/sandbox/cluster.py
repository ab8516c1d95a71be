"""A real Slurm cluster on this host: munge, MariaDB + slurmdbd, slurmctld and N slurmd.

Everything lives under one state directory and listens on its own ports, so the sandbox never
collides with (or touches) another Slurm. ``up`` is idempotent; ``down`` stops exactly the
processes this sandbox started, job steps included.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcjobs.atomicfile import PRIVATE_DIR, READABLE, write_atomic
from hpcjobs.backoff import Backoff
from hpcjobs.errors import SandboxError
from hpcjobs.logger import logger
from hpcjobs.runner import LocalRunner, Result
from hpcjobs.sandbox import confgen, packages, procs, site
from hpcjobs.sandbox.daemons import DaemonStarter, database_password
from hpcjobs.sandbox.layout import CLUSTER_NAME, Layout, Settings, default_state_dir
from hpcjobs.sandbox.release import Release, get_release, host_release
from hpcjobs.sandbox.root import MARKER as ROOT_MARKER
from hpcjobs.sandbox.root import DebianRoot, remove_tree
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.parse import parse_scontrol_records
from hpcjobs.textlines import split_lines

log = logger(__name__)

Progress = Callable[[str], None]

ACCOUNT = "sandbox"
#: A second Unix user with an association in the sandbox's account: tests submit its jobs to
#: fill the cluster (someone else's work on a busy cluster). Created on the host (and in a
#: release's root) when missing: a system user without a home or a login shell.
OTHER_USER = "hpcjobs-other"
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld")
#: Retries for the sandbox's own Slurm commands: its controller is local, so a few seconds.
SANDBOX_RETRY = Backoff(attempts=5, total_s=10.0, first_wait_s=0.5, max_wait_s=2.0)


def _quiet(_: str) -> None:
    pass


@dataclass
class NodeInfo:
    name: str
    state: str
    gres: str
    cpus: int
    reason: str = ""


@dataclass
class Status:
    """What ``sandbox status`` reports."""

    state_dir: str
    slurm_conf: str
    running: bool
    daemons: dict[str, int | None] = field(default_factory=dict)
    nodes: list[NodeInfo] = field(default_factory=list)
    partitions: list[dict[str, str]] = field(default_factory=list)
    accounting: bool = False
    accounting_detail: str = ""
    slurm_version: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    release: str = ""
    root: str = ""


@dataclass(frozen=True)
class ChrootRunner:
    """A runner whose commands run inside a Debian root."""

    inner: LocalRunner
    root: DebianRoot

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> Result:
        return self.inner.run(
            self.root.argv(argv), stdin=stdin, timeout=timeout, check=check, env=env
        )


def recorded_release(state_dir: Path) -> str | None:
    """The release whose root ``state_dir`` holds, if it holds a finished one."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((state_dir / "root" / ROOT_MARKER).read_text())
        if isinstance(data, dict) and isinstance(data.get("release"), str):
            return str(data["release"])
    return None


def choose_release(
    requested: str | None, state_dir: Path | None, host: Release | None
) -> Release | None:
    """The release a sandbox runs: the one asked for, else the one its state dir's root
    was built for, else this machine's own (None: not a Debian release we know)."""
    if requested:
        return get_release(requested)
    if state_dir is not None:
        recorded = recorded_release(state_dir.expanduser().resolve())
        if recorded:
            return get_release(recorded)
    return host


class Sandbox:
    """One local cluster, identified by its state directory.

    On this machine's own Debian release the daemons run on the host. For the other release
    they run under ``chroot`` in a Debian root built once in ``<state dir>/root``; the cluster's
    files then live in ``<state dir>/data``, bind-mounted into the root at the same path, so
    every path means the same inside and outside.
    """

    def __init__(self, state_dir: Path | None = None, release: str | None = None) -> None:
        host = host_release()
        chosen = choose_release(release, state_dir, host)
        self.release = chosen
        foreign = chosen is not None and host is not None and chosen != host
        base = state_dir or default_state_dir(chosen.codename if foreign and chosen else None)
        self.home = base.expanduser().resolve()
        self.root: DebianRoot | None = None
        self.runner: LocalRunner | ChrootRunner
        if foreign and chosen is not None:
            self.root = DebianRoot(self.home / "root", chosen)
            self.layout = Layout(self.home / "data")
            self.runner = ChrootRunner(LocalRunner(env=self.layout.client_env()), self.root)
        else:
            self.layout = Layout(self.home)
            self.runner = LocalRunner(env=self.layout.client_env())
        #: Every Slurm command the sandbox runs: through the one client, over this runner.
        #: Short retries: a sandbox that does not answer within seconds is not up.
        self.slurm = SlurmClient(self.runner, policy=SANDBOX_RETRY)
        #: Extra host folders bound into the root at their own path (a checkout, for tests).
        self.binds: list[Path] = []
        #: Starts munged, MariaDB, slurmdbd, slurmctld and the slurmds of this sandbox.
        self.daemons = DaemonStarter(self.layout, self.root, self.runner, self.slurm)

    @property
    def state_dir(self) -> Path:
        return self.home

    @property
    def marker_dir(self) -> Path:
        """What the daemons carry in their ownership marker: the cluster's own files."""
        return self.layout.root

    # ---- settings -------------------------------------------------------------------------

    def saved_settings(self) -> Settings | None:
        try:
            return Settings.from_json(self.layout.settings_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SandboxError(
                f"sandbox settings file {self.layout.settings_file} is damaged: {exc}",
                hint="run 'hpcjobs sandbox down --purge' and start again",
            ) from exc

    # ---- processes ------------------------------------------------------------------------

    def daemon_pids(self) -> dict[str, int | None]:
        settings = self.saved_settings() or Settings()
        pids: dict[str, int | None] = {
            name: procs.running_pid(self.layout.pid_file(name), self.marker_dir) for name in DAEMONS
        }
        for node in settings.node_names:
            pids[f"slurmd-{node}"] = procs.running_pid(
                self.layout.pid_file(f"slurmd-{node}"), self.marker_dir
            )
        return pids

    def is_running(self) -> bool:
        return any(pid is not None for pid in self.daemon_pids().values())

    # ---- up -------------------------------------------------------------------------------

    def up(self, settings: Settings | None = None, progress: Progress = _quiet) -> Settings:
        """Start whatever part of the sandbox is not running yet, and wait until it is usable."""
        if os.geteuid() != 0:
            raise SandboxError(
                "the sandbox must be started as root: slurmd and slurmctld switch users",
                hint="run it with sudo, or on a machine where you are root",
            )
        saved = self.saved_settings()
        wanted = settings or saved or Settings()
        if saved is not None and saved != wanted and self.is_running():
            raise SandboxError(
                f"the sandbox in {self.state_dir} is running with other settings",
                hint="run 'hpcjobs sandbox down' first, then 'up' with the new settings",
            )
        if self.root is not None:
            self.root.ensure_built(progress)
        else:
            packages.ensure_installed(progress=progress)
        self._prepare_files(wanted)
        uid, gid = _ensure_user(OTHER_USER)
        if self.root is not None:
            self.root.add_user(OTHER_USER, uid, gid)
            self.root.copy_host_files()
            self.root.mount([self.layout.root, self.layout.run, *self.binds])
        self.daemons.start_munge(progress)
        self.daemons.start_mariadb(wanted, progress)
        self.daemons.start_slurmdbd(wanted, progress)
        self._register_accounting(progress)
        self.daemons.start_slurmctld(wanted, progress)
        self.daemons.start_slurmds(wanted, progress)
        self._wait_nodes_ready(wanted, progress)
        progress("sandbox is up")
        return wanted

    def _prepare_files(self, settings: Settings) -> None:
        lay = self.layout
        for folder in (lay.root, lay.etc, lay.logs, lay.munge_dir, lay.ctld_state):
            folder.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
            os.chmod(folder, PRIVATE_DIR)
        # slurmstepd runs job scripts from the spool as the job's user: it must be searchable.
        lay.spool.mkdir(parents=True, exist_ok=True)
        os.chmod(lay.spool, 0o755)
        # munged needs its socket folder reachable by everyone who submits jobs.
        lay.run.mkdir(parents=True, exist_ok=True)
        os.chmod(lay.run, 0o755)
        os.chmod(lay.run.parent, 0o755)
        os.chmod(lay.root, 0o755)
        os.chmod(lay.etc, 0o755)
        for node in settings.node_names:
            (lay.spool / node).mkdir(exist_ok=True)
            os.chmod(lay.spool / node, 0o755)
        if not lay.munge_key.exists():
            write_atomic(lay.munge_key, secrets.token_bytes(1024))
        major = self.release.slurm_major if self.release else None
        _write_public(lay.slurm_conf, confgen.slurm_conf(settings, lay, _short_hostname(), major))
        _write_public(lay.gres_conf, confgen.gres_conf(settings))
        cgroup = confgen.cgroup_conf(major)
        if cgroup is None:
            with contextlib.suppress(FileNotFoundError):
                lay.cgroup_conf.unlink()
        else:
            _write_public(lay.cgroup_conf, cgroup)
        password = database_password(lay)
        write_atomic(lay.slurmdbd_conf, confgen.slurmdbd_conf(settings, lay, password).encode())
        _write_public(lay.settings_file, settings.to_json() + "\n")
        _write_public(lay.site_file, site.site_text(settings))

    def _register_accounting(self, progress: Progress) -> None:
        show = self.slurm.run(
            ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], timeout=30
        )
        if CLUSTER_NAME not in show.stdout.split():
            progress("registering the cluster in accounting")
            self.slurm.run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], timeout=30)
        accounts = self.slurm.run(
            ["sacctmgr", "-n", "-P", "show", "account", "format=account"], timeout=30
        )
        if ACCOUNT not in accounts.stdout.split():
            self.slurm.run(
                ["sacctmgr", "-i", "add", "account", ACCOUNT, f"cluster={CLUSTER_NAME}"],
                timeout=30,
            )
        for user in (_current_user(), OTHER_USER):
            self._add_association(user)

    def _add_association(self, user: str) -> None:
        assoc = self.slurm.run(
            [
                "sacctmgr",
                "-n",
                "-P",
                "show",
                "assoc",
                f"user={user}",
                f"account={ACCOUNT}",
                "format=user",
            ],
            timeout=30,
        )
        if user not in assoc.stdout.split():
            # An existing user (root has an association with account 'root') gets one more.
            self.slurm.run(
                [
                    "sacctmgr",
                    "-i",
                    "add",
                    "user",
                    user,
                    f"account={ACCOUNT}",
                    f"cluster={CLUSTER_NAME}",
                ],
                timeout=30,
            )

    def _wait_nodes_ready(self, settings: Settings, progress: Progress) -> None:
        progress(f"waiting for nodes {settings.nodes_text}")
        deadline = time.monotonic() + 90
        while True:
            nodes = self.nodes()
            bad = [n for n in nodes if _base_state(n.state) in ("down", "drain", "drng", "fail")]
            # Nodes a test (or a user) set down are ours to bring back.
            for node in bad:
                self.slurm.probe(
                    ["scontrol", "update", f"nodename={node.name}", "state=resume"], timeout=30
                )
            ready = [n for n in nodes if _base_state(n.state) in ("idle", "mix", "alloc", "comp")]
            if len(ready) == settings.nodes and not any(n.state.endswith("*") for n in ready):
                return
            if time.monotonic() > deadline:
                states = ", ".join(f"{n.name}={n.state}" for n in nodes) or "none registered"
                raise SandboxError(
                    f"sandbox nodes did not become ready within 90 s ({states})",
                    hint=f"see the slurmd logs in {self.layout.logs}",
                )
            time.sleep(0.5)

    # ---- queries --------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        result = self.slurm.probe(["sinfo", "-h", "-N", "-o", "%N|%t|%G|%c|%E"], timeout=30)
        if not result.ok:
            return []
        seen: dict[str, NodeInfo] = {}
        for line in split_lines(result.stdout):
            parts = line.split("|")
            if len(parts) < 5:
                continue
            name, state, gres, cpus, reason = parts[:5]
            seen.setdefault(
                name,
                NodeInfo(
                    name,
                    state,
                    gres,
                    int(cpus) if cpus.isdigit() else 0,
                    "" if reason == "none" else reason,
                ),
            )
        return list(seen.values())

    def status(self) -> Status:
        saved = self.saved_settings()
        pids = self.daemon_pids()
        status = Status(
            state_dir=str(self.state_dir),
            slurm_conf=str(self.layout.slurm_conf),
            running=any(p is not None for p in pids.values()),
            daemons=pids,
            settings=dict(vars(saved)) if saved else {},
            release=self.release.codename if self.release else "",
            root=str(self.root.path) if self.root else "",
        )
        if pids.get("slurmctld") is None:
            return status
        status.nodes = self.nodes()
        status.partitions = self._partitions()
        status.slurm_version = self.slurm.version()
        acct = self.slurm.probe(
            ["sacct", "-X", "-n", "-P", "-S", "now-1minute", "-o", "JobID"], timeout=30
        )
        status.accounting = acct.ok
        status.accounting_detail = "sacct works" if acct.ok else _last_line(acct.stderr)
        return status

    def _partitions(self) -> list[dict[str, str]]:
        result = self.slurm.probe(["scontrol", "show", "partition", "-o"], timeout=30)
        parts = []
        for fields in parse_scontrol_records(result.stdout):
            if "PartitionName" in fields:
                parts.append(
                    {
                        "name": fields["PartitionName"],
                        "default": fields.get("Default", "NO"),
                        "nodes": fields.get("Nodes", ""),
                        "priority_tier": fields.get("PriorityTier", ""),
                        "preempt_mode": fields.get("PreemptMode", ""),
                        "grace_time": fields.get("GraceTime", ""),
                        "state": fields.get("State", ""),
                    }
                )
        return parts

    # ---- down -----------------------------------------------------------------------------

    def down(self, *, purge: bool = False, progress: Progress = _quiet) -> list[int]:
        """Stop every process of this sandbox. Returns the pids that were running."""
        pids = self.daemon_pids()
        stopped: list[int] = []
        if pids.get("slurmctld") is not None:
            self.cancel_all_jobs(progress)
        order = [k for k in pids if k.startswith("slurmd-")] + [
            "slurmctld",
            "slurmdbd",
            "mariadbd",
            "munged",
        ]
        for name in order:
            pid = pids.get(name)
            if pid is None:
                continue
            progress(f"stopping {name}")
            procs.stop(pid)
            stopped.append(pid)
        leftovers = procs.sandbox_processes(self.marker_dir)
        if leftovers:
            progress(f"killing {len(leftovers)} leftover job process(es)")
            procs.kill_all(leftovers)
            stopped += leftovers
        for name in order:
            with contextlib.suppress(FileNotFoundError):
                self.layout.pid_file(name).unlink()
        if self.root is not None and self.root.mounted():
            progress(f"unmounting {self.root.path}")
            # Unmount BEFORE anything is deleted: the root has the host's /dev bound in.
            self.root.unmount()
        if purge and self.state_dir.exists():
            progress(f"removing {self.state_dir}")
            # Refuses while anything below is still mounted.
            remove_tree(self.state_dir)
        return stopped

    def cancel_all_jobs(self, progress: Progress = _quiet) -> None:
        """Cancel every job in the sandbox's queue and wait (briefly) until they are gone."""
        queue = self.slurm.probe(["squeue", "-h", "-o", "%A"], timeout=30)
        jobs = sorted(set(queue.stdout.split()))
        if not jobs:
            return
        progress(f"cancelling {len(jobs)} job(s)")
        self.slurm.probe(["scancel", *jobs], timeout=30)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = self.slurm.probe(["squeue", "-h", "-o", "%A"], timeout=30)
            if not left.stdout.strip():
                return
            time.sleep(0.2)


# ---- helpers ----------------------------------------------------------------------------------


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def _ensure_user(name: str) -> tuple[int, int]:
    """The uid and gid of user ``name`` on this host, created (a system user) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        argv = ["useradd", "--system", "--user-group", "--no-create-home"]
        argv += ["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
        result = LocalRunner().run(argv, timeout=30, check=False)
        if not result.ok:
            raise SandboxError(
                f"could not create the user {name}: {result.stderr.strip() or result.stdout}",
                hint="create it yourself (useradd --system), then run 'sandbox up' again",
            ) from None
        entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def _current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _base_state(state: str) -> str:
    return state.rstrip("*~#!%$@^-+").lower()


def _last_line(text: str) -> str:
    lines = [line for line in split_lines(text.strip()) if line.strip()]
    return lines[-1] if lines else ""


def _write_public(path: Path, text: str) -> None:
    if path.exists() and path.read_text() == text:
        return
    write_atomic(path, text, mode=READABLE)
