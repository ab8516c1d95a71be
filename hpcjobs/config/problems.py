"""Problems found in a config: where they are (file, line, dotted key) and what is wrong.

Every command that reads a config imports this module; only a mistake needs :mod:`difflib`
(:func:`suggest`), imported there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from hpcjobs.errors import ConfigError
from hpcjobs.safetext import shown

Severity = Literal["error", "warning"]
KeyPath = tuple[str | int, ...]


def dotted(path: Sequence[str | int]) -> str:
    """Write a key path as ``partitions.1.gpus_per_node`` (a key with a newline as its repr)."""
    return ".".join(shown(str(part)) for part in path)


def suggest(word: str, choices: Iterable[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix for the closest choice, or an empty string."""
    import difflib

    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(key: str, allowed: Iterable[str], *, noun: str = "key") -> str:
    """``unknown key 'x' (did you mean 'y'?)``, else with the allowed keys listed, if any.

    The one formatter for unknown keys, in site configs, user files and job files alike.
    """
    choices = sorted(set(allowed))
    hint = suggest(key, choices)
    if not hint and choices:
        hint = f" (allowed: {', '.join(choices)})"
    return f"unknown {noun} {key!r}{hint}"


class Problem(NamedTuple):
    """One problem in one config file."""

    message: str
    key: str = ""
    file: str | None = None
    line: int | None = None
    severity: Severity = "error"

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def format(self) -> str:
        """``file:line: key: message``, leaving out the parts that are not known."""
        where = ""
        if self.file:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
        parts = [p for p in (where, self.key) if p]
        prefix = ": ".join(parts)
        label = "warning: " if self.severity == "warning" else ""
        return f"{prefix}: {label}{self.message}" if prefix else f"{label}{self.message}"


class InvalidConfigError(ConfigError):
    """A config has one or more errors. ``problems`` lists all of them, warnings included.

    ``message`` replaces the default "site config ... is invalid" text, for errors that are not
    the file's fault (a bad ``HPCJOBS_*`` variable or command-line override).
    """

    def __init__(
        self,
        source: str,
        problems: Sequence[Problem],
        *,
        hint: str | None = None,
        message: str | None = None,
    ):
        self.source = source
        self.problems = list(problems)
        errors = [p for p in self.problems if p.is_error]
        count = f"{len(errors)} problem" + ("s" if len(errors) != 1 else "")
        lines = "\n".join(f"  {p.format()}" for p in errors)
        super().__init__(
            message or f"site config {source} is invalid ({count}):\n{lines}",
            hint=hint or f"fix the keys above, then run 'hpcjobs site validate {source}'",
        )
