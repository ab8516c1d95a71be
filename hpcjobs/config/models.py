"""The site config schema: frozen pydantic models that reject unknown keys.

One :class:`SiteConfig` describes one cluster: identity, Slurm defaults, partitions, node
topologies (NUMA domains, GPUs, NICs), NCCL profiles, job setup and the requeue policy. The
models check types and ranges of each value; checks across values (references, overlaps) live in
:mod:`hpcjobs.config.semantics` so that all problems can be reported together.
"""

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from hpcjobs.config.cpulist import parse_cpulist
from hpcjobs.config.fields import (
    LazyInputBeforeValidator,
    SafeStr,
    no_control,
    signal_name,
    slurm_time,
    text_from,
    whole_number,
)
from hpcjobs.config.launchers import Launcher
from hpcjobs.config.signatures import check_ere
from hpcjobs.contract import faultdefaults
from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.errors import BadInputError
from hpcjobs.safetext import (
    check_env_name,
    check_format_template,
    check_not_option,
    check_pattern,
)

#: Placeholders that ``slurm.output_dir`` may use.
OUTPUT_DIR_PLACEHOLDERS = frozenset({"job_name", "user", "site", "partition"})

_NAME = re.compile(r"[A-Za-z0-9._-]+")
_IFNAME = re.compile(r"[A-Za-z0-9_.:@-]+")
#: A command name or an absolute path, as the job's shell finds it on the compute nodes (a
#: string: compiled on first use, see safetext.check_pattern).
_COMMAND = r"/?[A-Za-z0-9_.+][A-Za-z0-9_.+-]*(/[A-Za-z0-9_.+-]+)*"


def _name(value: str) -> str:
    return check_pattern(value, _NAME, "is not a valid name (use letters, digits, '.', '_', '-')")


def _env_name(value: str) -> str:
    return check_env_name(value)


def _ifname(value: str) -> str:
    return check_pattern(value, _IFNAME, "is not a valid interface or device name")


def _command(value: str) -> str:
    return check_pattern(
        value, _COMMAND, "is not a command name or an absolute path (letters, digits, '._+-/')"
    )


def _scalar_to_str(value: object) -> object:
    """Accept YAML numbers where a string is meant (``NCCL_IB_TIMEOUT: 22``); never booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


def _cpulist(value: str) -> str:
    parse_cpulist(value)
    return value


def _regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None
    return value


def _output_dir(value: str) -> str:
    return check_format_template(value, OUTPUT_DIR_PLACEHOLDERS)


NonEmpty = Annotated[str, Field(min_length=1), AfterValidator(no_control)]
NotOption = Annotated[NonEmpty, AfterValidator(check_not_option)]
Name = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_name)]
EnvName = Annotated[str, AfterValidator(_env_name)]
#: A YAML number where text is meant: the text of the number (never a boolean).
_SCALAR = text_from(_scalar_to_str, int, float)
EnvValue = Annotated[str, _SCALAR, AfterValidator(no_control)]
EnvMap = dict[EnvName, EnvValue]
SlurmTime = Annotated[str, _SCALAR, AfterValidator(no_control), AfterValidator(slurm_time)]
CpuList = Annotated[str, _SCALAR, AfterValidator(no_control), AfterValidator(_cpulist)]
IfName = Annotated[str, Field(min_length=1, max_length=64), AfterValidator(_ifname)]
Regex = Annotated[str, AfterValidator(no_control), AfterValidator(_regex)]
InfraPattern = Annotated[
    str, Field(min_length=1, max_length=500), AfterValidator(no_control), AfterValidator(check_ere)
]
GpuIndex = Annotated[int, whole_number(0)]
PositiveInt = Annotated[int, whole_number(1)]
NonNegativeInt = Annotated[int, whole_number(0)]
#: A whole number of bytes: at most 2**62 (4 EiB), so that sums of them stay exact.
ByteCount = Annotated[int, whole_number(1, 2**62)]


def _positive_rate(value: object) -> object:
    """A rate such as TFLOP/s: an int or a float, finite and > 0, never a bool or text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {value!r}")
    if not 0 < value < 1e9:  # also refuses NaN and infinity
        raise ValueError(f"must be greater than 0 and less than 1e9 (got {value!r})")
    return float(value)


Rate = Annotated[
    float,
    LazyInputBeforeValidator(
        _positive_rate,
        json_schema_input_type=Annotated[float, Field(gt=0, lt=1e9)],
    ),
]


def _amount(value: object) -> object:
    """A price: an int or a float, finite, at least 0 and below 1e6 per hour; never text."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, not {value!r}")
    if not 0 <= value < 1e6:  # also refuses NaN and infinity
        raise ValueError(f"must be at least 0 and less than 1e6 (got {value!r})")
    return float(value)


#: An amount of money per hour, in the price's currency.
Amount = Annotated[
    float,
    LazyInputBeforeValidator(_amount, json_schema_input_type=Annotated[float, Field(ge=0, lt=1e6)]),
]
_CURRENCY = re.compile(r"[A-Z]{3}")


def _currency(value: str) -> str:
    if not _CURRENCY.fullmatch(value):
        raise ValueError(
            f"must be a currency code of three capital letters, such as USD or EUR (got {value!r})"
        )
    return value


#: An ISO 4217 currency code: ``USD``, ``EUR``, ``CHF``, ...
Currency = Annotated[
    str, Field(json_schema_extra={"pattern": "^[A-Z]{3}$"}), AfterValidator(_currency)
]


class _Model(BaseModel):
    # Every model is built on each start of the CLI, so two things that make building slow are
    # left out: this module has no ``from __future__ import annotations`` (pydantic would
    # evaluate each annotation from its text), and defaults are values, not ``default_factory``
    # (pydantic inspects each factory's signature, a builtin's through its tokenizer). pydantic
    # copies a mutable default for each instance.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class SlurmDefaults(_Model):
    """Defaults for every job on the site, and facts about its Slurm."""

    account: SafeStr | None = None
    qos: SafeStr | None = None
    time: SlurmTime = "01:00:00"
    output_dir: Annotated[SafeStr, AfterValidator(_output_dir)] = "~/hpcjobs/runs/{job_name}"
    version: SafeStr | None = None
    max_array_size: PositiveInt | None = None
    preempt_mode: SafeStr | None = None
    preempt_send_user_signal: bool | None = None
    #: Whether Slurm may add nodes to a running job (``SchedulerParameters=
    #: permit_job_expansion``): an elastic job that holds no GPUs grows back in place. None:
    #: the job asks the controller (docs/requeue.md, "Growing back").
    job_expansion: bool | None = None


class Defaults(_Model):
    """Which partition and NCCL profile to use when a job names none."""

    partition: Name | None = None
    nccl_profile: Name | None = None


class GpuFacts(_Model):
    """What a GPU and its node can do, for ``hpcjobs plan``: peak rates, memory, links.

    ``bf16_tflops`` is the vendor's peak *dense* (no sparsity) BF16/FP16 tensor rate, in
    TFLOP/s; ``tf32_tflops`` the dense TF32 rate used for fp32 training. ``memory_bytes`` is the
    datasheet capacity in bytes (80 GB = 80_000_000_000). ``nvlink_domain`` is how many GPUs
    share one NVLink/NVSwitch domain (tensor parallelism stays within it).
    ``internode_gbit_s`` is the network bandwidth one GPU has to other nodes, per direction
    (its share of the node's RDMA NICs), and ``nvlink_gbyte_s`` one GPU's NVLink bandwidth, per
    direction.
    """

    model: NonEmpty
    bf16_tflops: Rate
    tf32_tflops: Rate | None = None
    memory_bytes: ByteCount
    nvlink_domain: PositiveInt = 1
    internode_gbit_s: Rate
    nvlink_gbyte_s: Rate | None = None


class Price(_Model):
    """What an hour on a partition costs: per GPU-hour (``gpu_hour``) or per node-hour
    (``node_hour``, for CPU partitions or sites that bill whole nodes), one of the two, in
    ``currency``. ``reserved`` and ``on_demand`` are the other rates a provider quotes, in the
    same unit; ``plan`` shows them beside the price, which is the one costs are computed with."""

    currency: Currency
    gpu_hour: Amount | None = None
    node_hour: Amount | None = None
    reserved: Amount | None = None
    on_demand: Amount | None = None

    @model_validator(mode="after")
    def _one_unit(self) -> "Price":
        if (self.gpu_hour is None) == (self.node_hour is None):
            raise ValueError("give one of gpu_hour and node_hour (the price per hour)")
        return self

    @property
    def unit(self) -> Literal["gpu_hour", "node_hour"]:
        return "gpu_hour" if self.gpu_hour is not None else "node_hour"

    def per_gpu_hour(self, gpus_per_node: int, amount: float | None = None) -> float | None:
        """``amount`` (default: the price) per GPU-hour: a node-hour rate over the node's
        GPUs; None without GPUs."""
        rate = self.gpu_hour if self.gpu_hour is not None else self.node_hour
        if amount is not None:
            rate = amount
        if self.unit == "gpu_hour" or rate is None:
            return rate
        return None if gpus_per_node < 1 else rate / gpus_per_node


class Partition(_Model):
    """A Slurm partition and the nodes behind it."""

    name: Name
    description: SafeStr = ""
    gpu_type: Name | None = None
    gpus_per_node: NonNegativeInt = 0
    cpus_per_node: PositiveInt
    sockets_per_node: PositiveInt = 1
    memory_mb: PositiveInt
    max_nodes: PositiveInt
    max_time: SlurmTime = "UNLIMITED"
    nodes: PositiveInt | None = None
    #: Nodes a job holds beyond those it runs on, to replace a failed node within seconds
    #: (a job's --spare-nodes overrides it).
    spare_nodes: NonNegativeInt = 0
    #: An elastic job's runs take node counts in multiples of this (a job's --node-multiple
    #: overrides it).
    node_multiple: PositiveInt = 1
    qos: SafeStr | None = None
    priority_tier: NonNegativeInt | None = None
    preemptible: bool = False
    launcher: Launcher = "srun"
    topology: Name | None = None
    nccl_profile: Name | None = None
    env: EnvMap = {}
    gpu: GpuFacts | None = None
    #: What an hour here costs; absent: no costs are shown for this partition.
    price: Price | None = None

    @property
    def gpu_hour_price(self) -> float | None:
        """The price of one GPU-hour here, in ``price.currency``; None without a price or GPUs."""
        return None if self.price is None else self.price.per_gpu_hour(self.gpus_per_node)

    @property
    def max_time_seconds(self) -> int | None:
        """The partition's time limit in seconds, or None when unlimited."""
        return parse_slurm_time(self.max_time)


class NumaDomain(_Model):
    """One NUMA domain of a node: its CPUs, memory node and the GPUs attached to it."""

    id: NonNegativeInt
    cpus: CpuList
    memory_node: NonNegativeInt | None = None
    gpus: list[GpuIndex] = []

    @property
    def cpu_ids(self) -> list[int]:
        """The CPU numbers of this domain, ascending."""
        return parse_cpulist(self.cpus)

    @property
    def mem_node(self) -> int:
        """The memory node to bind to (the domain id when not set)."""
        return self.id if self.memory_node is None else self.memory_node


class Nic(_Model):
    """A network adapter (HCA) of a node."""

    name: IfName
    kind: Literal["ib", "roce", "eth"] = "ib"
    port: PositiveInt = 1
    gid_index: NonNegativeInt | None = None
    numa: NonNegativeInt | None = None
    gpus: list[GpuIndex] = []
    nccl: bool = True
    ifname: IfName | None = None

    @property
    def hca(self) -> str:
        """The ``name:port`` form used in ``NCCL_IB_HCA`` and ``UCX_NET_DEVICES``."""
        return f"{self.name}:{self.port}"


class Topology(_Model):
    """The layout of one kind of node: NUMA domains, GPUs and NICs."""

    bootstrap_interface: IfName
    numa: Annotated[list[NumaDomain], Field(min_length=1)]
    nics: list[Nic] = []
    gpu: GpuFacts | None = None

    @property
    def gpu_ids(self) -> list[int]:
        """Every GPU index listed in the NUMA map, ascending."""
        return sorted({gpu for domain in self.numa for gpu in domain.gpus})

    @property
    def cpu_ids(self) -> list[int]:
        """Every CPU number of every NUMA domain, ascending."""
        return sorted({cpu for domain in self.numa for cpu in domain.cpu_ids})

    def numa_domain(self, domain_id: int) -> NumaDomain:
        """The NUMA domain with this id.

        Raises:
            BadInputError: No such domain.
        """
        for domain in self.numa:
            if domain.id == domain_id:
                return domain
        known = ", ".join(str(d.id) for d in self.numa)
        raise BadInputError(f"NUMA domain {domain_id} is not in the topology (known: {known})")

    def gpu_numa(self, gpu: int) -> NumaDomain:
        """The NUMA domain that GPU ``gpu`` is attached to.

        Raises:
            BadInputError: The GPU is not in the NUMA map.
        """
        for domain in self.numa:
            if gpu in domain.gpus:
                return domain
        known = ", ".join(str(g) for g in self.gpu_ids) or "none"
        raise BadInputError(
            f"GPU {gpu} is not in the topology's NUMA map (known GPUs: {known})",
            hint="list every GPU under one of the topology's numa[].gpus",
        )

    def nccl_nics(self) -> list[Nic]:
        """The NICs NCCL may use (``nccl: true``), in config order."""
        return [nic for nic in self.nics if nic.nccl]

    def nccl_nics_for_gpu(self, gpu: int) -> list[Nic]:
        """The NCCL NICs that serve ``gpu``: its rail NICs, else the NCCL NICs of its NUMA domain.

        Returns:
            The NICs in config order; empty when the node has no NCCL NIC near the GPU.
        """
        rail = [nic for nic in self.nccl_nics() if gpu in nic.gpus]
        if rail:
            return rail
        domain = self.gpu_numa(gpu)
        return [nic for nic in self.nccl_nics() if nic.numa == domain.id]


class NcclProfile(_Model):
    """A named set of NCCL/UCX environment variables."""

    description: SafeStr = ""
    debug: bool = False
    env: EnvMap = {}


class Container(_Model):
    """The container runtime jobs run under."""

    runtime: Literal["none", "pyxis", "enroot", "apptainer"] = "none"
    image: NotOption | None = None
    mounts: list[NotOption] = []


class Setup(_Model):
    """Shell setup rendered into every job script before the launch."""

    modules: list[NotOption] = []
    lines: list[SafeStr] = []
    container: Container = Container()
    #: The Python (3.8 or newer) that runs the job's supervisor on the compute nodes.
    python: Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(_command)] = (
        "python3"
    )


class MaxRequeues(_Model):
    """How often a job may be requeued, per cause."""

    preemption: NonNegativeInt = 20
    timeout: NonNegativeInt = 10
    node_failure: NonNegativeInt = 5
    infrastructure: NonNegativeInt = 3
    stall: NonNegativeInt = 3
    application: NonNegativeInt = 0


class Requeue(_Model):
    """The requeue policy: which signal warns the job, how early, and how often to requeue."""

    signal: Annotated[str, AfterValidator(no_control), AfterValidator(signal_name)] = "USR2"
    lead_time: PositiveInt = 300
    max_requeues: MaxRequeues = MaxRequeues()


#: An absolute path on the cluster.
AbsolutePath = Annotated[SafeStr, Field(min_length=2, max_length=4000, pattern=r"/.*")]


class Faults(_Model):
    """Failures without a warning: crash signatures, stalls, suspect nodes (docs/requeue.md)."""

    #: Extra infrastructure signatures (grep -E patterns), after hpcjobs' own.
    signatures: list[InfraPattern] = []
    #: Seconds a rank may go without advancing its progress report; 0 turns detection off.
    stall_timeout: NonNegativeInt = 1800
    #: Seconds a stalled run gets, after the warning signal, to checkpoint before it is killed.
    stall_grace: NonNegativeInt = faultdefaults.STALL_GRACE_S
    #: How many nodes a chain excludes at most (the oldest exclusion is lifted first).
    max_excluded_nodes: NonNegativeInt = faultdefaults.MAX_EXCLUDED_NODES
    #: Runs in a row that end with the same fault and get no further (no newer checkpoint, no
    #: later step) before the chain stops: a restart storm (0: never; else at least 2).
    storm_runs: Annotated[int, Field(ge=0, le=1000)] = faultdefaults.STORM_RUNS
    #: Faults within ``keep_out_hours`` that keep a node out of the user's later jobs (a repeat
    #: offender; 0: none is kept out).
    keep_out_faults: Annotated[int, Field(ge=0, le=1000)] = faultdefaults.KEEP_OUT_FAULTS
    keep_out_hours: Annotated[int, Field(ge=1, le=24 * 365)] = faultdefaults.KEEP_OUT_HOURS
    #: The file every chain's blamed nodes go to (absolute; default: the user's own,
    #: ``~/.local/state/hpcjobs/suspects.jsonl``); a site may name one its admins read.
    suspects_file: AbsolutePath | None = None
    #: A node below this share of its peers' pace over ``straggler_window_s`` is a straggler:
    #: swapped for a spare at the next checkpoint, else kept out of the next run (0: off;
    #: docs/faults.md, "Stragglers").
    straggler_ratio: Annotated[float, Field(ge=0, lt=1)] = faultdefaults.STRAGGLER_RATIO
    straggler_window_s: Annotated[int, Field(ge=10, le=24 * 3600)] = (
        faultdefaults.STRAGGLER_WINDOW_S
    )
    #: Shell command run on a suspect node before it is excluded; exit 0 clears the node.
    health_check: Annotated[SafeStr, Field(min_length=1, max_length=4000)] | None = None
    health_check_timeout: PositiveInt = faultdefaults.HEALTH_CHECK_TIMEOUT_S

    @model_validator(mode="after")
    def _storm_runs(self) -> "Faults":
        if self.storm_runs == 1:
            raise ValueError("storm_runs: 0 (never) or at least 2 (one run cannot repeat)")
        return self


class Monitoring(_Model):
    """What jobs measure about themselves for ``hpcjobs report``."""

    gpu_interval: PositiveInt = 30  # seconds between nvidia-smi samples


class SiteConfig(_Model):
    """Everything hpcjobs knows about one cluster."""

    name: Name
    description: SafeStr = ""
    hostnames: list[Regex] = []
    login_hosts: list[NotOption] = []
    host_keys: list[SafeStr] = []
    slurm: SlurmDefaults = SlurmDefaults()
    defaults: Defaults = Defaults()
    partitions: Annotated[list[Partition], Field(min_length=1)]
    topologies: dict[Name, Topology] = {}
    nccl_profiles: dict[Name, NcclProfile] = {}
    setup: Setup = Setup()
    requeue: Requeue = Requeue()
    monitoring: Monitoring = Monitoring()
    faults: Faults = Faults()

    @property
    def partition_names(self) -> list[str]:
        """The partition names in config order."""
        return [p.name for p in self.partitions]

    @property
    def default_partition(self) -> Partition:
        """``defaults.partition``, or the first partition when none is set."""
        return self.partition(None)

    def partition(self, name: str | None) -> Partition:
        """The partition called ``name``; None means the default partition.

        Raises:
            BadInputError: The site has no partition of that name.
        """
        wanted = name if name is not None else self.defaults.partition
        if wanted is None:
            return self.partitions[0]
        for part in self.partitions:
            if part.name == wanted:
                return part
        known = ", ".join(self.partition_names)
        raise BadInputError(
            f"site {self.name!r} has no partition {wanted!r} (known: {known})",
            hint="pick one of the known partitions, or add it to the site config",
        )

    def matches_host(self, hostname: str) -> bool:
        """Whether one of ``hostnames`` fully matches ``hostname``."""
        return any(re.fullmatch(pattern, hostname) for pattern in self.hostnames)

    def _as_partition(self, partition: Partition | str | None) -> Partition:
        if isinstance(partition, Partition):
            return partition
        return self.partition(partition)

    def topology_for(self, partition: Partition | str | None) -> Topology | None:
        """The node topology of ``partition`` (a model, a name, or None for the default).

        Returns:
            The topology, or None when the partition names none.

        Raises:
            BadInputError: The partition names a topology the site does not define.
        """
        part = self._as_partition(partition)
        if part.topology is None:
            return None
        try:
            return self.topologies[part.topology]
        except KeyError:
            raise BadInputError(
                f"partition {part.name!r} names topology {part.topology!r}, "
                f"which site {self.name!r} does not define"
            ) from None

    def gpu_facts_for(self, partition: Partition | str | None) -> GpuFacts | None:
        """The GPU facts of ``partition``: its own ``gpu``, else its topology's; None if unset.

        Raises:
            BadInputError: The partition names a topology the site does not define.
        """
        part = self._as_partition(partition)
        if part.gpu is not None:
            return part.gpu
        topology = self.topology_for(part)
        return None if topology is None else topology.gpu

    def nccl_profile_for(self, partition: Partition | str | None) -> tuple[str, NcclProfile] | None:
        """The NCCL profile name and profile for ``partition``, or None when there is none."""
        part = self._as_partition(partition)
        name = part.nccl_profile or self.defaults.nccl_profile
        if name is None:
            return None
        try:
            return name, self.nccl_profiles[name]
        except KeyError:
            raise BadInputError(
                f"partition {part.name!r} uses NCCL profile {name!r}, "
                f"which site {self.name!r} does not define"
            ) from None

    def nccl_env_for(self, partition: Partition | str | None) -> dict[str, tuple[str, str]]:
        """The NCCL/UCX variables for ``partition``, each with the label of where it came from.

        The profile (the partition's ``nccl_profile``, else ``defaults.nccl_profile``) comes
        first; the partition's own ``env`` overrides it.

        Returns:
            ``{VAR: (value, origin)}`` with origins such as ``"profile production"`` or
            ``"partition batch"``.
        """
        part = self._as_partition(partition)
        result: dict[str, tuple[str, str]] = {}
        profile = self.nccl_profile_for(part)
        if profile is not None:
            name, prof = profile
            for key, value in prof.env.items():
                result[key] = (value, f"profile {name}")
        for key, value in part.env.items():
            result[key] = (value, f"partition {part.name}")
        return result


__all__ = [
    "Container",
    "Defaults",
    "GpuFacts",
    "MaxRequeues",
    "NcclProfile",
    "Nic",
    "NumaDomain",
    "Partition",
    "Requeue",
    "Setup",
    "SiteConfig",
    "SlurmDefaults",
    "Topology",
]
