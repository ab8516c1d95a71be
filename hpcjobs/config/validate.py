"""Validate site config data and files, collecting every problem instead of stopping at one.

A render loads this module; only pinned host keys need :mod:`hpcjobs.remote.hostkeys`, imported
where they are checked.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from hpcjobs.config.models import SiteConfig
from hpcjobs.config.problems import KeyPath, Problem, dotted, unknown_key
from hpcjobs.config.semantics import Finding, check_site_data
from hpcjobs.config.yamlfile import read_yaml_file
from hpcjobs.errors import BadInputError
from hpcjobs.remote.hostspec import login_key_names
from hpcjobs.safetext import is_safe

#: Maps a key path to the (file, line) it came from.
Locator = Callable[[KeyPath], tuple[str | None, int | None]]

#: pydantic's names for the inner steps of a schema in an error's location (a string:
#: compiled on first use, only for an invalid config).
_SCHEMA_TAG = (
    r"^(constrained-[a-z]+|"
    r"(function-[a-z]+|json-or-python|lax-or-strict|tagged-union|union|chain)\[.*)$"
)
_TYPE_ERRORS_WITH_INPUT = (
    "_type",
    "_parsing",
    "literal_error",
    "enum",
    "greater_than",
    "less_than",
)


class ValidationReport:
    """The outcome of validating one config: the model when valid, and all problems."""

    def __init__(
        self, source: str, config: SiteConfig | None = None, problems: list[Problem] | None = None
    ) -> None:
        self.source = source
        self.config = config
        self.problems: list[Problem] = problems if problems is not None else []

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.is_error]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if not p.is_error]

    @property
    def ok(self) -> bool:
        return self.config is not None and not self.errors


def validate_data(data: Mapping[str, Any]) -> tuple[SiteConfig | None, list[Finding]]:
    """Validate merged site config data: schema first, then every cross-value check.

    Top-level keys starting with ``x-`` are ignored: they hold YAML anchors for reuse.

    Args:
        data: The site config mapping.

    Returns:
        The model (None when there are errors) and every finding, errors and warnings.
    """
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    findings: list[Finding] = []
    config: SiteConfig | None = None
    try:
        config = SiteConfig.model_validate(data)
    except ValidationError as exc:
        findings.extend(schema_findings(exc))
    findings.extend(check_site_data(data))
    findings.extend(ssh_findings(data))
    if any(f.severity == "error" for f in findings):
        config = None
    return config, _dedupe(findings)


def ssh_findings(data: Mapping[str, Any]) -> list[Finding]:
    """``login_hosts`` and ``host_keys`` checked as connecting would check them.

    A login host must be one that ``--host`` accepts, and every pinned key must parse the way
    :func:`~hpcjobs.remote.hostkeys.parse_pinned` parses it when a connection is made, so that a
    site config that validates never fails later for these keys. Values of the wrong type, or
    with control characters, are left to the schema's own messages.
    """
    if not data.get("login_hosts") and not data.get("host_keys"):
        return []  # nothing to check

    findings: list[Finding] = []
    hosts = data.get("login_hosts")
    names: list[str] = []
    have_hosts = False
    for index, host in enumerate(hosts if isinstance(hosts, list) else []):
        if not isinstance(host, str) or not host or not is_safe(host):
            continue
        have_hosts = True
        try:
            names += login_key_names([host])
        except BadInputError as exc:
            hint = f" ({exc.hint})" if exc.hint else ""
            findings.append(
                Finding(("login_hosts", index), f"--host would refuse it: {exc.message}{hint}")
            )
    if have_hosts and not names:
        names = ["login-host"]  # every login host is invalid (reported above): still check keys
    keys = data.get("host_keys")
    if not keys or not isinstance(keys, list):
        return findings
    from hpcjobs.remote.hostkeys import parse_pinned_line

    for index, line in enumerate(keys):
        if not isinstance(line, str) or not is_safe(line):
            continue
        try:
            parse_pinned_line(line, names, f"host_keys.{index}")
        except ValueError as exc:
            findings.append(Finding(("host_keys", index), f"not a valid known_hosts line: {exc}"))
    return findings


def schema_findings(
    exc: ValidationError, model: type[BaseModel] = SiteConfig, *, noun: str = "key"
) -> list[Finding]:
    """Turn pydantic errors into findings with key paths and did-you-mean hints: the one reading
    of pydantic's errors, for site configs and job specs alike (``noun``: what an unknown one
    is called, ``key`` or ``field``)."""
    findings: list[Finding] = []
    for err in exc.errors(include_url=False):
        loc: list[str | int] = [p for p in err["loc"] if not _is_schema_tag(p)]
        kind = err["type"]
        if loc and loc[-1] == "[key]":
            loc.pop()
            message = (
                f"invalid key {loc[-1]!r}: {_clean(err['msg'])}" if loc else _clean(err["msg"])
            )
        elif kind == "extra_forbidden":
            message = unknown_key(str(loc[-1]), fields_at(model, tuple(loc[:-1])), noun=noun)
        elif kind == "missing":
            message = (
                f"required {noun} {loc[-1]!r} is missing"
                if loc
                else f"a required {noun} is missing"
            )
        else:
            message = _clean(err["msg"])
            if any(tag in kind for tag in _TYPE_ERRORS_WITH_INPUT):
                message += f" (got {_preview(err.get('input'))})"
        findings.append(Finding(tuple(loc), message))
    return findings


def to_problems(findings: list[Finding], locate: Locator) -> list[Problem]:
    """Attach file and line to each finding."""
    problems = []
    for finding in findings:
        file, line = locate(finding.path)
        problems.append(
            Problem(finding.message, dotted(finding.path), file, line, severity=finding.severity)
        )
    return problems


def validate_site_file(path: Path, *, source: str | None = None) -> ValidationReport:
    """Validate one site config file on its own (no user file or environment layered on top).

    Args:
        path: The YAML file.
        source: How to name the file in messages (default: the path as given).

    Returns:
        The report; ``report.ok`` says whether the file is valid.
    """
    doc = read_yaml_file(path, source=source)
    report = ValidationReport(doc.source, problems=list(doc.problems))
    if doc.data is None or not isinstance(doc.data, dict):
        return report
    config, findings = validate_data(doc.data)
    report.problems.extend(to_problems(findings, lambda p: (doc.source, doc.line_of(p))))
    report.problems.sort(key=lambda p: (p.line or 0, p.severity != "error"))
    report.config = config if not report.errors else None
    return report


def fields_at(model: type[BaseModel], loc: KeyPath) -> set[str]:
    """The keys allowed in the mapping at ``loc`` inside ``model``."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = current.model_fields.get(str(part))
            if info is None:
                return set()
            current = info.annotation
            continue
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if origin is list and args:
            current = args[0]
        elif origin is dict and len(args) == 2:
            current = args[1]
        else:
            return set()
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return set(current.model_fields)
    return set()


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def _is_schema_tag(part: str | int) -> bool:
    """Pydantic inserts tags such as ``function-after[...]`` or ``nullable`` into some paths."""
    return isinstance(part, str) and bool(re.match(_SCHEMA_TAG, part))


def _clean(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[tuple[KeyPath, str]] = set()
    unique = []
    for finding in findings:
        mark = (finding.path, finding.message)
        if mark not in seen:
            seen.add(mark)
            unique.append(finding)
    return unique
