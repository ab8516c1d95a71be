"""Load a site config: find it, layer it, validate it, and remember where each value came from.

Layers, lowest to highest precedence:

1. built-in defaults (:data:`BUILTIN_DEFAULTS`),
2. the site file,
3. the user file ``~/.config/hpcjobs/config.yaml`` (its top-level keys, then ``sites.<name>``),
4. ``HPCJOBS_*`` environment variables (:data:`ENV_KEYS`),
5. command-line flags (``overrides``).

Mappings merge key by key; lists and scalars replace the lower layer's value as a whole.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from hpcjobs.config.locate import locate_site, select_site_for_host, user_config_file
from hpcjobs.config.models import Requeue, Setup, SiteConfig, SlurmDefaults
from hpcjobs.config.problems import InvalidConfigError, KeyPath, Problem, dotted, suggest
from hpcjobs.config.validate import to_problems, validate_data
from hpcjobs.config.yamlfile import YamlDoc, read_yaml_file
from hpcjobs.errors import ConfigError
from hpcjobs.safetext import parse_int

#: A list index in a dotted key (a string: compiled on first use, see safetext.check_pattern).
_INDEX = r"[0-9]{1,9}"

#: The lowest layer: values every site gets unless its file says otherwise.
#: Taken from the models' own defaults (config/models.py), so that each is written once; the
#: layer exists so that ``site show`` can say a value is built in.
BUILTIN_DEFAULTS: dict[str, Any] = {
    "slurm": SlurmDefaults().model_dump(include={"time", "output_dir"}),
    "setup": Setup().model_dump(include={"modules": True, "lines": True, "container": {"runtime"}}),
    "requeue": Requeue().model_dump(),
}

#: Environment variables layered over the user file: name -> (key path, value type).
ENV_KEYS: dict[str, tuple[KeyPath, type]] = {
    "HPCJOBS_ACCOUNT": (("slurm", "account"), str),
    "HPCJOBS_QOS": (("slurm", "qos"), str),
    "HPCJOBS_TIME": (("slurm", "time"), str),
    "HPCJOBS_OUTPUT_DIR": (("slurm", "output_dir"), str),
    "HPCJOBS_PARTITION": (("defaults", "partition"), str),
    "HPCJOBS_NCCL_PROFILE": (("defaults", "nccl_profile"), str),
    "HPCJOBS_CONTAINER_RUNTIME": (("setup", "container", "runtime"), str),
    "HPCJOBS_CONTAINER_IMAGE": (("setup", "container", "image"), str),
    "HPCJOBS_REQUEUE_SIGNAL": (("requeue", "signal"), str),
    "HPCJOBS_REQUEUE_LEAD_TIME": (("requeue", "lead_time"), int),
}

#: Top-level keys a user file may set. ``site`` picks the default site; ``sites.<name>`` holds
#: overrides for one site only.
USER_KEYS = frozenset({"site", "sites", "slurm", "defaults", "setup", "requeue", "nccl_profiles"})
_USER_OVERLAY_KEYS = USER_KEYS - {"site", "sites"}


class Origin(NamedTuple):
    """Where a value came from: a file and line, an environment variable, a flag or a default."""

    label: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.file is None:
            return self.label
        return f"file:{self.file}" + (f":{self.line}" if self.line else "")


DEFAULT_ORIGIN = Origin("default")
BUILTIN_ORIGIN = Origin("built-in")
COMMAND_LINE_ORIGIN = Origin("command line")


class LoadedSite(NamedTuple):
    """A validated site config plus the origin of every value and the warnings found."""

    config: SiteConfig
    path: Path
    origins: dict[KeyPath, Origin]
    warnings: list[Problem]
    user_file: Path | None = None

    def origin_of(self, key: str | KeyPath) -> Origin:
        """The layer that set ``key`` (dotted string or path); ``default`` when none did."""
        path = _parse_key(key) if isinstance(key, str) else tuple(key)
        return self.origins.get(path, DEFAULT_ORIGIN)

    def items_with_origin(self) -> list[tuple[str, Any, Origin]]:
        """Every leaf value of the resolved config as ``(dotted key, value, origin)``."""
        data = self.config.model_dump(mode="json")
        rows: list[tuple[str, Any, Origin]] = []
        for path, value in _leaves(data, ()):
            rows.append((dotted(path), value, self.origin_of(path)))
        return rows


class _Merged:
    """The layers merged so far, and the origin of each key path."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.origins: dict[KeyPath, Origin] = {}

    def apply(
        self, layer: Mapping[str, Any], origin_at: Callable[[KeyPath], Origin], base: KeyPath = ()
    ) -> None:
        """Merge ``layer`` (found at ``base`` in its own file) over the data so far."""
        _merge_into(self.data, layer, (), base, self.origins, origin_at)

    def locate(self, path: KeyPath) -> tuple[str | None, int | None]:
        for end in range(len(path), -1, -1):
            origin = self.origins.get(path[:end])
            if origin is not None:
                return (origin.file or origin.label, origin.line)
        return (None, None)


def load_site(
    value: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    user_file: Path | None = None,
    hostname: str | None = None,
) -> SiteConfig:
    """Find, layer and validate a site config.

    Args:
        value: A site name or path (as given to ``--site``); None selects the user file's
            ``site`` key, else the site whose ``hostnames`` match this host.
        overrides: Command-line values by dotted key (``{"slurm.account": "proj"}``), the
            highest layer.
        environ: The environment for ``HPCJOBS_*`` variables (default: ``os.environ``).
        user_file: The user config file (default: ``~/.config/hpcjobs/config.yaml``).
        hostname: The hostname to match when ``value`` is None (default: this machine's).

    Returns:
        The validated config.

    Raises:
        ConfigError: The site cannot be found, read or parsed, or it is invalid; the message
            names file, line and dotted key of every problem.
    """
    return load_site_layers(
        value, overrides=overrides, environ=environ, user_file=user_file, hostname=hostname
    ).config


def load_site_layers(
    value: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    user_file: Path | None = None,
    hostname: str | None = None,
) -> LoadedSite:
    """Like :func:`load_site`, but also return the origin of each value and the warnings."""
    env = os.environ if environ is None else environ
    user_path = user_file if user_file is not None else user_config_file()
    user_doc = _read_user_file(user_path)
    path = resolve_site(value, user_doc, hostname)
    site_doc = read_yaml_file(path, source=str(path))
    if site_doc.problems and any(p.is_error for p in site_doc.problems):
        raise InvalidConfigError(str(path), site_doc.problems)
    site_data: dict[str, Any] = site_doc.data

    merged = _Merged()
    merged.apply(BUILTIN_DEFAULTS, _constant(BUILTIN_ORIGIN))
    merged.apply(site_data, _file_origin(site_doc))
    if user_doc is not None:
        _apply_user_layer(merged, user_doc, _site_name(site_data, path))
    env_problems = _apply_env_layer(merged, env)
    if overrides:
        for key, item in overrides.items():
            path_key = _parse_key(key)
            if any(isinstance(part, int) for part in path_key):
                raise ConfigError(f"cannot override {key!r}: only mapping keys can be overridden")
            merged.apply(_nest(path_key, item), _constant(COMMAND_LINE_ORIGIN))

    config, findings = validate_data(merged.data)
    problems = env_problems + to_problems(findings, merged.locate)
    errors = [p for p in problems if p.is_error]
    if errors or config is None:
        raise _invalid(str(path), problems, env, overrides or {})
    return LoadedSite(
        config,
        path,
        merged.origins,
        warnings=[p for p in problems if not p.is_error],
        user_file=user_path if user_doc is not None else None,
    )


def _invalid(
    source: str, problems: list[Problem], env: Mapping[str, str], overrides: Mapping[str, Any]
) -> InvalidConfigError:
    """The error for an invalid merged config, blaming the layer each bad value came from.

    A bad value from an ``HPCJOBS_*`` variable or a command-line override is reported under
    that variable's (or key's) name with a hint to fix or unset it, not as a fault of the site
    file, which ``hpcjobs site validate`` would call fine.
    """
    errors = [p for p in problems if p.is_error]
    blamed = {id(p): label for p in errors if (label := _override_label(p, env, overrides))}
    if not blamed:
        return InvalidConfigError(source, problems)
    culprits = list(dict.fromkeys(label for label in blamed.values()))
    names = ", ".join(label.split("=", 1)[0] for label in culprits)
    fix = f"fix or unset {names} (they override the site config)"
    if len(culprits) == 1:
        fix = f"fix or unset {names} (it overrides the site config)"
    if len(blamed) == len(errors) and len(errors) == 1:
        (only,) = errors
        return InvalidConfigError(
            source, problems, message=f"{blamed[id(only)]}: {only.key}: {only.message}", hint=fix
        )
    lines = "\n".join(
        f"  {blamed[id(p)]}: {p.key}: {p.message}" if id(p) in blamed else f"  {p.format()}"
        for p in errors
    )
    if len(blamed) == len(errors):
        message = f"{len(errors)} invalid values from the environment or command line:\n{lines}"
        return InvalidConfigError(source, problems, message=message, hint=fix)
    message = f"site config {source} is invalid ({len(errors)} problems):\n{lines}"
    hint = f"{fix}; fix the other keys, then run 'hpcjobs site validate {source}'"
    return InvalidConfigError(source, problems, message=message, hint=hint)


def _override_label(
    problem: Problem, env: Mapping[str, str], overrides: Mapping[str, Any]
) -> str | None:
    """``HPCJOBS_TIME='abc'`` or ``slurm.time='abc' (command line)``; None for a file's value."""
    where = problem.file or ""
    if where.startswith("env:"):
        name = where.removeprefix("env:")
        return f"{name}={env.get(name, '')!r}"
    if where == COMMAND_LINE_ORIGIN.label:
        for key, value in overrides.items():
            if problem.key == key or problem.key.startswith(f"{key}."):
                return f"{key}={value!r} (command line)"
        return "command line"
    return None


def resolve_site(
    value: str | Path | None, user_doc: YamlDoc | None = None, hostname: str | None = None
) -> Path:
    """The site file for ``value``: a name or path, else the user file's ``site``, else by host.

    Raises:
        ConfigError: Nothing matches.
    """
    if value is not None and str(value) != "":
        return locate_site(value)
    if user_doc is not None and isinstance(user_doc.data, dict):
        chosen = user_doc.data.get("site")
        if isinstance(chosen, str) and chosen:
            return locate_site(chosen)
    return select_site_for_host(hostname)


def _read_user_file(path: Path) -> YamlDoc | None:
    """The user file, or None when it does not exist. Raises when it is broken."""
    if not path.exists():
        return None
    doc = read_yaml_file(path, source=str(path))
    if not doc.ok:
        raise InvalidConfigError(
            str(path), doc.problems, hint=f"fix or remove the user config file {path}"
        )
    problems: list[Problem] = []
    data = doc.data
    for key in data:
        if key not in USER_KEYS:
            problems.append(
                doc.problem(
                    f"unknown key {key!r} in a user config{suggest(str(key), USER_KEYS)} "
                    f"(allowed: {', '.join(sorted(USER_KEYS))})",
                    (key,),
                )
            )
    if "site" in data and data["site"] is not None and not isinstance(data["site"], str):
        problems.append(doc.problem("must be a site name or path", ("site",)))
    sites = data.get("sites")
    if sites is not None and not isinstance(sites, dict):
        problems.append(doc.problem("must be a mapping of site name to overrides", ("sites",)))
    elif isinstance(sites, dict):
        for name, overlay in sites.items():
            if not isinstance(overlay, dict):
                problems.append(doc.problem("must be a mapping of keys", ("sites", name)))
                continue
            for key in overlay:
                if key not in _USER_OVERLAY_KEYS:
                    allowed = ", ".join(sorted(_USER_OVERLAY_KEYS))
                    problems.append(
                        doc.problem(
                            f"unknown key {key!r}{suggest(str(key), _USER_OVERLAY_KEYS)} "
                            f"(allowed: {allowed})",
                            ("sites", name, key),
                        )
                    )
    if problems:
        raise InvalidConfigError(
            str(path), problems, hint=f"fix or remove the user config file {path}"
        )
    return doc


def _apply_user_layer(merged: _Merged, doc: YamlDoc, site_name: str) -> None:
    data: dict[str, Any] = doc.data
    general = {k: v for k, v in data.items() if k in _USER_OVERLAY_KEYS}
    merged.apply(general, _file_origin(doc))
    sites = data.get("sites") or {}
    overlay = sites.get(site_name)
    if isinstance(overlay, dict):
        merged.apply(overlay, _file_origin(doc), base=("sites", site_name))


def _apply_env_layer(merged: _Merged, env: Mapping[str, str]) -> list[Problem]:
    problems: list[Problem] = []
    for name, (path, kind) in ENV_KEYS.items():
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        value: Any = raw
        if kind is int:
            try:
                value = parse_int(raw)
            except ValueError as exc:
                problems.append(Problem(str(exc), dotted(path), f"env:{name}"))
                continue
        merged.apply(_nest(path, value), _constant(Origin(f"env:{name}")))
    return problems


def _merge_into(
    target: dict[str, Any],
    layer: Mapping[str, Any],
    path: KeyPath,
    source_base: KeyPath,
    origins: dict[KeyPath, Origin],
    origin_at: Callable[[KeyPath], Origin],
) -> None:
    for key, value in layer.items():
        child = (*path, key)
        source_path = (*source_base, *child)
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            origins.setdefault(child, origin_at(source_path))
            _merge_into(target[key], value, child, source_base, origins, origin_at)
            continue
        target[key] = copy.deepcopy(value)
        for known in [p for p in origins if p[: len(child)] == child]:
            del origins[known]
        _record(value, child, source_base, origins, origin_at)


def _record(
    value: Any,
    path: KeyPath,
    source_base: KeyPath,
    origins: dict[KeyPath, Origin],
    origin_at: Callable[[KeyPath], Origin],
) -> None:
    origins[path] = origin_at((*source_base, *path))
    if isinstance(value, dict):
        for key, item in value.items():
            _record(item, (*path, key), source_base, origins, origin_at)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _record(item, (*path, index), source_base, origins, origin_at)


def _constant(origin: Origin) -> Callable[[KeyPath], Origin]:
    def origin_at(path: KeyPath) -> Origin:
        return origin

    return origin_at


def _file_origin(doc: YamlDoc) -> Callable[[KeyPath], Origin]:
    def origin_at(path: KeyPath) -> Origin:
        return Origin("file", doc.source, doc.line_of(path))

    return origin_at


def _site_name(data: Mapping[str, Any], path: Path) -> str:
    name = data.get("name")
    return name if isinstance(name, str) else path.stem


def _nest(path: KeyPath, value: Any) -> dict[str, Any]:
    result: Any = value
    for part in reversed(path):
        result = {part: result}
    if not isinstance(result, dict):
        raise ConfigError("an override needs a key")
    return result


def _parse_key(key: str) -> KeyPath:
    """``"partitions.0.name"`` -> ``("partitions", 0, "name")``."""
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"invalid config key {key!r} (expected a dotted key such as slurm.qos)")
    return tuple(int(p) if re.fullmatch(_INDEX, p) else p for p in key.split("."))


def _leaves(value: Any, path: KeyPath) -> list[tuple[KeyPath, Any]]:
    if isinstance(value, dict) and value:
        rows: list[tuple[KeyPath, Any]] = []
        for key, item in value.items():
            rows.extend(_leaves(item, (*path, key)))
        return rows
    if isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        rows = []
        for index, item in enumerate(value):
            rows.extend(_leaves(item, (*path, index)))
        return rows
    return [(path, value)]
