"""Fixtures for the live tests: the sandbox's Slurm version, a real OpenSSH server on loopback
and an isolated client home.

The SSH tests need root (they create the user ``hpcjobs-ssh-test`` and run sshd). Without
root they skip, except when ``CI=true``: then they fail.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI, TEST_SANDBOX_DIR
from tests.live.cluster import Cluster
from tests.live.processes import stepds
from tests.live.sshd import SshServer, ensure_openssh_server, start_sshd, unavailable_reason

#: How long a test's jobs may take to leave the queue after the test (its own clean-up has
#: cancelled them by then; COMPLETING lasts up to the sandbox's KillWait).
LEFTOVER_GRACE_S = 30.0


#: How long a step's slurmstepd may outlive the step's job: a little more than the sandbox's
#: UnkillableStepTimeout, after which Slurm drains the node and the slurmstepd exits.
STEP_GRACE_S = 75.0


def _lingering_steps() -> tuple[float, list[str]]:
    """How long this sandbox's slurmstepd processes outlived its queue (at most STEP_GRACE_S),
    and those still there then (each as its command line)."""
    started = time.monotonic()
    left = stepds()
    while left and time.monotonic() - started < STEP_GRACE_S:
        time.sleep(0.5)
        left = stepds()
    return time.monotonic() - started, [line for _pid, line in left]


def _leftovers(runner: object) -> tuple[list[str], list[str]]:
    """Jobs of any user still in the queue, and nodes that are not idle, as readable lines."""
    from hpcjobs.runner import LocalRunner

    assert isinstance(runner, LocalRunner)
    jobs = runner.run(
        ["squeue", "-h", "-o", "%i %u %T %j %N"], check=False, timeout=30
    ).stdout.splitlines()
    nodes = runner.run(["sinfo", "-h", "-N", "-o", "%N %T"], check=False, timeout=30).stdout
    busy = sorted({line for line in nodes.splitlines() if line.split()[1:2] != ["idle"]})
    return [j.strip() for j in jobs if j.strip()], busy


@pytest.fixture(autouse=True)
def _cluster_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every live test that used the sandbox leaves it as it found it: no job of any user left
    and every node idle. What is left is cancelled (nodes resumed) and the test fails by name,
    so that no later test pays for it."""
    yield
    if "sandbox" not in request.fixturenames:
        return
    from hpcjobs.runner import LocalRunner
    from hpcjobs.sandbox.cluster import Sandbox

    box = request.getfixturevalue("sandbox")
    assert isinstance(box, Sandbox)
    runner = LocalRunner(env=box.layout.client_env())
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    jobs, busy = _leftovers(runner)
    while (jobs or busy) and time.monotonic() < deadline:
        time.sleep(0.5)
        jobs, busy = _leftovers(runner)
    steps: list[str] = []
    if not jobs and not busy:
        # A step that outlives its job drains its node UnkillableStepTimeout later ("Kill task
        # failed"): wait for it here, so that the test that left it is named, not the next.
        waited, steps = _lingering_steps()
        if waited < 2.0:
            return
        time.sleep(2.0)  # the drain reaches slurmctld just after the slurmstepd ends
        jobs, busy = _leftovers(runner)
        if not jobs and not busy and not steps:
            return
    box.cancel_all_jobs()
    down = [
        line.split()[0]
        for line in busy
        if line.split()[1].rstrip("*~#!%$@^-") in ("down", "drained", "draining", "fail", "failing")
    ]
    if down:
        runner.run(
            ["scontrol", "update", f"nodename={','.join(down)}", "state=resume"],
            check=False,
            timeout=30,
        )
    pytest.fail(
        f"{request.node.nodeid} left the cluster busy {LEFTOVER_GRACE_S:.0f} s after it ended "
        f"(now cancelled): jobs {jobs or 'none'}; nodes not idle {busy or 'none'}"
        + (f"; Slurm steps still there {STEP_GRACE_S:.0f} s later: {steps}" if steps else ""),
        pytrace=False,
    )


@pytest.fixture(scope="session")
def slurm_version(sandbox: object) -> str:
    """The version the sandbox's Slurm reports (``sinfo -V``), e.g. "22.05.8" or "24.11.5"."""
    from hpcjobs.runner import LocalRunner
    from hpcjobs.sandbox.cluster import Sandbox
    from hpcjobs.slurm.parse import parse_version

    assert isinstance(sandbox, Sandbox)
    out = LocalRunner(env=sandbox.layout.client_env()).run(["sinfo", "-V"], timeout=30).stdout
    return parse_version(out)  # Debian's build prints "slurm-wlm 24.11.5"


@pytest.fixture(scope="session")
def sshd() -> Iterator[SshServer]:
    """A running sshd on 127.0.0.1 (high free port) that lets the test user in by key."""
    reason = unavailable_reason()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true but the SSH tests cannot run: {reason}")
        pytest.skip(reason)
    ensure_openssh_server()
    # Not under pytest's 0700 temp root: sshd reads authorized_keys as the test user.
    root = Path(tempfile.mkdtemp(prefix="hpcjobs-sshd-", dir="/tmp"))
    server = start_sshd(root, slurm_conf=TEST_SANDBOX_DIR / "etc" / "slurm.conf")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class SshClientHome:
    """An isolated client side: ``$HOME`` with its own ``.ssh`` folder, no agent."""

    home: Path
    server: SshServer

    @property
    def ssh_dir(self) -> Path:
        return self.home / ".ssh"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    @property
    def config(self) -> Path:
        return self.ssh_dir / "config"

    def trust_server(self) -> None:
        """Record the server's real host key in ``~/.ssh/known_hosts``."""
        with self.known_hosts.open("a") as handle:
            handle.write(self.server.known_hosts_line() + "\n")

    def write_config(self, text: str) -> None:
        self.config.write_text(text)

    def alias_config(self, alias: str = "sshtest", identity: Path | None = None) -> str:
        """A ``Host`` block that reaches the server as the test user with a key file."""
        key = identity or self.server.client_key.private
        return (
            f"Host {alias}\n"
            "    HostName 127.0.0.1\n"
            f"    Port {self.server.port}\n"
            f"    User {self.server.user}\n"
            f"    IdentityFile {key}\n"
            "    IdentitiesOnly yes\n"
        )


@pytest.fixture
def ssh_home(sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SshClientHome:
    """``$HOME`` in a temp folder: no real keys, known hosts, ssh config or agent are used."""
    from hpcjobs.remote import hostkeys, sshconfig

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("SSH_AGENT_PID", raising=False)
    monkeypatch.setattr(hostkeys, "GLOBAL_KNOWN_HOSTS", ())
    monkeypatch.setattr(sshconfig, "SYSTEM_CONFIG", tmp_path / "no-system-ssh-config")
    os.chmod(home, 0o700)
    return SshClientHome(home, sshd)


@pytest.fixture
def cluster(slurm_env: dict[str, str], shared_tmp: Path, slurm_version: str) -> Iterator[Cluster]:
    """The test sandbox with a folder of its own; every job a test started is cancelled after it."""
    from hpcjobs.jobs.chain import read_chain
    from hpcjobs.slurm.parse import version_tuple

    box = Cluster(env=dict(slurm_env), folder=shared_tmp, slurm_major=version_tuple(slurm_version))
    yield box
    # Nothing a test started may outlive it: continuations included.
    chains = [read_chain(p) for p in shared_tmp.glob("*/chain-*.jsonl")]
    box.cancel_all([job for chain in chains for job in chain.job_ids + chain.standby_ids])
