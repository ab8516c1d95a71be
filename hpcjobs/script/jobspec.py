"""What a researcher asks for: the job spec, read from flags and/or a YAML job file.

A :class:`JobSpec` holds only what the user said; :func:`resolve_spec` fills in the site's
defaults and checks the request against the partition (GPUs, nodes, time), so that a bad
request stops with exit 2 before anything reaches Slurm.

Every string a user gives may end up in a batch script or in Slurm's database, so only safe
text (:mod:`hpcjobs.safetext`: no control characters, no line separators, valid UTF-8) is
accepted anywhere; quotes, ``$( )``, spaces and non-ASCII text are fine, because rendering
quotes every value. Numbers, signal and variable names follow the same module's rules.
"""

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from hpcjobs.config.fields import (
    LazyInputBeforeValidator,
    SafeStr,
    SignalName,
    no_control,
    slurm_time,
    text_from,
    whole_number,
)
from hpcjobs.config.launchers import LAUNCHERS, Launcher
from hpcjobs.config.models import MaxRequeues, Partition, SiteConfig
from hpcjobs.config.problems import dotted
from hpcjobs.config.validate import schema_findings
from hpcjobs.config.yamlfile import read_yaml_file
from hpcjobs.contract.slurmtime import format_slurm_time, parse_slurm_time
from hpcjobs.errors import BadInputError
from hpcjobs.logger import logger
from hpcjobs.safetext import (
    MAX_COUNT,
    check_env_name,
    check_fits_one_argument,
    check_not_option,
    check_pattern,
    check_signal_name,
    parse_int,
)

#: Causes a requeue budget is kept for: the fields of the site config's ``max_requeues``.
REQUEUE_CAUSES: tuple[str, ...] = tuple(MaxRequeues.model_fields)


def _cause(value: str) -> str:
    if value not in REQUEUE_CAUSES:
        raise ValueError(f"unknown requeue cause {value!r} (causes: {', '.join(REQUEUE_CAUSES)})")
    return value


#: Slurm's limit on the ``--signal`` lead time, in seconds.
MAX_SIGNAL_LEAD = 65535

#: How much earlier than its lead Slurm may send the warning signal (sbatch(1), --signal).
SIGNAL_EARLY_S = 60

_WORD = re.compile(r"[A-Za-z0-9._-]+")
_ARRAY_ITEM = r"[0-9]+(?:-[0-9]+(?::[0-9]+)?)?"
# Arrays, dependencies and signal times are rare in a job: strings, compiled on first use.
_ARRAY = rf"{_ARRAY_ITEM}(?:,{_ARRAY_ITEM})*(?:%[0-9]+)?"
_DEPENDENCY_ITEM = (
    r"(?:singleton|(?:after|afterany|afterburstbuffer|aftercorr|afternotok|afterok)"
    r"(?::[0-9]+(?:_[0-9]+)?(?:\+[0-9]+)?)+)"
)
_DEPENDENCY = rf"{_DEPENDENCY_ITEM}(?:[,?]{_DEPENDENCY_ITEM})*"
_SIGNAL_AT = r"(?:B:)?([A-Za-z0-9]+)?(?:@([0-9]+))?"
_NUMBER = re.compile(r"[0-9]+")

#: Variables hpcjobs sets for every rank; a job may not set them itself.
MANAGED_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
    }
)


#: The variables ``hpcjobs plan --apply`` writes into a job file: the planned layout, for the
#: training script to read. The only ``HPCJOBS_*`` names a job may set.
PLAN_ENV = frozenset(
    f"HPCJOBS_PLAN_{key}"
    for key in (
        "TP",
        "PP",
        "DP",
        "ZERO",
        "RECOMPUTE",
        "SP",
        "MICRO_BATCH",
        "GLOBAL_BATCH",
        "SEQ_LEN",
        "PRECISION",
    )
)


def _word(value: str) -> str:
    return check_pattern(value, _WORD, "may only contain letters, digits, '.', '_' and '-'")


def _int_to_str(value: object) -> object:
    """YAML turns ``10`` into an int; accept whole numbers where text is meant, nothing else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float | bool) or value is None:
        raise ValueError(
            f"must be text, not {value!r}; quote it in YAML so it reaches the job unchanged"
        )
    return value


def _env_name(value: str) -> str:
    return check_env_name(value, managed=MANAGED_ENV, allowed=PLAN_ENV)


def _array(value: str) -> str:
    check_pattern(value, _ARRAY, "is not a Slurm array (for example 0-15, 1,3,5, 0-99%10)")
    for number in _NUMBER.findall(value):
        parse_int(number)
    return value


def _dependency(value: str) -> str:
    return check_pattern(
        value, _DEPENDENCY, "is not a Slurm dependency (for example afterok:123, singleton)"
    )


def _mount(value: str) -> str:
    if "," in value or not value.strip():
        raise ValueError(f"{value!r} is not a mount: use SRC[:DST[:FLAGS]] without commas")
    return check_not_option(value)


def _command(value: object) -> object:
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"cannot split the command line: {exc}") from None
    if not isinstance(value, list | tuple):
        # A YAML set or mapping has no order: the words would change places between runs.
        raise ValueError("must be a list of words (or one command line as text)")
    return value


def _program(value: list[str]) -> list[str]:
    """The command's first word names the program: not empty, not an option."""
    if value and not value[0].strip():
        raise ValueError("the program to run (the command's first word) is empty")
    if value:
        check_not_option(value[0])
    return value


def _storm_runs(value: int) -> int:
    if value == 1:
        raise ValueError("0 (never) or at least 2: one run cannot repeat")
    return value


def _count(minimum: int, maximum: int = MAX_COUNT) -> BeforeValidator:
    """A whole number in ``minimum..maximum``: an int or ASCII digits, never a bool or float."""
    return whole_number(minimum, maximum, text_ok=True)


def _strict_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {value!r}")
    return value


Text = Annotated[
    str,
    text_from(_int_to_str, int),
    AfterValidator(no_control),
    AfterValidator(check_fits_one_argument),
]
Word = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_word)]
EnvName = Annotated[str, AfterValidator(_env_name)]
SlurmTime = Annotated[
    str, text_from(_int_to_str, int), AfterValidator(no_control), AfterValidator(slurm_time)
]
Mount = Annotated[str, AfterValidator(no_control), AfterValidator(_mount)]
Program = Annotated[
    str, Field(min_length=1), AfterValidator(no_control), AfterValidator(check_not_option)
]
Flag = Annotated[bool, LazyInputBeforeValidator(_strict_bool, json_schema_input_type=bool)]


class _Model(BaseModel):
    # Built on each start, like the site config's models: see hpcjobs.config.models._Model.
    model_config = ConfigDict(frozen=True, extra="forbid")


class ContainerSpec(_Model):
    """The container image a job runs in, and what to mount into it."""

    image: Program
    mounts: list[Mount] = []
    workdir: Annotated[SafeStr, Field(min_length=1)] | None = None


class RequeuePolicy(_Model):
    """How the job is warned before its end, and whether Slurm may requeue it.

    Unset fields come from the site's ``requeue`` section.
    """

    enabled: Flag = True
    signal: SignalName | None = None
    lead_time: Annotated[int, _count(1, MAX_SIGNAL_LEAD)] | None = None
    max_requeues: dict[Annotated[str, AfterValidator(_cause)], Annotated[int, _count(0)]] = {}
    max_total: Annotated[int, _count(0)] | None = None


class JobSpec(_Model):
    """One job as the user describes it. ``None`` means "use the site's default"."""

    name: Annotated[SafeStr, Field(min_length=1, max_length=200)] | None = None
    partition: Word | None = None
    nodes: Annotated[int, _count(1)] = 1
    #: Elastic size: the fewest nodes a run may take; ``nodes`` is then the most (None or
    #: ``nodes``: a fixed size). Slurm gets the range (``--nodes=MIN-MAX``).
    min_nodes: Annotated[int, _count(1)] | None = None
    #: Nodes held beyond ``nodes`` to replace a failed one inside the job (None: the site's).
    spare_nodes: Annotated[int, _count(0)] | None = None
    #: Elastic size: a run takes a multiple of this many nodes (a layout that needs whole
    #: groups of nodes); ``min_nodes`` and ``nodes`` must be multiples of it (None: any count).
    node_multiple: Annotated[int, _count(1)] | None = None
    gpus_per_node: Annotated[int, _count(0)] | None = None
    ntasks_per_node: Annotated[int, _count(1)] | None = None
    cpus_per_task: Annotated[int, _count(1)] | None = None
    time: SlurmTime | None = None
    account: Word | None = None
    qos: Word | None = None
    launcher: Launcher | None = None
    command: Annotated[
        list[Text],
        LazyInputBeforeValidator(_command, json_schema_input_type=str | list[str]),
        AfterValidator(_program),
    ] = []
    env: dict[EnvName, Text] = {}
    container: ContainerSpec | None = None
    array: Annotated[str, AfterValidator(_array)] | None = None
    dependency: Annotated[str, AfterValidator(_dependency)] | None = None
    checkpoint_dir: Annotated[SafeStr, Field(min_length=1)] | None = None
    requeue: RequeuePolicy = RequeuePolicy()
    output_dir: Annotated[SafeStr, Field(min_length=1)] | None = None
    chdir: Annotated[SafeStr, Field(min_length=1)] | None = None
    template: Word = "job"
    sbatch_options: list[SafeStr] = []
    nccl_debug: Flag = False
    bind: Flag = True
    gpu_monitor: Flag = True
    #: Seconds a rank may go without advancing its progress report (0: off; None: the site's).
    stall_timeout: Annotated[int, _count(0)] | None = None
    #: Runs in a row that end the same way, no further, before the chain stops (0: never;
    #: None: the site's ``faults.storm_runs``).
    storm_runs: Annotated[int, _count(0, 1000), AfterValidator(_storm_runs)] | None = None
    torchrun: Program = "torchrun"

    @property
    def elastic(self) -> bool:
        """Whether a run may take fewer nodes than ``nodes`` (``min_nodes`` below it)."""
        return self.min_nodes is not None and self.min_nodes < self.nodes


def parse_spec(data: Mapping[str, Any], *, source: str = "job") -> JobSpec:
    """Validate a mapping (a job file's content merged with flags) into a :class:`JobSpec`.

    Args:
        data: Field name -> value.
        source: How to name the input in messages, for example the job file's path.

    Returns:
        The validated spec.

    Raises:
        BadInputError: A field is unknown or has a bad value; the message names every one.
    """
    flag_keys = data.flag_keys if isinstance(data, JobData) and data.from_file else frozenset()
    try:
        return JobSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise BadInputError(
            f"invalid job spec in {source}:\n" + _format_errors(exc, flag_keys),
            hint="see 'hpcjobs submit --help' for the fields and their syntax, and "
            "docs/templates.md for the job file",
        ) from None


def load_job_file(path: Path) -> dict[str, Any]:
    """Read a YAML job file (``hpcjobs submit -f job.yaml``) into a plain mapping.

    Raises:
        BadInputError: The file cannot be read, is not YAML, or is not a mapping.
    """
    if not path.exists():
        where = "" if path.is_absolute() else f" in {Path.cwd()}"
        raise BadInputError(
            f"job file {path} does not exist{where}",
            hint="check the path given to -f/--file, or give the job as flags: "
            "hpcjobs submit -N 2 -- python train.py",
        )
    doc = read_yaml_file(path, source=str(path))
    errors = [p for p in doc.problems if p.is_error]
    if errors:
        raise BadInputError(
            f"cannot read job file {path}:\n" + "\n".join(f"  {p.format()}" for p in errors),
            hint="a job file is a YAML mapping of job fields, for example 'nodes: 2' and "
            "'command: [python, train.py]' (see docs/templates.md)",
        )
    data: dict[str, Any] = doc.data
    return data


class JobData(dict[str, Any]):
    """Job fields merged from a job file and flags, remembering which ones the flags set, so
    that an error in a flag's value is not blamed on the file."""

    def __init__(
        self, data: Mapping[str, Any], *, flag_keys: frozenset[str], from_file: bool
    ) -> None:
        super().__init__(data)
        self.flag_keys = flag_keys
        self.from_file = from_file


def merge_job_data(file_data: Mapping[str, Any] | None, flags: Mapping[str, Any]) -> JobData:
    """Lay flags over a job file: a flag that was given replaces the file's value.

    ``env`` merges key by key, and ``requeue`` field by field; ``None`` flags are ignored.
    """
    merged: dict[str, Any] = dict(file_data or {})
    given: set[str] = set()
    for key, value in flags.items():
        if value is None:
            continue
        given.add(key)
        if key in ("env", "requeue") and isinstance(value, Mapping):
            base = merged.get(key)
            merged[key] = {**(base if isinstance(base, Mapping) else {}), **value}
        else:
            merged[key] = value
    return JobData(merged, flag_keys=frozenset(given), from_file=file_data is not None)


def parse_signal_option(value: str) -> dict[str, Any]:
    """Parse ``--signal [B:]SIG[@SECONDS]`` into requeue policy fields.

    Raises:
        BadInputError: The value is not of that form.
    """
    hint = "for example --signal USR2@300: send SIGUSR2 300 s before the time limit"
    match = re.fullmatch(_SIGNAL_AT, value)
    if not match or not any(match.groups()):
        raise BadInputError(f"--signal {value!r} is not of the form SIG[@SECONDS]", hint=hint)
    result: dict[str, Any] = {}
    if match.group(1):
        try:
            result["signal"] = check_signal_name(match.group(1))
        except ValueError as exc:
            raise BadInputError(f"--signal: {exc}", hint=hint) from None
    if match.group(2):
        try:
            result["lead_time"] = parse_int(match.group(2), minimum=1, maximum=MAX_SIGNAL_LEAD)
        except ValueError as exc:
            raise BadInputError(f"--signal {value!r}: lead time {exc}", hint=hint) from None
    return result


def parse_env_options(items: Sequence[str]) -> dict[str, str]:
    """Parse ``--env K=V`` options into a mapping (later ones win).

    Raises:
        BadInputError: An item has no ``=``.
    """
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInputError(
                f"--env {item!r} is not of the form NAME=VALUE",
                hint="for example --env OMP_NUM_THREADS=4 (an empty value is --env NAME=)",
            )
        env[key] = value
    return env


def job_name_for_path(name: str) -> str:
    """A job name made safe to use as one path component."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "job"
    return cleaned[:100]


class Where(NamedTuple):
    """Where the job is submitted from: paths and ``~`` resolve there.

    For a remote (SSH) submission ``home`` and ``user`` are the login node's, and relative
    paths resolve against the remote home.
    """

    cwd: Path | None = None
    home: str | None = None
    user: str | None = None


def resolve_spec(
    spec: JobSpec, site: SiteConfig, *, cwd: Path | None = None, where: Where | None = None
) -> JobSpec:
    """Fill in the site's defaults and check the request against the partition.

    Args:
        spec: The user's spec.
        site: The site config.
        cwd: The folder relative paths are taken from (default: the current directory).

    Returns:
        A spec with every resource field set (partition, GPUs, tasks, CPUs, time, launcher,
        name, output and checkpoint dirs, signal and lead time).

    Raises:
        BadInputError: Unknown partition, more GPUs/nodes/time/CPUs than the partition has, a
            missing command, or a signal lead time that does not fit the time limit.
    """
    if not spec.command:
        raise BadInputError(
            "no command to run",
            hint="put it after '--', for example: hpcjobs submit -N 2 -- python train.py",
        )
    part = site.partition(spec.partition)
    launcher: Launcher = spec.launcher or part.launcher
    gpus = _check_gpus(spec, part)
    spare, multiple = _check_nodes(spec, part, launcher)
    time = spec.time or site.slurm.time
    time_s = _check_time(time, part)
    ntasks = _tasks_per_node(spec, launcher, gpus)
    cpus = _cpus_per_task(spec, part, gpus, ntasks)
    requeue = _resolve_requeue(spec.requeue, site, time_s)
    if spec.container is not None and site.setup.container.runtime == "none":
        raise BadInputError(
            f"site {site.name!r} has no container runtime, so the job cannot use an image",
            hint="drop the container, or ask the admins to set setup.container.runtime",
        )
    name = spec.name or Path(spec.command[0]).name or "job"
    where = where or Where(cwd=cwd)
    base = where.cwd or (Path(where.home) if where.home else None) or Path.cwd()
    home = where.home
    chdir = _absolute(spec.chdir, base, home) if spec.chdir else None
    workdir = Path(chdir) if chdir else base
    output_dir = _output_dir(spec, site, part, name, workdir, home, where.user)
    checkpoint = _absolute(
        spec.checkpoint_dir or str(Path(output_dir) / "checkpoints"), workdir, home
    )
    return spec.model_copy(
        update={
            "name": name,
            "partition": part.name,
            "spare_nodes": spare,
            "min_nodes": spec.min_nodes if spec.min_nodes != spec.nodes else None,
            "node_multiple": multiple if multiple > 1 else None,
            "gpus_per_node": gpus,
            "ntasks_per_node": ntasks,
            "cpus_per_task": cpus,
            "time": time,
            "account": spec.account or site.slurm.account,
            "qos": spec.qos or part.qos or site.slurm.qos,
            "launcher": launcher,
            "requeue": requeue,
            "output_dir": output_dir,
            "checkpoint_dir": checkpoint,
            "chdir": chdir,
        }
    )


def _check_gpus(spec: JobSpec, part: Partition) -> int:
    gpus = part.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
    if gpus > part.gpus_per_node:
        raise BadInputError(
            f"{gpus} GPUs per node requested, but nodes in partition {part.name!r} have "
            f"{part.gpus_per_node}",
            hint=f"ask for at most --gpus-per-node={part.gpus_per_node}, or pick another partition",
        )
    return gpus


def _check_nodes(spec: JobSpec, part: Partition, launcher: str) -> tuple[int, int]:
    """The job's spare nodes and node multiple, once its nodes and spares fit the partition.
    The partition's ``node_multiple`` applies to an elastic size only (a fixed one has no
    sizes to choose from); the job's own applies to any."""
    if spec.nodes > part.max_nodes:
        raise BadInputError(
            f"{spec.nodes} nodes requested, but partition {part.name!r} allows at most "
            f"{part.max_nodes}",
            hint=f"ask for at most -N {part.max_nodes}, or pick another partition",
        )
    if spec.min_nodes is not None and spec.min_nodes > spec.nodes:
        raise BadInputError(
            f"min_nodes {spec.min_nodes} is above nodes {spec.nodes}",
            hint="nodes is the most nodes a run takes and min_nodes the fewest: set nodes to "
            f"{spec.min_nodes} or more, or lower min_nodes (on the command line: -N MIN-MAX)",
        )
    multiple = spec.node_multiple
    if multiple is None:
        multiple = part.node_multiple if spec.elastic else 1
    sizes = [spec.nodes] if spec.min_nodes is None else [spec.min_nodes, spec.nodes]
    if multiple > 1 and any(size % multiple for size in sizes):
        own = spec.node_multiple is not None
        whose = "" if own else f" (the default of partition {part.name!r})"
        raise BadInputError(
            f"node_multiple {multiple}{whose}: the node count {'-'.join(map(str, sizes))} is "
            "not made of multiples of it",
            hint=f"ask for multiples of {multiple} nodes (-N {multiple}-{multiple * 2}, say)"
            + ("" if own else ", or say --node-multiple 1"),
        )
    if spec.elastic and launcher == "none":
        raise BadInputError(
            "an elastic size (min_nodes below nodes) needs launcher srun or torchrun: launcher "
            "none runs the command once, on one node",
            hint="drop min_nodes, or pick --launcher srun or torchrun",
        )
    spare = part.spare_nodes if spec.spare_nodes is None else spec.spare_nodes
    if spec.nodes + spare > part.max_nodes:
        raise BadInputError(
            f"{spec.nodes} nodes and {spare} spare node(s) requested, but partition "
            f"{part.name!r} allows at most {part.max_nodes} nodes per job",
            hint=f"ask for at most {part.max_nodes - spec.nodes} spare node(s) "
            "(--spare-nodes), or fewer nodes",
        )
    return spare, multiple


def _check_time(time: str, part: Partition) -> int | None:
    seconds = parse_slurm_time(time)
    limit = part.max_time_seconds
    if limit is not None and (seconds is None or seconds > limit):
        raise BadInputError(
            f"time limit {time} is longer than partition {part.name!r} allows ({part.max_time})",
            hint=f"ask for at most -t {part.max_time}",
        )
    return seconds


def _tasks_per_node(spec: JobSpec, launcher: Launcher, gpus: int) -> int:
    if spec.ntasks_per_node is not None:
        if launcher == "none" and spec.ntasks_per_node != 1:
            raise BadInputError(
                "the 'none' launcher runs the command once, so it takes no --ntasks-per-node",
                hint="use --launcher srun or torchrun to start one process per rank",
            )
        return spec.ntasks_per_node
    if launcher == "none":
        return 1
    return max(gpus, 1)


def _cpus_per_task(spec: JobSpec, part: Partition, gpus: int, ntasks: int) -> int:
    if part.gpus_per_node and gpus:
        share = part.cpus_per_node * gpus // part.gpus_per_node
    else:
        share = part.cpus_per_node
    cpus = spec.cpus_per_task or max(1, share // ntasks)
    if cpus * ntasks > part.cpus_per_node:
        raise BadInputError(
            f"{ntasks} tasks x {cpus} CPUs per node requested, but nodes in partition "
            f"{part.name!r} have {part.cpus_per_node} CPUs",
            hint="lower --cpus-per-task or --ntasks-per-node",
        )
    return cpus


def _resolve_requeue(policy: RequeuePolicy, site: SiteConfig, time_s: int | None) -> RequeuePolicy:
    signal = policy.signal or site.requeue.signal
    lead = policy.lead_time if policy.lead_time is not None else site.requeue.lead_time
    lead = min(lead, MAX_SIGNAL_LEAD)
    if time_s is not None and lead >= time_s:
        raise BadInputError(
            f"the warning signal would come {lead} s before the end, but the job only runs "
            f"{time_s} s",
            hint=_short_time_hint(signal, lead, time_s),
        )
    if signal == "USR1":
        logger(__name__).warning(
            "NCCL installs its own SIGUSR1 handler; USR2 is the safer warning signal"
        )
    budget: dict[str, int] = site.requeue.max_requeues.model_dump()
    for cause, count in policy.max_requeues.items():
        budget[cause] = count
    return RequeuePolicy(
        enabled=policy.enabled,
        signal=signal,
        lead_time=lead,
        max_requeues=budget,
        max_total=policy.max_total,
    )


def _short_time_hint(signal: str, lead: int, time_s: int) -> str:
    """What to do when the time limit is not longer than the lead (docs/requeue.md, Signals).

    Slurm may send the warning up to :data:`SIGNAL_EARLY_S` before the lead, so the job needs
    more than ``lead + 60`` s; a lead should be at least the checkpoint time + 60 s.
    """
    # A minute of work before the earliest signal, in whole minutes (Slurm's resolution).
    example = -(-(lead + 2 * SIGNAL_EARLY_S) // 60) * 60
    hint = (
        f"ask for more time: Slurm may send the warning up to {SIGNAL_EARLY_S} s earlier than "
        f"the {lead} s lead, so the job needs more than {lead + SIGNAL_EARLY_S} s, for example "
        f"-t {format_slurm_time(example)}"
    )
    shorter = time_s - 2 * SIGNAL_EARLY_S
    if shorter >= SIGNAL_EARLY_S:
        hint += (
            f"; or a shorter lead such as --signal {signal}@{shorter}, if checkpointing takes "
            f"less than {shorter - SIGNAL_EARLY_S} s"
        )
    return hint


def _output_dir(
    spec: JobSpec,
    site: SiteConfig,
    part: Partition,
    name: str,
    base: Path,
    home: str | None = None,
    user: str | None = None,
) -> str:
    if spec.output_dir is not None:
        raw = spec.output_dir
    else:
        raw = site.slurm.output_dir.format(
            job_name=job_name_for_path(name),
            user=job_name_for_path(user or _user()),
            site=site.name,
            partition=part.name,
        )
    if "%" in raw:
        raise BadInputError(
            f"output dir {raw!r} contains '%', which Slurm would read as a file name pattern",
            hint="choose an output dir without '%'",
        )
    return _absolute(raw, base, home)


def _absolute(path: str, base: Path, home: str | None = None) -> str:
    if home is not None and (path == "~" or path.startswith("~/")):
        expanded = Path(home + path[1:])
    else:
        expanded = Path(os.path.expanduser(path))
    return os.path.normpath(expanded if expanded.is_absolute() else base / expanded)


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):  # pragma: no cover - platform dependent
        return os.environ.get("USER", "user")


def _format_errors(exc: ValidationError, flag_keys: frozenset[str] = frozenset()) -> str:
    """One line per problem, ``  path: message`` (paths as ``site validate`` writes them,
    ``command.1``), a field given on the command line said so."""
    lines = []
    for finding in schema_findings(exc, JobSpec, noun="field"):
        where = dotted(finding.path)
        if finding.path and finding.path[0] in flag_keys:
            where += " (command line)"
        lines.append(f"  {where}: {finding.message}" if where else f"  {finding.message}")
    return "\n".join(lines)


__all__ = [
    "LAUNCHERS",
    "MANAGED_ENV",
    "ContainerSpec",
    "JobData",
    "JobSpec",
    "Launcher",
    "RequeuePolicy",
    "job_name_for_path",
    "load_job_file",
    "merge_job_data",
    "parse_env_options",
    "parse_signal_option",
    "parse_spec",
    "resolve_spec",
]
