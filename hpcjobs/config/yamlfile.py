"""Read a YAML config file safely, keeping the line of every key for error messages."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpcjobs.config.problems import KeyPath, Problem, Severity, dotted

#: Config files larger than this are refused: no real site config comes close.
MAX_BYTES = 4 * 1024 * 1024
#: Stop recording key lines after this many nodes (guards against alias bombs).
MAX_NODES = 200_000

#: YAML 1.1 reads ``5:00`` as the base-60 integer 300 and ``1:30:00.5`` as a float. In a job file
#: or site config a value with colons is always a Slurm time (or a port list, a CPU range, ...),
#: never arithmetic, so such plain scalars stay text: ``time: 5:00`` means five minutes.
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")


class TextTimesLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without YAML 1.1's base-60 numbers (they load as strings)."""


TextTimesLoader.yaml_implicit_resolvers = {
    first: [("tag:yaml.org,2002:str", _SEXAGESIMAL), *resolvers]
    if first in "+-0123456789"
    else list(resolvers)
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclass
class YamlDoc:
    """A parsed YAML document: its data, the line of each key path, and any problems."""

    source: str
    data: Any = None
    lines: dict[KeyPath, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.is_error for p in self.problems)

    def line_of(self, path: KeyPath) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None

    def problem(self, message: str, path: KeyPath = (), severity: Severity = "error") -> Problem:
        """A :class:`Problem` located at ``path`` in this document."""
        return Problem(
            message,
            key=dotted(path),
            file=self.source,
            line=self.line_of(path),
            severity=severity,
        )


def read_yaml_file(path: Path, *, source: str | None = None) -> YamlDoc:
    """Read and parse a YAML file. Problems are recorded, never raised.

    Args:
        path: The file to read.
        source: How to name the file in messages (default: the path as given).

    Returns:
        The document; ``problems`` says why ``data`` is missing or incomplete.
    """
    label = source or str(path)
    doc = YamlDoc(label)
    try:
        if not path.exists():
            doc.problems.append(Problem("file not found", file=label))
            return doc
        if path.is_dir():
            doc.problems.append(Problem("is a directory, not a file", file=label))
            return doc
        if path.stat().st_size > MAX_BYTES:
            doc.problems.append(Problem(f"file is larger than {MAX_BYTES} bytes", file=label))
            return doc
        raw = path.read_bytes()
    except PermissionError:
        doc.problems.append(Problem("file is not readable (permission denied)", file=label))
        return doc
    except OSError as exc:
        doc.problems.append(Problem(f"cannot read file: {os.strerror(exc.errno or 0)}", file=label))
        return doc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        doc.problems.append(Problem(f"file is not UTF-8 text (byte {exc.start})", file=label))
        return doc
    return parse_yaml_text(text, source=label)


def parse_yaml_text(text: str, *, source: str) -> YamlDoc:
    """Parse YAML text that should hold one mapping. Problems are recorded, never raised."""
    doc = YamlDoc(source)
    loader = TextTimesLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _walk(node, (), doc, [0])
            doc.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = ": ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        line = mark.line + 1 if mark is not None else None
        doc.problems.append(Problem(f"YAML syntax error: {what}", file=source, line=line))
        return doc
    except yaml.YAMLError as exc:
        doc.problems.append(Problem(f"YAML error: {exc}", file=source))
        return doc
    finally:
        loader.dispose()
    if node is None or doc.data is None:
        doc.problems.append(Problem("file is empty (expected a mapping of keys)", file=source))
    elif not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        doc.problems.append(
            Problem(f"the top level must be a mapping of keys, not a {kind}", file=source, line=1)
        )
    return doc


def _walk(node: yaml.Node, path: KeyPath, doc: YamlDoc, count: list[int]) -> None:
    """Record the line of every key under ``node`` and report duplicate keys."""
    count[0] += 1
    if count[0] > MAX_NODES or len(path) > 64:
        return
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
                continue
            key = key_node.value
            child = (*path, key)
            if key in seen:
                doc.problems.append(
                    Problem(
                        f"duplicate key {key!r} (the later value would silently win)",
                        key=dotted(child),
                        file=doc.source,
                        line=key_node.start_mark.line + 1,
                    )
                )
            seen.add(key)
            doc.lines.setdefault(child, key_node.start_mark.line + 1)
            _walk(value_node, child, doc, count)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            doc.lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, doc, count)
