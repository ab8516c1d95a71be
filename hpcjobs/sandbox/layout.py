"""The sandbox's settings, ports and the files under its state directory."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from hpcjobs.config import SANDBOX_SITE, SITE_ENV
from hpcjobs.errors import BadInputError
from hpcjobs.slurm.classify import SANDBOX_ENV_COMMAND as SANDBOX_ENV_COMMAND

#: Far from Slurm's defaults (6817-6819) and from MariaDB's 3306.
DEFAULT_PORT_BASE = 16810
CLUSTER_NAME = "sandbox"
GPU_TYPE = "h100"


def default_state_dir(release: str | None = None) -> Path:
    """``$HPCJOBS_SANDBOX_DIR``, else ``$XDG_STATE_HOME/hpcjobs/sandbox``.

    A sandbox of another Debian release than this machine's (``release``) defaults to
    ``sandbox-<release>`` next to it, so both can run at once.
    """
    explicit = os.environ.get("HPCJOBS_SANDBOX_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    name = f"sandbox-{release}" if release else "sandbox"
    return (Path(base) / "hpcjobs" / name).resolve()


#: The most nodes a sandbox runs (one slurmd each, about 5 MB, on ports base+11 and up: below
#: the next sandbox's base, 1,000 ports on).
MAX_NODES = 256


@dataclass(frozen=True)
class Settings:
    """What the user can choose about a sandbox. Saved in ``sandbox.json``."""

    port_base: int = DEFAULT_PORT_BASE
    nodes: int = 3
    gpus_per_node: int = 4
    cpus_per_node: int = 8
    grace_time: int = 30
    slurmd_timeout: int = 10
    kill_wait: int = 10
    #: Whether Slurm may add nodes to a running job (``SchedulerParameters=
    #: permit_job_expansion``): an elastic job that holds no GPUs then grows in place.
    job_expansion: bool = False

    def __post_init__(self) -> None:
        if not 1024 <= self.port_base <= 65000:
            raise BadInputError(f"port base must be between 1024 and 65000, not {self.port_base}")
        if not 1 <= self.nodes <= MAX_NODES:
            raise BadInputError(f"a sandbox has 1 to {MAX_NODES} nodes, not {self.nodes}")
        if not 1 <= self.gpus_per_node <= 8:
            raise BadInputError(f"a sandbox node has 1 to 8 GPUs, not {self.gpus_per_node}")
        if self.cpus_per_node < self.gpus_per_node or self.cpus_per_node % 2:
            raise BadInputError(
                "cpus per node must be even and at least one per GPU "
                f"(got {self.cpus_per_node} for {self.gpus_per_node} GPUs)"
            )
        if self.grace_time < 0:
            raise BadInputError(f"grace time must be >= 0 s, not {self.grace_time}")

    @property
    def ctld_port(self) -> int:
        return self.port_base

    @property
    def dbd_port(self) -> int:
        return self.port_base + 1

    @property
    def mysql_port(self) -> int:
        return self.port_base + 2

    @property
    def slurmd_default_port(self) -> int:
        return self.port_base + 3

    @property
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def hostlist(self) -> str:
        """Every node, in Slurm's host list form: ``n[1-3]``."""
        return "n1" if self.nodes == 1 else f"n[1-{self.nodes}]"

    @property
    def nodes_text(self) -> str:
        """The nodes for a message: named one by one when there are few."""
        return ", ".join(self.node_names) if self.nodes <= 9 else self.hostlist

    def node_port(self, index: int) -> int:
        """The slurmd port of node ``n<index>`` (1-based)."""
        return self.port_base + 10 + index

    def all_ports(self) -> dict[str, int]:
        ports = {
            "slurmctld": self.ctld_port,
            "slurmdbd": self.dbd_port,
            "mariadb": self.mysql_port,
        }
        for i, name in enumerate(self.node_names, start=1):
            ports[f"slurmd {name}"] = self.node_port(i)
        return ports

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Layout:
    """Paths under one sandbox state directory."""

    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        return self.etc / "slurmdbd.conf"

    @property
    def cgroup_conf(self) -> Path:
        return self.etc / "cgroup.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def site_file(self) -> Path:
        """The sandbox's own site config, sized to it (:mod:`.site`)."""
        return self.etc / "site.yaml"

    @property
    def settings_file(self) -> Path:
        return self.root / "sandbox.json"

    @property
    def run(self) -> Path:
        """Sockets and pid files. munged insists that every folder above its socket is
        world-searchable, which a home directory often is not, so they live under /run."""
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:10]
        base = Path("/run") if os.access("/run", os.W_OK) else Path("/tmp")
        return base / "hpcjobs" / f"sandbox-{digest}"

    @property
    def logs(self) -> Path:
        return self.root / "log"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_key(self) -> Path:
        return self.munge_dir / "munge.key"

    @property
    def munge_socket(self) -> Path:
        return self.run / "munge.socket"

    @property
    def mysql_dir(self) -> Path:
        return self.root / "mysql"

    @property
    def mysql_socket(self) -> Path:
        return self.run / "mysqld.sock"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    def pid_file(self, daemon: str) -> Path:
        return self.run / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return self.logs / f"{daemon}.log"

    def client_env(self) -> dict[str, str]:
        """What a Slurm client needs in its environment to talk to this sandbox."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def shell_env(self) -> dict[str, str]:
        """What ``hpcjobs sandbox env`` exports: the Slurm client's variables, and the sandbox
        site for hpcjobs itself, so ``hpcjobs submit`` needs no ``--site``: the one ``up`` wrote,
        of the sandbox's size, else the built-in one."""
        site = str(self.site_file) if self.site_file.is_file() else SANDBOX_SITE
        return {**self.client_env(), SITE_ENV: site}
