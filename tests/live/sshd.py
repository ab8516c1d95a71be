"""A throw-away OpenSSH server on 127.0.0.1 for the SSH tests.

It runs Debian's ``/usr/sbin/sshd`` in the foreground with a generated config: its own host
key, a high free port, key-only logins for one test user whose authorized keys live in the
server's temp folder, and logs in a file the tests can read.

It works with OpenSSH 9.2 (Debian 12) and 10.0 (Debian 13). Since 9.8 sshd penalises a source
address whose connections fail authentication (``PerSourcePenalties``): after the tests' refused
keys it answered 127.0.0.1 with "Not allowed at this time" instead of its banner. The option is
turned off where sshd knows it (9.2 rejects it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
TEST_USER = "hpcjobs-ssh-test"


@dataclass
class KeyPair:
    """A key made with ssh-keygen: the private key file and its public ``type base64`` part."""

    private: Path
    public: str

    @property
    def key_type(self) -> str:
        return self.public.split()[0]

    @property
    def fingerprint(self) -> str:
        out = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{self.private}.pub"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split()[1]

    def secret_fragments(self) -> list[str]:
        """Pieces of the private key file that must never show up in output or logs."""
        lines = self.private.read_text().splitlines()
        body = [line for line in lines if line and not line.startswith("-----")]
        return [line for line in body if len(line) >= 20]


@dataclass
class SshServer:
    """A running sshd and what the tests need to reach it."""

    port: int
    root: Path
    host_key: KeyPair
    client_key: KeyPair
    user: str
    log_file: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def key_name(self) -> str:
        """How ``known_hosts`` names this server."""
        return f"[127.0.0.1]:{self.port}"

    @property
    def spec(self) -> str:
        """``user@127.0.0.1:port``."""
        return f"{self.user}@127.0.0.1:{self.port}"

    def known_hosts_line(self) -> str:
        return f"{self.key_name} {self.host_key.public}"

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def connections_logged(self) -> int:
        """How many TCP connections sshd has accepted so far."""
        return self.log_text().count("Connection from 127.0.0.1")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def unavailable_reason() -> str | None:
    """None when a test sshd can be started here, else why not."""
    if os.geteuid() != 0:
        return "the SSH tests need root (to create the test user and run sshd)"
    if not SSHD.exists() and not shutil.which("apt-get"):
        return "openssh-server is not installed and apt-get is missing"
    return None


def ensure_openssh_server() -> None:
    """Install Debian's openssh-server when sshd is missing (root only)."""
    if SSHD.exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "openssh-server"],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )


def ensure_test_user() -> pwd.struct_passwd:
    """The test user, created with a home folder and a login shell if missing.

    Its password field is ``*`` (no password login possible) rather than ``!`` (locked), which
    sshd without PAM would refuse even for key logins.
    """
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "-m", "-s", "/bin/bash", "-p", "*", TEST_USER],
            check=True,
            capture_output=True,
        )
    else:
        subprocess.run(["usermod", "-p", "*", "-s", "/bin/bash", TEST_USER], check=True)
    return pwd.getpwnam(TEST_USER)


def make_key(path: Path, key_type: str = "ed25519", comment: str = "hpcjobs-test") -> KeyPair:
    """A new key pair without passphrase at ``path`` (and ``path.pub``)."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", key_type, "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    public = " ".join(Path(f"{path}.pub").read_text().split()[:2])
    return KeyPair(path, public)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sshd(root: Path, *, slurm_conf: Path) -> SshServer:
    """Start sshd on a free loopback port, with keys and config under ``root``.

    Args:
        root: An empty folder for keys, config, pid and log files.
        slurm_conf: Set as SLURM_CONF for every login (like a site-wide setting).
    """
    user = ensure_test_user()
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    os.chmod(root, 0o755)
    host_key = make_key(root / "ssh_host_ed25519_key", comment="hpcjobs-test-host")
    client_key = make_key(root / "client_ed25519", comment="hpcjobs-test-client")
    authorized = root / "authorized_keys"
    authorized.mkdir(mode=0o755)
    user_keys = authorized / user.pw_name
    user_keys.write_text(client_key.public + "\n")
    os.chmod(user_keys, 0o644)
    port = free_port()
    log_file = root / "sshd.log"
    config = root / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key.private}",
                f"PidFile {root / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}/%u",
                "StrictModes no",
                "UsePAM no",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin no",
                f"AllowUsers {user.pw_name}",
                "AllowTcpForwarding yes",
                "AllowAgentForwarding no",
                "X11Forwarding no",
                "PrintMotd no",
                "UseDNS no",
                "MaxStartups 100",
                "LogLevel VERBOSE",
                f"SetEnv SLURM_CONF={slurm_conf}",
                "Subsystem sftp internal-sftp -u 0000",
                "",
            ]
        )
    )
    subprocess.run([str(SSHD), "-t", "-f", str(config)], check=True, capture_output=True)
    if _accepts(config, "PerSourcePenalties=no"):
        with config.open("a") as handle:
            handle.write("PerSourcePenalties no\n")
    process = subprocess.Popen(
        [str(SSHD), "-D", "-f", str(config), "-E", str(log_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = SshServer(port, root, host_key, client_key, user.pw_name, log_file, process)
    _wait_for_banner(server)
    return server


def _accepts(config: Path, option: str) -> bool:
    """Whether this sshd accepts ``option`` on top of ``config``."""
    argv = [str(SSHD), "-t", "-f", str(config), "-o", option]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _wait_for_banner(server: SshServer, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"sshd exited at start:\n{server.log_text()}")
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock:
                if sock.recv(64).startswith(b"SSH-2.0-"):
                    return
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"sshd did not answer on port {server.port}:\n{server.log_text()}")
