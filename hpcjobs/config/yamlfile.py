"""Read a YAML config file safely, keeping the line of every key for error messages.

Job files and site configs come from users, so reading one is bounded: only regular files are
opened (never a FIFO or a device, which could block or never end), at most :data:`MAX_BYTES`
are read, and composing the document stops at :data:`MAX_DEPTH` levels of nesting and at
:data:`MAX_NODES` nodes counted the way aliases expand them (a "billion laughs" alias bomb).
Every failure becomes a :class:`Problem` that names the file, and the line where known.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from hpcjobs.config.problems import KeyPath, Problem, Severity, dotted

#: Config files larger than this are refused: no real site config comes close.
MAX_BYTES = 4 * 1024 * 1024
#: Deepest nesting of mappings and lists accepted (real configs stay below 10).
MAX_DEPTH = 100
#: Most nodes a document may hold, each alias counted as a full copy of what it refers to.
MAX_NODES = 100_000

_TOO_DEEP = f"nested too deeply (more than {MAX_DEPTH} levels of mappings and lists)"

#: YAML 1.1 reads ``5:00`` as the base-60 integer 300 and ``1:30:00.5`` as a float. In a job file
#: or site config a value with colons is always a Slurm time (or a port list, a CPU range, ...),
#: never arithmetic, so such plain scalars stay text: ``time: 5:00`` means five minutes.
_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")


#: PyYAML's C parser (libyaml) when its wheel has it: it reads the text into events ten times as
#: fast as the pure-Python one. Composing the events into nodes stays in Python, where
#: :class:`BoundedLoader` bounds it.
LIBYAML: bool = bool(getattr(yaml, "__with_libyaml__", False))

if LIBYAML:
    from yaml._yaml import CParser

    class _SafeLoader(
        yaml.composer.Composer,
        CParser,
        yaml.constructor.SafeConstructor,
        yaml.resolver.Resolver,
    ):
        """``yaml.SafeLoader`` reading through libyaml, composing in Python."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

else:  # pragma: no cover - PyPI's PyYAML wheels carry libyaml

    class _SafeLoader(yaml.SafeLoader):  # type: ignore[no-redef]
        """``yaml.SafeLoader``."""


class TextTimesLoader(_SafeLoader):
    """``yaml.SafeLoader`` without YAML 1.1's base-60 numbers (they load as strings)."""


TextTimesLoader.yaml_implicit_resolvers = {
    first: [("tag:yaml.org,2002:str", _SEXAGESIMAL), *resolvers]
    if first in "+-0123456789"
    else list(resolvers)
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class LimitError(yaml.MarkedYAMLError):
    """A document exceeds :data:`MAX_DEPTH` or :data:`MAX_NODES`, or has a recursive alias."""


class BoundedLoader(TextTimesLoader):
    """:class:`TextTimesLoader` that refuses deep nesting, alias bombs and recursive aliases.

    Composing is recursive in PyYAML, so depth is bounded before Python's own limit is near.
    Each node's size is the number of nodes it stands for once every alias is expanded; an
    alias adds the whole size of its anchor. That is what any later walk over the loaded data
    (validation, merging, printing) would visit, so it is bounded here, while composing.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._total = 0  # nodes so far, each alias counted as the size of its anchor
        self._sizes: dict[int, int] = {}  # id(node) -> its expanded size, once complete
        self._nodes: list[yaml.Node] = []  # keeps every sized node alive, so ids stay unique

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        mark = self._next_mark()
        if self.check_event(yaml.AliasEvent):
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node)) if node is not None else None
            if size is None:
                raise LimitError(
                    problem="an alias refers to a mapping or list that contains it "
                    "(recursive aliases are not supported)",
                    problem_mark=mark,
                )
            self._count(size, mark)
            return node
        if self._depth >= MAX_DEPTH:
            raise LimitError(
                problem=_TOO_DEEP,
                problem_mark=mark,
            )
        self._count(1, mark)
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._sizes[id(node)] = 1 + sum(self._sizes[id(child)] for child in _children(node))
            self._nodes.append(node)
        return node

    def _count(self, size: int, mark: yaml.Mark | None) -> None:
        self._total += size
        if self._total > MAX_NODES:
            raise LimitError(
                problem=f"too many values: more than {MAX_NODES}, counting each alias as a full "
                "copy of what it refers to (aliases that multiply like this are refused)",
                problem_mark=mark,
            )

    def _next_mark(self) -> yaml.Mark | None:
        event: Any = self.peek_event()
        mark: yaml.Mark | None = event.start_mark
        return mark


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class YamlDoc:
    """A parsed YAML document: its data, the line of each key path, and any problems."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.data: Any = None
        self.lines: dict[KeyPath, int] = {}
        self.problems: list[Problem] = []

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
        path: The file to read: a regular file (a FIFO, device or directory is refused
            without being read).
        source: How to name the file in messages (default: the path as given).

    Returns:
        The document; ``problems`` says why ``data`` is missing or incomplete.
    """
    label = source or str(path)
    raw, problem = read_limited(path)
    if raw is None:
        doc = YamlDoc(label)
        doc.problems.append(Problem(problem, file=label))
        return doc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        doc = YamlDoc(label)
        line = raw.count(b"\n", 0, exc.start) + 1
        doc.problems.append(
            Problem(f"file is not UTF-8 text (byte {exc.start})", file=label, line=line)
        )
        return doc
    return parse_yaml_text(text, source=label)


def read_limited(path: Path, limit: int = MAX_BYTES) -> tuple[bytes | None, str]:
    """The bytes of a regular file of at most ``limit`` bytes, or None and why not.

    The file's type is checked before it is opened, and again on the open file (it is opened
    non-blocking, so a FIFO swapped in between cannot block). At most ``limit + 1`` bytes are
    read whatever the file claims its size to be.
    """
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return None, _not_regular(info.st_mode)
        if info.st_size > limit:
            return None, f"file is larger than {limit} bytes"
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, _not_regular(info.st_mode)
            chunks: list[bytes] = []
            size = 0
            while size <= limit:
                chunk = os.read(fd, limit + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return None, "file not found"
    except PermissionError:
        return None, "file is not readable (permission denied)"
    except OSError as exc:
        return None, f"cannot read file: {exc.strerror or exc}"
    if size > limit:
        return None, f"file is larger than {limit} bytes"
    return b"".join(chunks), ""


def _not_regular(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory, not a file"
    kinds = (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"is {kind}, not a regular file: refused without reading it"


def parse_yaml_text(text: str, *, source: str) -> YamlDoc:
    """Parse YAML text that should hold one mapping. Problems are recorded, never raised.

    Nesting, alias expansion and recursive aliases are bounded (:class:`BoundedLoader`).
    """
    doc = YamlDoc(source)
    loader: BoundedLoader | None = None
    try:
        loader = BoundedLoader(text)
        node = loader.get_single_node()
        if node is not None:
            _walk(node, (), doc)
            doc.data = loader.construct_document(node)
    except LimitError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else None
        doc.problems.append(Problem(str(exc.problem), file=source, line=line))
        return doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        if "maximum nesting depth" in str(exc.problem):  # libyaml's own bound, 1,000 levels
            doc.problems.append(Problem(_TOO_DEEP, file=source, line=line))
            return doc
        what = ": ".join(str(p) for p in (exc.context, exc.problem) if p) or "invalid YAML"
        doc.problems.append(Problem(f"YAML syntax error: {what}", file=source, line=line))
        return doc
    except yaml.reader.ReaderError as exc:
        doc.problems.append(_reader_problem(exc, text, source))
        return doc
    except yaml.YAMLError as exc:
        doc.problems.append(Problem(f"YAML error: {exc}", file=source))
        return doc
    except RecursionError:  # a last guard: the bounds above should make this unreachable
        doc.problems.append(Problem("nested too deeply to read", file=source))
        return doc
    finally:
        if loader is not None:
            loader.dispose()
    if node is None or doc.data is None:
        doc.problems.append(Problem("file is empty (expected a mapping of keys)", file=source))
    elif not isinstance(doc.data, dict):
        kind = type(doc.data).__name__
        doc.problems.append(
            Problem(f"the top level must be a mapping of keys, not a {kind}", file=source, line=1)
        )
    return doc


def _reader_problem(exc: yaml.reader.ReaderError, text: str, source: str) -> Problem:
    """A character YAML does not allow (a raw control byte): say which, and on what line."""
    position = exc.position if isinstance(exc.position, int) else 0
    if LIBYAML:  # libyaml counts bytes of the UTF-8 text
        line = text.encode("utf-8", "surrogatepass").count(b"\n", 0, position) + 1
    else:
        line = text.count("\n", 0, position) + 1
    char = exc.character
    code = ord(char) if isinstance(char, str) else char if isinstance(char, int) else None
    what = f"U+{code:04X}" if code is not None else "a character"
    return Problem(
        f"{what} is not allowed in YAML (a control character; write it as an escape such as "
        '"\\t" inside double quotes, or remove it)',
        file=source,
        line=line,
    )


def _walk(node: yaml.Node, path: KeyPath, doc: YamlDoc) -> None:
    """Record the line of every key under ``node`` and report duplicate keys.

    ``node`` comes from :class:`BoundedLoader`: no deeper than :data:`MAX_DEPTH`, no more than
    :data:`MAX_NODES` nodes with aliases expanded, and without cycles.
    """
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
            _walk(value_node, child, doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            doc.lines.setdefault(child, item.start_mark.line + 1)
            _walk(item, child, doc)
