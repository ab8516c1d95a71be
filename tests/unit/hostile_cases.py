"""Generator of the hostile-input corpus: value class x field x entry point.

Every :class:`Case` says how to feed one hostile value to hpcjobs and what must happen:

* ``reject``: exit status 2 (or :class:`~hpcjobs.errors.BadInputError` from the Python API),
  exactly one ``Error:`` line, a message that names the flag, field, file or variable, no
  traceback, no raw control characters echoed back, and an answer within a timeout.
* ``accept``: the script renders, passes ``bash -n`` and, run against the stand-ins in
  ``tests/data/jobs/fakebin``, gives the program its arguments and variables byte for byte
  without running anything else.
* ``either``: one of the two, never anything else (no traceback, no half-accepted value).

Strings may hold placeholders that the test fills in per case: ``@CANARY@`` (a path that must
never be created), ``@PY@``, ``@REPORTER@`` and ``@OUT@`` (the program that reports what it
received, and where).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

Expect = Literal["reject", "accept", "either"]

CANARY = "@CANARY@"
PROGRAM = ("@PY@", "@REPORTER@", "@OUT@")

#: Where an accepted value must arrive unchanged.
Reaches = Literal["arg", "env", "checkpoint", "none"]


@dataclass(frozen=True)
class Case:
    """One hostile input and the contract it is held to."""

    entry: str
    value_class: str
    target: str
    label: str
    expect: Expect
    names: tuple[str, ...]
    #: CLI arguments after ``hpcjobs`` (entries cli-render, cli-submit, job-file, site-file, env).
    argv: tuple[str, ...] = ()
    #: Extra environment variables for the command.
    env: tuple[tuple[str, str], ...] = ()
    #: Job file content: a mapping dumped as YAML, or raw bytes, written to ``job.yaml``.
    job_data: dict[str, Any] | None = None
    job_bytes: bytes | None = None
    #: Site file: (dotted key path, value) applied to the sandbox site, or raw bytes.
    site_patch: tuple[tuple[str, Any], ...] | None = None
    site_bytes: bytes | None = None
    #: Python API: job spec data for parse_spec/render_job, or executor parameters.
    api_data: dict[str, Any] | None = None
    executor_params: dict[str, Any] | None = None
    #: What an accepted case must deliver: ("arg", value) adds value to the command line,
    #: ("env", value) to NASTY_VALUE, ("checkpoint", value) to HPCJOBS_CHECKPOINT_DIR.
    reaches: Reaches = "none"
    value: str = ""
    #: Special file given to -f or --site/validate (fifo, devzero, directory, big, ...).
    special: str | None = None
    #: Run as a real subprocess (with a timeout and a memory limit) instead of in-process.
    process: bool = False
    #: argv as bytes for a real subprocess (invalid UTF-8).
    argv_bytes: tuple[bytes, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.entry}-{self.value_class}-{self.target}-{self.label}"


# ---- value classes -----------------------------------------------------------------------

#: (label, character) appended to an otherwise valid value.
C0 = [
    ("nul", "\x00"),
    ("lf", "\n"),
    ("cr", "\r"),
    ("tab", "\t"),
    ("esc", "\x1b[31m"),
    ("bel", "\x07"),
]
DEL = [("del", "\x7f")]
C1 = [("nel", "\x85"), ("csi", "\x9b31m"), ("u0080", "\x80"), ("u009f", "\x9f")]
LINE_SEPARATORS = [("u2028", "\u2028"), ("u2029", "\u2029")]
SURROGATE = [("ff", os.fsdecode(b"\xff"))]

#: Values that must be accepted and reach the program byte for byte.
SHELL_NASTY = [
    ("subst", f"$(touch {CANARY})"),
    ("backtick", f"`touch {CANARY}`"),
    ("squote", f"'; touch {CANARY}; '"),
    ("dquote", f'"; touch {CANARY}; "'),
    ("semicolon", f"; touch {CANARY}"),
    ("pipe", f"| tee {CANARY}"),
    ("redirect", f">{CANARY}"),
    ("glob", "*"),
    ("glob2", "?[a-z]*"),
    ("tilde", "~"),
    ("dollar", "$HOME ${PATH} $((6*7))"),
    ("sbatch", f"#SBATCH --wrap=touch {CANARY}"),
    ("sbatch-nl-free", "x #SBATCH --output=/dev/null"),
    ("backslash", "back\\slash\\"),
    ("history", "!! !$"),
    ("brace", "{a,b}"),
    ("percent", "%j %x %%"),
    ("dash", "--help"),
    ("unicode", "ünïcødé ✓ 日本語 🚀"),
    ("spaces", "  two  spaces  "),
]
HUGE_TEXT = [
    ("100k-plain", "x" * 100_000),
    # About 100 KB once the canary path is filled in (a single argument may not pass 128 KiB).
    ("100k-shell", f"$(touch {CANARY})`'\"; *" * 900),
]
#: Longer than Linux passes to a program as one argument or variable: refused, never run.
OVERSIZE_TEXT = [("200k-plain", "x" * 200_000)]

SIGNALS = ["_IGN", "_DFL", "_BLOCK", "SIG_IGN", "SIG_DFL", "SIG_BLOCK", "NSIG", "KILL", "STOP"]
SIGNALS += ["SIGKILL", "sigstop", "0", "9", "ITIMER_REAL", "SIGRTMAX+1"]
SHELL_ENV_NAMES = [
    "IFS",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "POSIXLY_CORRECT",
    "GLOBIGNORE",
    "PS4",
    "PROMPT_COMMAND",
]
RESERVED_ENV_NAMES = [
    "SLURM_JOB_ID",
    "SBATCH_PARTITION",
    "HPCJOBS_ARRAY_TASK_ID",
    "HPCJOBS_CHECKPOINT_DIR",
    "RANK",
    "MASTER_PORT",
    "BASH_FUNC_x%%",
    "1X",
    "A-B",
    "FOO\n",
]
NON_ASCII_DIGITS = [("arabic", "١"), ("superscript", "²"), ("fullwidth", "１")]
HUGE_INTS = [("2pow63", 2**63), ("1e30", 10**30), ("negative", -1)]
YAML_NOT_INTS: list[tuple[str, Any, Expect]] = [
    ("true", True, "reject"),
    ("false", False, "reject"),
    ("float", 1.5, "reject"),
    ("whole-float", 2.0, "either"),
    ("text", "2", "either"),
    ("list", [1], "reject"),
]
FORMAT_SPECS = [
    ("class", "run/{job_name.__class__}"),
    ("width", "run/{user:>999999999}"),
    ("positional", "run/{0}"),
    ("index", "run/{job_name[0]}"),
    ("empty", "run/{}"),
    ("unknown", "run/{nope}"),
    ("conversion", "run/{job_name!r}"),
    ("unclosed", "run/{job_name"),
]


# ---- fields ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextField:
    """A text field of the job spec, as a flag and as job data."""

    name: str
    valid: str
    names: tuple[str, ...]
    args: Callable[[str], list[str]]
    data: Callable[[str], dict[str, Any]]
    reaches: Reaches = "none"
    #: Needs a site with a container runtime.
    container: bool = False


def _flag(flag: str) -> Callable[[str], list[str]]:
    return lambda v: [flag, v]


def _key(key: str) -> Callable[[str], dict[str, Any]]:
    return lambda v: {key: v}


TEXT_FIELDS = [
    TextField("name", "job", ("-J", "--job-name", "name"), _flag("-J"), _key("name")),
    TextField(
        "command",
        "arg",
        ("command",),
        lambda v: ["--", *PROGRAM, v],
        lambda v: {"command": [*PROGRAM, v]},
        reaches="arg",
    ),
    TextField(
        "env-value",
        "v",
        ("-e", "--env", "env", "NASTY_VALUE"),
        lambda v: ["-e", f"NASTY_VALUE={v}"],
        lambda v: {"env": {"NASTY_VALUE": v}},
        reaches="env",
    ),
    TextField(
        "env-name",
        "NASTY_NAME",
        ("-e", "--env", "env"),
        lambda v: ["-e", f"{v}=1"],
        lambda v: {"env": {v: "1"}},
    ),
    TextField(
        "checkpoint_dir",
        "ck",
        ("--checkpoint-dir", "checkpoint_dir"),
        _flag("--checkpoint-dir"),
        _key("checkpoint_dir"),
        reaches="checkpoint",
    ),
    TextField(
        "output_dir",
        "out",
        ("--output-dir", "output_dir"),
        _flag("--output-dir"),
        _key("output_dir"),
    ),
    TextField("chdir", "wd", ("-D", "--chdir", "chdir"), _flag("-D"), _key("chdir")),
    TextField(
        "partition", "batch", ("-p", "--partition", "partition"), _flag("-p"), _key("partition")
    ),
    TextField("account", "sandbox", ("-A", "--account", "account"), _flag("-A"), _key("account")),
    TextField("qos", "normal", ("-q", "--qos", "qos"), _flag("-q"), _key("qos")),
    TextField("time", "10", ("-t", "--time", "time"), _flag("-t"), _key("time")),
    TextField("array", "0-3", ("--array", "array"), _flag("--array"), _key("array")),
    TextField(
        "dependency",
        "afterok:1",
        ("--dependency", "dependency"),
        _flag("--dependency"),
        _key("dependency"),
    ),
    TextField(
        "signal",
        "USR2",
        ("--signal", "signal", "requeue.signal"),
        _flag("--signal"),
        lambda v: {"requeue": {"signal": v}},
    ),
    TextField(
        "sbatch",
        "--comment=x",
        ("--sbatch", "sbatch_options", "--comment"),
        lambda v: [f"--sbatch={v}"],
        lambda v: {"sbatch_options": [v]},
    ),
    TextField("template", "job", ("--template", "template"), _flag("--template"), _key("template")),
    TextField(
        "torchrun", "torchrun", ("--torchrun", "torchrun"), _flag("--torchrun"), _key("torchrun")
    ),
    TextField(
        "container-image",
        "img",
        ("--container-image", "container.image", "image"),
        _flag("--container-image"),
        lambda v: {"container": {"image": v}},
        container=True,
    ),
    TextField(
        "container-mount",
        "/a:/b",
        ("--container-mount", "container.mounts", "mount"),
        lambda v: ["--container-image", "img", "--container-mount", v],
        lambda v: {"container": {"image": "img", "mounts": [v]}},
        container=True,
    ),
    TextField(
        "container-workdir",
        "/w",
        ("--container-workdir", "container.workdir", "workdir"),
        lambda v: ["--container-image", "img", "--container-workdir", v],
        lambda v: {"container": {"image": "img", "workdir": v}},
        container=True,
    ),
]

#: Fields whose values reach the program; for them a line separator may be accepted.
PROGRAM_FIELDS = {"command", "env-value"}


@dataclass(frozen=True)
class IntField:
    """A whole-number field: a flag (how it is spelled), and its place in the job data."""

    name: str
    names: tuple[str, ...]
    args: Callable[[str], list[str]]
    data: Callable[[Any], dict[str, Any]]
    #: The flag converts with a standard int parser (click), so non-ASCII digits may pass.
    int_flag: bool
    optional: bool


INT_FIELDS = [
    IntField("nodes", ("-N", "--nodes", "nodes"), _flag("-N"), _key("nodes"), True, False),
    IntField(
        "gpus_per_node",
        ("--gpus-per-node", "gpus_per_node", "GPUs"),
        _flag("--gpus-per-node"),
        _key("gpus_per_node"),
        True,
        True,
    ),
    IntField(
        "ntasks_per_node",
        ("--ntasks-per-node", "ntasks_per_node", "tasks"),
        _flag("--ntasks-per-node"),
        _key("ntasks_per_node"),
        True,
        True,
    ),
    IntField(
        "cpus_per_task",
        ("--cpus-per-task", "cpus_per_task", "CPUs"),
        _flag("--cpus-per-task"),
        _key("cpus_per_task"),
        True,
        True,
    ),
    IntField(
        "lead_time",
        ("--signal", "lead_time"),
        lambda v: ["--signal", f"USR2@{v}"],
        lambda v: {"requeue": {"lead_time": v}},
        False,
        True,
    ),
    IntField(
        "max_total",
        ("--max-requeues", "max_total"),
        _flag("--max-requeues"),
        lambda v: {"requeue": {"max_total": v}},
        False,
        True,
    ),
    IntField(
        "max_requeues",
        ("--max-requeues", "max_requeues", "preemption"),
        lambda v: ["--max-requeues", f"preemption={v}"],
        lambda v: {"requeue": {"max_requeues": {"preemption": v}}},
        False,
        True,
    ),
]

#: Defaults every field case adds (unless the field is the one under test): run once, write
#: into the case's own folder.
BASE_ARGS = ["--launcher", "none"]


def _base_args(target: str) -> list[str]:
    return [*BASE_ARGS, *([] if target == "output_dir" else ["--output-dir", "run"])]


def _base_data(target: str) -> dict[str, Any]:
    data: dict[str, Any] = {"launcher": "none", "command": list(PROGRAM)}
    if target != "output_dir":
        data["output_dir"] = "run"
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _cli_argv(entry: str, target: str, field_args: list[str]) -> tuple[str, ...]:
    command = "submit" if entry == "cli-submit" else "render"
    head = ["--site", "sandbox", command, *(["--dry-run"] if command == "submit" else [])]
    base = _base_args(target)
    if "--" in field_args:
        cut = field_args.index("--")
        return (*head, *base, *field_args[:cut], *field_args[cut:])
    return (*head, *base, *field_args, "--", *PROGRAM)


CONTAINER_ENV = (("HPCJOBS_CONTAINER_RUNTIME", "pyxis"),)


def _text_field_cases(
    value_class: str, label: str, value: str, expect: Expect, fld: TextField, entries: list[str]
) -> Iterator[Case]:
    env = CONTAINER_ENV if fld.container else ()
    for entry in entries:
        common: dict[str, Any] = {
            "entry": entry,
            "value_class": value_class,
            "target": fld.name,
            "label": label,
            "expect": expect,
            "names": fld.names,
            "env": env,
            "reaches": fld.reaches if expect != "reject" else "none",
            "value": value,
        }
        if entry in ("cli-render", "cli-submit"):
            yield Case(**common, argv=_cli_argv(entry, fld.name, fld.args(value)))
        elif entry == "job-file":
            data = _merge(_base_data(fld.name), fld.data(value))
            yield Case(
                **{**common, "names": (*fld.names, "job.yaml")},
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=data,
            )
        elif entry == "api":
            yield Case(**common, api_data=_merge(_base_data(fld.name), fld.data(value)))


def control_cases() -> Iterator[Case]:
    """C0, DEL, C1, line separators and invalid UTF-8, appended to a valid value of every field."""
    classes = [("c0", C0), ("del", DEL), ("c1", C1), ("linesep", LINE_SEPARATORS)]
    for fld in TEXT_FIELDS:
        for value_class, chars in classes:
            for label, char in chars:
                value = fld.valid + char
                expect: Expect = "reject"
                if value_class == "linesep" and fld.name in PROGRAM_FIELDS:
                    expect = "either"
                entries = ["cli-render", "job-file", "api"]
                if label in ("lf", "u2028"):
                    entries.append("cli-submit")
                yield from _text_field_cases(value_class, label, value, expect, fld, entries)
        # A lone surrogate is how Python spells a byte that is not UTF-8 (os.fsdecode).
        for label, char in SURROGATE:
            value = fld.valid + char
            expect = "either" if fld.name in PROGRAM_FIELDS else "reject"
            yield from _text_field_cases(
                "surrogate", label, value, expect, fld, ["cli-render", "api"]
            )
        # In a job file, the same byte makes the file itself invalid.
        yield Case(
            entry="job-file",
            value_class="invalid-utf8",
            target=fld.name,
            label="ff",
            expect="reject",
            names=("job.yaml",),
            argv=("--site", "sandbox", "render", "-f", "job.yaml"),
            job_bytes=_yaml_with_raw(fld, b"\xff"),
            env=CONTAINER_ENV if fld.container else (),
        )


def _yaml_with_raw(fld: TextField, raw: bytes) -> bytes:
    """A job file whose value for ``fld`` carries ``raw`` bytes unescaped."""
    import yaml

    marker = "RAWMARKER"
    data = _merge(_base_data(fld.name), fld.data(fld.valid + marker))
    text = yaml.safe_dump(data, allow_unicode=True, default_flow_style=False, width=10**6)
    return text.encode().replace(marker.encode(), raw)


def raw_yaml_cases() -> Iterator[Case]:
    """Raw control bytes inside a job file (not YAML escapes)."""
    raws: list[tuple[str, bytes, Expect]] = [
        ("nul", b"\x00", "reject"),
        ("esc", b"\x1b", "reject"),
        ("del", b"\x7f", "reject"),
        ("cr", b"\r", "either"),
        ("nel", "\x85".encode(), "either"),
        ("u2028", "\u2028".encode(), "either"),
        ("csi", "\x9b".encode(), "reject"),
    ]
    for fld in TEXT_FIELDS:
        if fld.name not in ("name", "command", "env-value", "output_dir", "time"):
            continue
        for label, raw, expect in raws:
            yield Case(
                entry="job-file",
                value_class="raw-bytes",
                target=fld.name,
                label=label,
                expect=expect,
                names=("job.yaml", *fld.names),
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_bytes=_yaml_with_raw(fld, raw),
            )


def shell_nasty_cases() -> Iterator[Case]:
    """Shell metacharacters, #SBATCH breakouts and 100 KB values: accepted, byte for byte."""
    fields = {f.name: f for f in TEXT_FIELDS}
    for label, value in SHELL_NASTY + HUGE_TEXT:
        targets = ["command", "env-value"]
        if not label.startswith("100k"):
            targets += ["name", "checkpoint_dir"]
        for target in targets:
            fld = fields[target]
            v = "ck" + value if target == "checkpoint_dir" else value
            if target == "checkpoint_dir" and label == "tilde":
                v = "ck~"
            entries = ["cli-render", "job-file", "api"]
            if label in ("subst", "sbatch", "100k-shell"):
                entries.append("cli-submit")
            value_class = "huge-value" if label.startswith("100k") else "shell-meta"
            yield from _text_field_cases(value_class, label, v, "accept", fld, entries)
    for label, value in OVERSIZE_TEXT:
        for target in ("command", "env-value"):
            yield from _text_field_cases(
                "huge-value", label, value, "reject", fields[target], ["cli-render", "api"]
            )
    # An empty argument in the middle of the command is fine; an empty program is not.
    yield from _text_field_cases(
        "shell-meta", "empty-arg", "", "accept", fields["command"], ["cli-render", "api"]
    )


def trailing_newline_cases() -> Iterator[Case]:
    """Otherwise valid values followed by a newline (Python's ``$`` matches before it)."""
    specials = [
        ("signal", "USR2\n", ["--signal", "USR2\n"], {"requeue": {"signal": "USR2\n"}}),
        ("signal-at", "USR2@60\n", ["--signal", "USR2@60\n"], None),
        ("env-name", "FOO\n", ["-e", "FOO\n=1"], {"env": {"FOO\n": "1"}}),
        ("time", "10\n", ["-t", "10\n"], {"time": "10\n"}),
        ("time-days", "1-00:00\n", ["-t", "1-00:00\n"], {"time": "1-00:00\n"}),
        ("array", "0-3\n", ["--array", "0-3\n"], {"array": "0-3\n"}),
        (
            "dependency",
            "afterok:1\n",
            ["--dependency", "afterok:1\n"],
            {"dependency": "afterok:1\n"},
        ),
        ("partition", "batch\n", ["-p", "batch\n"], {"partition": "batch\n"}),
        ("account", "sandbox\n", ["-A", "sandbox\n"], {"account": "sandbox\n"}),
        ("template", "job\n", ["--template", "job\n"], {"template": "job\n"}),
        ("max-requeues", "10\n", ["--max-requeues", "10\n"], None),
        ("max-requeues-cause", "preemption=1\n", ["--max-requeues", "preemption=1\n"], None),
    ]
    names = {
        "signal": ("--signal", "signal"),
        "signal-at": ("--signal",),
        "env-name": ("-e", "--env", "env", "FOO"),
        "time": ("-t", "--time", "time"),
        "time-days": ("-t", "--time", "time"),
        "array": ("--array", "array"),
        "dependency": ("--dependency", "dependency"),
        "partition": ("-p", "--partition", "partition"),
        "account": ("-A", "--account", "account"),
        "template": ("--template", "template"),
        "max-requeues": ("--max-requeues",),
        "max-requeues-cause": ("--max-requeues",),
    }
    for target, value, args, data in specials:
        for entry in ("cli-render", "cli-submit"):
            yield Case(
                entry=entry,
                value_class="trailing-newline",
                target=target,
                label="lf",
                expect="reject",
                names=names[target],
                argv=_cli_argv(entry, target, args),
                value=value,
            )
        if data is not None:
            yield Case(
                entry="job-file",
                value_class="trailing-newline",
                target=target,
                label="lf",
                expect="reject",
                names=(*names[target], "job.yaml"),
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=_merge(_base_data(target), data),
                value=value,
            )
            yield Case(
                entry="api",
                value_class="trailing-newline",
                target=target,
                label="lf",
                expect="reject",
                names=names[target],
                api_data=_merge(_base_data(target), data),
                value=value,
            )


def number_cases() -> Iterator[Case]:
    """Non-ASCII digits, huge and negative numbers, and YAML values that are not whole numbers."""
    for fld in INT_FIELDS:
        for label, digit in NON_ASCII_DIGITS:
            expect: Expect = "either" if fld.int_flag else "reject"
            for entry in ("cli-render", "cli-submit"):
                yield Case(
                    entry=entry,
                    value_class="non-ascii-digits",
                    target=fld.name,
                    label=label,
                    expect=expect,
                    names=fld.names,
                    argv=_cli_argv(entry, fld.name, fld.args(digit)),
                )
            yield Case(
                entry="job-file",
                value_class="non-ascii-digits",
                target=fld.name,
                label=label,
                expect="either",
                names=(*fld.names, "job.yaml"),
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=_merge(_base_data(fld.name), fld.data(digit)),
            )
        for label, number in HUGE_INTS:
            yield Case(
                entry="cli-render",
                value_class="huge-int",
                target=fld.name,
                label=label,
                expect="reject",
                names=fld.names,
                argv=_cli_argv("cli-render", fld.name, fld.args(str(number))),
            )
            for entry in ("job-file", "api"):
                data = _merge(_base_data(fld.name), fld.data(number))
                yield Case(
                    entry=entry,
                    value_class="huge-int",
                    target=fld.name,
                    label=label,
                    expect="reject",
                    names=(*fld.names, "job.yaml") if entry == "job-file" else fld.names,
                    argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                    job_data=data if entry == "job-file" else None,
                    api_data=data if entry == "api" else None,
                )
        for label, value, expect in [
            *YAML_NOT_INTS,
            ("null", None, "either" if fld.optional else "reject"),
        ]:
            yield Case(
                entry="job-file",
                value_class="yaml-type",
                target=fld.name,
                label=label,
                expect=expect,  # type: ignore[arg-type]
                names=(*fld.names, "job.yaml"),
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=_merge(_base_data(fld.name), fld.data(value)),
            )
    # Text fields given YAML values that are not text.
    for key, data in [
        ("time", {"time": True}),
        ("time", {"time": 1.5}),
        ("name", {"name": True}),
        ("name", {"name": 123}),
        ("command", {"command": [*PROGRAM, 1.5]}),
        ("command", {"command": [*PROGRAM, None]}),
        ("env", {"env": {"X": True}}),
        ("env", {"env": {"X": None}}),
        ("env", {"env": {"X": 1.5}}),
        ("env", {"env": ["X=1"]}),
        ("requeue", {"requeue": "yes"}),
        ("container", {"container": "img"}),
    ]:
        value = repr(next(iter(data.values())))
        yield Case(
            entry="job-file",
            value_class="yaml-type",
            target=key,
            label="".join(c for c in value if c.isalnum())[:12] or "x",
            expect="reject",
            names=(key, "job.yaml"),
            argv=("--site", "sandbox", "render", "-f", "job.yaml"),
            job_data=_merge(_base_data(key), data),
        )


def signal_cases() -> Iterator[Case]:
    """Names that are attributes of Python's signal module but not signals a job can catch."""
    names = ("--signal", "signal", "requeue.signal", "HPCJOBS_REQUEUE_SIGNAL")
    for sig in SIGNALS:
        label = sig.strip("_").lower().replace("+", "plus") or sig
        for entry in ("cli-render", "cli-submit"):
            yield Case(
                entry=entry,
                value_class="signal",
                target="signal",
                label=label,
                expect="reject",
                names=names,
                argv=_cli_argv(entry, "signal", ["--signal", f"{sig}@30"]),
            )
        for entry in ("job-file", "api"):
            data = _merge(_base_data("signal"), {"requeue": {"signal": sig}})
            yield Case(
                entry=entry,
                value_class="signal",
                target="signal",
                label=label,
                expect="reject",
                names=(*names, "job.yaml") if entry == "job-file" else names,
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=data if entry == "job-file" else None,
                api_data=data if entry == "api" else None,
            )
        yield Case(
            entry="env",
            value_class="signal",
            target="HPCJOBS_REQUEUE_SIGNAL",
            label=label,
            expect="reject",
            names=("HPCJOBS_REQUEUE_SIGNAL",),
            argv=_cli_argv("cli-render", "", []),
            env=(("HPCJOBS_REQUEUE_SIGNAL", sig),),
        )
        yield Case(
            entry="site-file",
            value_class="signal",
            target="requeue.signal",
            label=label,
            expect="reject",
            names=("requeue.signal", "site.yaml"),
            site_patch=(("requeue.signal", sig),),
            extra={"command": "render"},
        )
        yield Case(
            entry="executor",
            value_class="signal",
            target="signal",
            label=label,
            expect="reject",
            names=("signal",),
            executor_params={"signal": sig},
        )


def env_name_cases() -> Iterator[Case]:
    """Variables that change how bash itself behaves, and names reserved for Slurm or hpcjobs."""
    for group, names in (
        ("shell-env-name", SHELL_ENV_NAMES),
        ("reserved-env-name", RESERVED_ENV_NAMES),
    ):
        for name in names:
            label = "".join(c if c.isalnum() else "_" for c in name).strip("_").lower() or "x"
            value = f"$(touch {CANARY})" if name != "BASH_ENV" else CANARY
            err_names = ("-e", "--env", "env", name.strip())
            yield Case(
                entry="cli-render",
                value_class=group,
                target="env-name",
                label=label,
                expect="reject",
                names=err_names,
                argv=_cli_argv("cli-render", "env", ["-e", f"{name}={value}"]),
            )
            for entry in ("job-file", "api"):
                data = _merge(_base_data("env"), {"env": {name: value}})
                yield Case(
                    entry=entry,
                    value_class=group,
                    target="env-name",
                    label=label,
                    expect="reject",
                    names=err_names,
                    argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                    job_data=data if entry == "job-file" else None,
                    api_data=data if entry == "api" else None,
                )
            yield Case(
                entry="executor",
                value_class=group,
                target="env",
                label=label,
                expect="reject",
                names=("env", name.strip()),
                executor_params={"env": {name: value}},
            )


HPCJOBS_VARS = {
    "HPCJOBS_ACCOUNT": "sandbox",
    "HPCJOBS_QOS": "normal",
    "HPCJOBS_TIME": "10",
    "HPCJOBS_OUTPUT_DIR": "run",
    "HPCJOBS_PARTITION": "batch",
    "HPCJOBS_NCCL_PROFILE": "sandbox",
    "HPCJOBS_CONTAINER_RUNTIME": "pyxis",
    "HPCJOBS_CONTAINER_IMAGE": "img",
    "HPCJOBS_REQUEUE_SIGNAL": "USR2",
    "HPCJOBS_REQUEUE_LEAD_TIME": "60",
}


def env_var_cases() -> Iterator[Case]:
    """HPCJOBS_* overrides of the site config with hostile values."""
    chars = [("lf", "\n"), ("cr", "\r"), ("esc", "\x1b[31m"), ("tab", "\t"), ("del", "\x7f")]
    chars += [
        ("csi", "\x9b31m"),
        ("nel", "\x85"),
        ("u2028", "\u2028"),
        ("surrogate", SURROGATE[0][1]),
    ]
    for var, valid in HPCJOBS_VARS.items():
        for label, char in chars:
            value_class = {
                "csi": "c1",
                "nel": "c1",
                "u2028": "linesep",
                "surrogate": "surrogate",
            }.get(label, "del" if label == "del" else "c0")
            env = [(var, valid + char)]
            if var == "HPCJOBS_CONTAINER_IMAGE":
                env.append(("HPCJOBS_CONTAINER_RUNTIME", "pyxis"))
            yield Case(
                entry="env",
                value_class=value_class,
                target=var,
                label=label,
                expect="reject",
                names=(var,),
                argv=_cli_argv(
                    "cli-render", "output_dir" if var == "HPCJOBS_OUTPUT_DIR" else "", []
                ),
                env=tuple(env),
                value=valid + char,
            )
    for var, values in {
        "HPCJOBS_TIME": [
            ("arabic", "١٠"),
            ("fullwidth", "１０"),
            ("superscript", "²"),
            ("huge", str(10**30)),
        ],
        "HPCJOBS_REQUEUE_LEAD_TIME": [
            ("arabic", "٦٠"),
            ("fullwidth", "６０"),
            ("superscript", "²"),
            ("2pow63", str(2**63)),
            ("1e30", str(10**30)),
            ("negative", "-1"),
            ("float", "1.5"),
            ("true", "true"),
        ],
    }.items():
        for label, value in values:
            yield Case(
                entry="env",
                value_class="non-ascii-digits"
                if label in ("arabic", "fullwidth", "superscript")
                else "huge-int",
                target=var,
                label=label,
                expect="reject",
                names=(var,),
                argv=_cli_argv("cli-render", "", []),
                env=((var, value),),
                value=value,
            )


SITE_KEYS = {
    "slurm.account": "sandbox",
    "slurm.time": "00:10:00",
    "slurm.output_dir": "run/{job_name}",
    "defaults.partition": "batch",
    "partitions.0.name": "batch",
    "partitions.0.gpu_type": "h100",
    "requeue.signal": "USR2",
    "setup.container.image": "img",
    "nccl_profiles.sandbox.env.NCCL_SOCKET_IFNAME": "lo",
    "topologies.sandbox-node.bootstrap_interface": "lo",
    "topologies.sandbox-node.nics.0.name": "mlx5_0",
    "setup.modules": ["cuda"],
}


def site_file_cases() -> Iterator[Case]:
    """A site file with a hostile value at one key, through validate and --site FILE render."""
    chars = [
        ("lf", "\n"),
        ("esc", "\x1b[31m"),
        ("del", "\x7f"),
        ("csi", "\x9b31m"),
        ("u2028", "\u2028"),
    ]
    for key, valid in SITE_KEYS.items():
        for label, char in chars:
            value_class = {"csi": "c1", "u2028": "linesep", "del": "del"}.get(label, "c0")
            value: Any = [valid[0] + char] if isinstance(valid, list) else valid + char
            patch: list[tuple[str, Any]] = [(key, value)]
            if key == "setup.container.image":
                patch.append(("setup.container.runtime", "pyxis"))
            if key == "partitions.0.name":
                patch.append(("defaults.partition", value))
            key_name = key
            dotted = key_name.replace(".0.", "[0].")
            for command in ("validate", "render"):
                yield Case(
                    entry="site-file",
                    value_class=value_class,
                    target=f"{key}-{command}",
                    label=label,
                    expect="reject",
                    names=(dotted, key_name, "site.yaml"),
                    site_patch=tuple(patch),
                    extra={"command": command},
                )
    # Raw bytes in the site file itself.
    for label, raw in [
        ("nul", b"\x00"),
        ("esc", b"\x1b"),
        ("ff", b"\xff"),
        ("csi", "\x9b".encode()),
    ]:
        for command in ("validate", "render"):
            yield Case(
                entry="site-file",
                value_class="raw-bytes",
                target=f"slurm.account-{command}",
                label=label,
                expect="reject",
                names=("site.yaml",),
                site_bytes=raw,
                extra={"command": command},
            )


def empty_command_cases() -> Iterator[Case]:
    """An empty program name (``-- ""``) in every form."""
    names = ("command",)
    for label, args in [("empty", [""]), ("empty-then-arg", ["", "x"]), ("blank", [" "])]:
        for entry in ("cli-render", "cli-submit"):
            yield Case(
                entry=entry,
                value_class="empty-command",
                target="command",
                label=label,
                expect="reject",
                names=names,
                argv=_cli_argv(entry, "command", ["--", *args]),
            )
    for label, command in [
        ("empty-text", ""),
        ("blank-text", "   "),
        ("quoted-empty", "''"),
        ("empty-item", [""]),
        ("empty-list", []),
        ("empty-then-arg", ["", "x"]),
    ]:
        for entry in ("job-file", "api"):
            data = _merge(_base_data("command"), {"command": command})
            yield Case(
                entry=entry,
                value_class="empty-command",
                target="command",
                label=label,
                expect="reject",
                names=(*names, "job.yaml") if entry == "job-file" else names,
                argv=("--site", "sandbox", "render", "-f", "job.yaml"),
                job_data=data if entry == "job-file" else None,
                api_data=data if entry == "api" else None,
            )


def container_cases() -> Iterator[Case]:
    """Container images and mounts that start with '-' (they would be read as options)."""
    names = ("--container-image", "container.image", "image", "HPCJOBS_CONTAINER_IMAGE")
    for runtime in ("pyxis", "enroot", "apptainer"):
        for label, image in [
            ("dash", "-x"),
            ("help", "--help"),
            ("bind", "--bind=/:/host"),
            ("lone", "-"),
        ]:
            env = (("HPCJOBS_CONTAINER_RUNTIME", runtime),)
            yield Case(
                entry="cli-render",
                value_class="container-dash",
                target=f"image-{runtime}",
                label=label,
                expect="reject",
                names=names,
                argv=_cli_argv("cli-render", "", ["--container-image", image]),
                env=env,
            )
            yield Case(
                entry="env",
                value_class="container-dash",
                target=f"HPCJOBS_CONTAINER_IMAGE-{runtime}",
                label=label,
                expect="reject",
                names=names,
                argv=_cli_argv("cli-render", "", []),
                env=(*env, ("HPCJOBS_CONTAINER_IMAGE", image)),
            )
        yield Case(
            entry="job-file",
            value_class="container-dash",
            target=f"image-{runtime}",
            label="dash",
            expect="reject",
            names=(*names, "job.yaml"),
            argv=("--site", "sandbox", "render", "-f", "job.yaml"),
            env=(("HPCJOBS_CONTAINER_RUNTIME", runtime),),
            job_data=_merge(_base_data(""), {"container": {"image": "-x"}}),
        )
        if runtime != "pyxis":
            yield Case(
                entry="cli-render",
                value_class="container-dash",
                target=f"mount-{runtime}",
                label="dash",
                expect="reject",
                names=("--container-mount", "container.mounts", "mount"),
                argv=_cli_argv(
                    "cli-render", "", ["--container-image", "img", "--container-mount", "-x"]
                ),
                env=(("HPCJOBS_CONTAINER_RUNTIME", runtime),),
            )


def executor_cases() -> Iterator[Case]:
    """hpcjobs.executor(...) parameters (the executor renders a job to check them)."""
    params = {
        "job_name": "job",
        "partition": "batch",
        "time": "10",
        "account": "sandbox",
        "qos": "normal",
        "comment": "c",
        "mem": "1G",
        "constraint": "x",
        "mail_user": "a@b.c",
        "dependency": "afterok:1",
        "checkpoint_dir": "ck",
    }
    for name, valid in params.items():
        for label, char in [("lf", "\n"), ("esc", "\x1b"), ("csi", "\x9b"), ("u2028", "\u2028")]:
            value_class = {"csi": "c1", "u2028": "linesep"}.get(label, "c0")
            yield Case(
                entry="executor",
                value_class=value_class,
                target=name,
                label=label,
                expect="reject",
                names=(name, name.replace("_", "-"), *(("name",) if name == "job_name" else ())),
                executor_params={name: valid + char},
            )
    for name in ("nodes", "signal_delay_s", "max_requeues", "cpus_per_task"):
        for label, number in HUGE_INTS:
            yield Case(
                entry="executor",
                value_class="huge-int",
                target=name,
                label=label,
                expect="reject",
                names=(
                    name,
                    {"signal_delay_s": "lead_time", "max_requeues": "max_total"}.get(name, name),
                ),
                executor_params={name: number},
            )
    for label, value in [
        ("env-lf", {"X": "a\nb"}),
        ("env-esc", {"X": "a\x1bb"}),
        ("extra-lf", None),
    ]:
        params_value: dict[str, Any] = (
            {"env": value} if value is not None else {"additional_parameters": {"comment": "a\nb"}}
        )
        yield Case(
            entry="executor",
            value_class="c0",
            target=label.split("-")[0],
            label=label,
            expect="reject",
            names=("env", "X", "additional_parameters", "comment"),
            executor_params=params_value,
        )
    for label, value in SHELL_NASTY[:8]:
        yield Case(
            entry="executor",
            value_class="shell-meta",
            target="env",
            label=label,
            expect="accept",
            names=("env",),
            executor_params={"env": {"NASTY_VALUE": value}},
        )


CHUNK_SEPARATORS = [
    ("u2028", "\u2028"),
    ("u2029", "\u2029"),
    ("nel", "\x85"),
    ("fs", "\x1c"),
    ("gs", "\x1d"),
    ("rs", "\x1e"),
    ("vt", "\x0b"),
    ("ff", "\x0c"),
]


def chunk_cases() -> Iterator[Case]:
    """A line separator then a command, in a value that lands in the script's header comments,
    together with an array larger than MaxArraySize: the chunk scripts must not run it."""
    for target in ("name", "output_dir", "chdir"):
        for label, sep in CHUNK_SEPARATORS:
            value = f"x{sep}touch {CANARY}{sep}"
            if target != "name":
                value = "d" + value
            yield Case(
                entry="api-chunks",
                value_class="linesep-chunk" if sep in "\u2028\u2029\x85" else "c0-chunk",
                target=target,
                label=label,
                expect="either",
                names=(target, target.replace("_", "-")),
                api_data=_merge(_base_data(target), {target: value, "array": "0-2500"}),
                value=value,
            )


def special_file_cases() -> Iterator[Case]:
    """Files that are not job or site files: a FIFO, /dev/zero, a folder, >4 MiB, YAML bombs."""
    specials = ["fifo", "devzero", "directory", "big", "deep", "alias-bomb", "alias-bomb-x"]
    for special in specials:
        for entry, command in (
            ("job-file", "render"),
            ("site-file", "validate"),
            ("site-file", "render"),
        ):
            if special == "alias-bomb" and entry == "site-file":
                continue
            if special == "alias-bomb-x" and entry == "job-file":
                continue
            yield Case(
                entry=entry,
                value_class="special-file",
                target=f"{'-f' if entry == 'job-file' else command}",
                label=special,
                expect="reject",
                names=("hostile.yaml", "/dev/zero"),
                special=special,
                process=True,
                extra={"command": command},
            )


def format_spec_cases() -> Iterator[Case]:
    """str.format fields in the site's output_dir (HPCJOBS_OUTPUT_DIR or the site file)."""
    for label, spec in FORMAT_SPECS:
        yield Case(
            entry="env",
            value_class="format-spec",
            target="HPCJOBS_OUTPUT_DIR",
            label=label,
            expect="either",
            names=("HPCJOBS_OUTPUT_DIR", "output_dir"),
            env=(("HPCJOBS_OUTPUT_DIR", spec),),
            process=True,
            extra={"command": "render"},
            value=spec,
        )
        for command in ("validate", "render"):
            yield Case(
                entry="site-file",
                value_class="format-spec",
                target=f"slurm.output_dir-{command}",
                label=label,
                expect="either" if command == "render" else "reject",
                names=("slurm.output_dir", "output_dir"),
                site_patch=(("slurm.output_dir", spec),),
                process=True,
                extra={"command": command},
                value=spec,
            )


def argv_bytes_cases() -> Iterator[Case]:
    """Arguments that are not UTF-8, given to a real ``hpcjobs`` process."""
    rows: list[tuple[str, list[bytes], Expect, tuple[str, ...], Reaches]] = [
        ("name", [b"-J", b"a\xffb"], "reject", ("-J", "--job-name", "name"), "none"),
        (
            "output_dir",
            [b"--output-dir", b"run\xff"],
            "reject",
            ("--output-dir", "output_dir"),
            "none",
        ),
        ("time", [b"-t", b"10\xff"], "reject", ("-t", "--time", "time"), "none"),
        (
            "env-value",
            [b"-e", b"NASTY_VALUE=a\xffb"],
            "either",
            ("-e", "env", "NASTY_VALUE"),
            "env",
        ),
        (
            "command",
            [b"--", b"@PY@", b"@REPORTER@", b"@OUT@", b"a\xffb"],
            "either",
            ("command",),
            "arg",
        ),
    ]
    for target, tail, expect, names, reaches in rows:
        value = (
            os.fsdecode(tail[-1].split(b"=", 1)[-1])
            if target != "command"
            else os.fsdecode(tail[-1])
        )
        yield Case(
            entry="process",
            value_class="invalid-utf8",
            target=target,
            label="ff",
            expect=expect,
            names=names,
            argv_bytes=tuple(tail),
            process=True,
            reaches=reaches,
            value=value,
        )


def all_cases() -> list[Case]:
    """The whole corpus, ids unique."""
    cases = [
        *control_cases(),
        *raw_yaml_cases(),
        *shell_nasty_cases(),
        *trailing_newline_cases(),
        *number_cases(),
        *signal_cases(),
        *env_name_cases(),
        *env_var_cases(),
        *site_file_cases(),
        *empty_command_cases(),
        *container_cases(),
        *executor_cases(),
        *chunk_cases(),
        *special_file_cases(),
        *format_spec_cases(),
        *argv_bytes_cases(),
    ]
    seen: dict[str, int] = {}
    unique = []
    for case in cases:
        n = seen.get(case.id, 0)
        seen[case.id] = n + 1
        if n:
            case = Case(**{**case.__dict__, "label": f"{case.label}{n + 1}"})
        unique.append(case)
    return unique
