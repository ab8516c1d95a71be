"""What user input hpcjobs accepts: safe text, whole numbers, signal and variable names.

Every check of user input (job spec, flags, site config, ``HPCJOBS_*`` variables, executor
parameters) uses these definitions, so that one rule holds everywhere:

* **Safe text** has no C0 control characters (U+0000-U+001F: newline, tab, escape...), no
  DEL (U+007F), no C1 control characters (U+0080-U+009F: NEL, CSI...), no line or paragraph
  separators (U+2028, U+2029) and no lone surrogates (which is what invalid UTF-8 in a command
  line or file name decodes to). Quotes, ``$( )``, spaces and other non-ASCII text are fine:
  rendering quotes every value.
* **Whole numbers** given as text are ASCII digits only: no sign, no spaces, no ``_``, no
  other scripts' digits (``١٠``) or superscripts (``²``), and at most :data:`MAX_COUNT`
  unless a caller sets a smaller bound. A boolean is never a number.
* **Signal names** are the names of real signals (``USR2``, ``SIGTERM``), never KILL or STOP
  (a job cannot catch them), never the ``signal`` module's other constants (``SIG_IGN``,
  ``SIG_DFL``, ``SIG_BLOCK``, ``NSIG``).
* **Variable names** match ``[A-Za-z_][A-Za-z0-9_]*``. A job or site may not set the names
  Slurm and hpcjobs own (:data:`RESERVED_ENV_PREFIXES`) nor the names that change how bash
  runs the job script (:data:`SHELL_SPECIAL_ENV`).

Patterns are applied with :func:`re.fullmatch`: ``$`` in ``re.match`` would also match before
a trailing newline. Functions named ``check_*`` raise :class:`ValueError` (for pydantic
validators, which collect every problem); ``require_*`` raise
:class:`~hpcjobs.errors.BadInputError` naming the flag, field or file (exit 2).

This module imports only the standard library's ``re``, ``signal`` and ``string``.
"""

from __future__ import annotations

import re
import signal as _signal
import string
from collections.abc import Callable, Collection

from hpcjobs.errors import BadInputError

#: The largest count or budget accepted: Slurm's 32-bit fields and bash arithmetic hold it.
MAX_COUNT = 2**31 - 1

#: Characters safe text never holds: C0, DEL, C1, U+2028/U+2029 and lone surrogates. A pattern
#: string, compiled on first use: text that :meth:`str.isprintable` passes holds none of them
#: (all are non-printable), so most text never needs it, and compiling it costs as much as
#: importing a small module.
UNSAFE_CHARS = "[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]"

#: An environment variable name (ASCII only).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

#: Name prefixes that belong to Slurm (its input and output variables), bash's exported
#: functions and hpcjobs itself.
RESERVED_ENV_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "HPCJOBS_", "BASH_FUNC_")

#: Variables that change how bash reads or runs the job script (word splitting, start-up
#: files, options, tracing, globbing, ``cd``, timers), or that bash keeps read-only or
#: special. ``PATH``, ``LD_LIBRARY_PATH``, ``LD_PRELOAD``, ``HOME`` and the like stay allowed:
#: jobs set them on purpose.
SHELL_SPECIAL_ENV = frozenset(
    {
        "BASH_ARGV0",
        "BASH_COMPAT",
        "BASH_ENV",
        "BASH_LOADABLES_PATH",
        "BASH_XTRACEFD",
        "BASHOPTS",
        "BASHPID",
        "CDPATH",
        "ENV",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "EUID",
        "EXECIGNORE",
        "FUNCNEST",
        "GLOBIGNORE",
        "IFS",
        "LINENO",
        "OPTERR",
        "OPTIND",
        "POSIXLY_CORRECT",
        "PPID",
        "PROMPT_COMMAND",
        "PS4",
        "RANDOM",
        "SECONDS",
        "SHELLOPTS",
        "SRANDOM",
        "TMOUT",
        "UID",
    }
)

#: Signals a job cannot catch, so they can never be its warning signal.
UNCATCHABLE_SIGNALS = frozenset({"KILL", "STOP"})

_DIGITS = re.compile(r"[0-9]+")
_MAX_DIGITS = 24  # longer numbers are out of any range and are not converted, nor shown whole
_SIGNAL_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9]*")

_CHAR_NAMES = {
    "\x00": "a NUL byte",
    "\t": "a tab",
    "\n": "a newline",
    "\r": "a carriage return",
    "\x1b": "an escape character",
    "\x7f": "a DEL character",
    "\x85": "a next-line (NEL) character",
    "\x9b": "a control sequence introducer (CSI)",
    "\u2028": "a line separator",
    "\u2029": "a paragraph separator",
}


# ---- safe text -----------------------------------------------------------------------------


def unsafe_reason(value: str, *, allow: str = "") -> str | None:
    """Why ``value`` is not safe text, or None when it is.

    Args:
        value: The text.
        allow: Characters to let through all the same (only admin-written shell fragments
            use this, for tabs and newlines).

    Returns:
        A phrase such as ``"must not contain control characters (found a newline, U+000A)"``.
    """
    if value.isprintable():
        return None  # the common case, without the pattern
    for match in re.finditer(UNSAFE_CHARS, value):
        char = match.group()
        if char in allow:
            continue
        if "\ud800" <= char <= "\udfff":
            shown = f"0x{ord(char) - 0xDC00:02X}" if ord(char) >= 0xDC80 else f"U+{ord(char):04X}"
            return f"must be valid UTF-8 text (found an undecodable byte or lone surrogate {shown})"
        name = _CHAR_NAMES.get(char, "a control character")
        return f"must not contain control characters (found {name}, U+{ord(char):04X})"
    return None


#: Linux refuses to start a program with one argument, or one ``NAME=value`` variable, longer
#: than MAX_ARG_STRLEN (32 pages: 131072 bytes with its final NUL). Room is left for the name.
MAX_ARGUMENT_BYTES = 131072 - 1 - 1024


def check_fits_one_argument(value: str) -> str:
    """``value`` unchanged if a program can be given it as one argument or variable value.

    Raises:
        ValueError: It is longer than Linux passes to a program (:data:`MAX_ARGUMENT_BYTES`).
    """
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_ARGUMENT_BYTES:
        raise ValueError(
            f"is {size} bytes long; Linux passes at most {MAX_ARGUMENT_BYTES} bytes to a "
            "program as one argument or variable (put long data in a file)"
        )
    return value


def is_safe(value: str, *, allow: str = "") -> bool:
    """Whether ``value`` is safe text (see :func:`unsafe_reason`)."""
    return unsafe_reason(value, allow=allow) is None


def check_safe(value: str, *, allow: str = "") -> str:
    """``value`` unchanged if it is safe text.

    Raises:
        ValueError: It is not; the message says which character is wrong.
    """
    reason = unsafe_reason(value, allow=allow)
    if reason is not None:
        raise ValueError(reason)
    return value


def require_safe(value: str, what: str, *, hint: str | None = None) -> str:
    """``value`` unchanged if it is safe text.

    Args:
        value: The text.
        what: How to name it in the message, for example ``"--host"`` or ``"HPCJOBS_QOS"``.
        hint: What to do instead.

    Raises:
        BadInputError: It is not safe text.
    """
    reason = unsafe_reason(value)
    if reason is not None:
        raise BadInputError(f"{what} {value!r} {reason}", hint=hint)
    return value


def shown(value: str) -> str:
    """``value`` as is when it is safe text, else its ``repr`` (for naming it in a message)."""
    return value if is_safe(value) else repr(value)


# ---- whole numbers -------------------------------------------------------------------------


def parse_int(text: str, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """Parse a whole number written in ASCII digits, within ``minimum..maximum``.

    Refused: signs (``+5``, ``-1``), spaces, ``_`` (``1_000``), other scripts' digits
    (``١٠``), superscripts (``²``), and anything out of range.

    Raises:
        ValueError: The text is not such a number.
    """
    if not _DIGITS.fullmatch(text):
        note = " (digits 0-9 only: no sign, spaces or '_')" if _looks_numeric(text) else ""
        raise ValueError(f"must be a whole number, not {_preview(text)}{note}")
    if len(text) > _MAX_DIGITS:
        raise ValueError(f"must be less than or equal to {maximum} (got {text[:_MAX_DIGITS]}...)")
    return check_int(int(text), minimum=minimum, maximum=maximum)


def _looks_numeric(text: str) -> bool:
    return any(c.isdigit() or c.isnumeric() for c in text)


def check_int(
    value: object, *, minimum: int = 0, maximum: int = MAX_COUNT, text_ok: bool = False
) -> int:
    """``value`` as an int if it is a whole number within ``minimum..maximum``.

    Args:
        value: An int (not a bool), or with ``text_ok`` also a string for :func:`parse_int`.
        minimum: The smallest value accepted.
        maximum: The largest value accepted.
        text_ok: Whether a string of digits is accepted too.

    Raises:
        ValueError: It is a bool, a float, other text, or out of range.
    """
    if isinstance(value, str) and text_ok:
        return parse_int(value, minimum=minimum, maximum=maximum)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be a valid integer (a whole number), not {_preview(value)}")
    if value < minimum:
        bound = "greater than 0" if minimum == 1 else f"greater than or equal to {minimum}"
        raise ValueError(f"must be {bound} (got {_short(value)})")
    if value > maximum:
        raise ValueError(f"must be less than or equal to {maximum} (got {_short(value)})")
    return value


def _preview(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(value: int) -> str:
    if abs(value) < 10**_MAX_DIGITS:
        return str(value)
    return f"a number of more than {_MAX_DIGITS} digits"


def int_checker(
    minimum: int = 0, maximum: int = MAX_COUNT, *, text_ok: bool = False
) -> Callable[[object], int]:
    """A one-argument :func:`check_int` with these bounds, for a schema's field validator."""

    def check(value: object) -> int:
        return check_int(value, minimum=minimum, maximum=maximum, text_ok=text_ok)

    return check


def require_int(
    text: str,
    what: str,
    *,
    minimum: int = 0,
    maximum: int = MAX_COUNT,
    hint: str | None = None,
) -> int:
    """:func:`parse_int` for a flag or variable ``what``.

    Raises:
        BadInputError: The text is not a whole number in range; the message names ``what``.
    """
    try:
        return parse_int(text, minimum=minimum, maximum=maximum)
    except ValueError as exc:
        raise BadInputError(f"{what}: {exc}", hint=hint) from None


# ---- signals -------------------------------------------------------------------------------


def signal_names() -> frozenset[str]:
    """The names (without ``SIG``) of the real signals of this platform a job can catch."""
    return frozenset(s.name.removeprefix("SIG") for s in _signal.Signals) - UNCATCHABLE_SIGNALS


def check_signal_name(value: str) -> str:
    """The bare upper-case name (``USR2``) of a catchable signal named ``usr2``/``SIGUSR2``.

    Raises:
        ValueError: ``value`` is not the name of such a signal.
    """
    bare = value.upper().removeprefix("SIG") if _SIGNAL_TEXT.fullmatch(value) else ""
    if bare not in signal_names():
        raise ValueError(f"{value!r} is not a signal a job can catch (for example USR2, TERM)")
    return bare


# ---- environment variable names ------------------------------------------------------------


def env_name_problem(
    name: str, *, managed: Collection[str] = (), allowed: Collection[str] = ()
) -> str | None:
    """Why ``name`` may not be set as a job's or site's variable, or None when it may.

    Args:
        name: The variable name.
        managed: Further names the caller sets itself (the per-rank variables of a job).
        allowed: Names with a reserved prefix that may be set all the same (the
            ``HPCJOBS_PLAN_*`` variables a planned job file carries).
    """
    if not ENV_NAME.fullmatch(name):
        return (
            f"{name!r} is not a valid environment variable name "
            "(use letters A-Z, digits and '_', not starting with a digit)"
        )
    if name in allowed:
        return None
    if name.startswith(RESERVED_ENV_PREFIXES):
        return f"{name!r} is reserved for Slurm and hpcjobs"
    if name in SHELL_SPECIAL_ENV:
        return f"{name!r} changes how bash runs the job script, so it may not be set"
    if name in managed:
        return f"{name!r} is set by hpcjobs for every rank"
    return None


def check_env_name(
    name: str, *, managed: Collection[str] = (), allowed: Collection[str] = ()
) -> str:
    """``name`` unchanged if a job or site may set it (see :func:`env_name_problem`).

    Raises:
        ValueError: It may not.
    """
    problem = env_name_problem(name, managed=managed, allowed=allowed)
    if problem is not None:
        raise ValueError(problem)
    return name


# ---- names and templates -------------------------------------------------------------------


def check_pattern(value: str, pattern: re.Pattern[str] | str, what: str) -> str:
    """``value`` unchanged if all of it matches ``pattern`` (:func:`re.fullmatch`). A pattern
    given as a string is compiled on first use (``re`` keeps it): a module keeps a pattern that
    only an uncommon value needs as a string, so that importing the module does not compile it.

    Raises:
        ValueError: It does not; the message is ``"{value!r} {what}"``.
    """
    if not re.fullmatch(pattern, value):
        raise ValueError(f"{value!r} {what}")
    return value


def check_not_option(value: str) -> str:
    """``value`` unchanged unless it starts with ``-`` (a program would read it as an option).

    Raises:
        ValueError: It starts with ``-``.
    """
    if value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-', so it would be read as an option")
    return value


def check_format_template(value: str, fields: Collection[str]) -> str:
    """``value`` unchanged if its ``{...}`` placeholders are plain names from ``fields``.

    Refused: unknown or positional fields (``{}``, ``{0}``), attribute or index access
    (``{job_name.__class__}``, ``{user[0]}``), conversions (``{user!r}``) and format specs
    (``{user:>99999999}``). ``{{`` and ``}}`` stand for literal braces.

    Raises:
        ValueError: A placeholder is not allowed, or the braces do not pair up.
    """
    allowed = ", ".join("{" + f + "}" for f in sorted(fields))
    try:
        parsed = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"invalid placeholder syntax in {value!r}: {exc}") from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in fields:
            raise ValueError(f"unknown placeholder {{{field}}} (allowed: {allowed})")
        if spec or conversion:
            extra = f"!{conversion}" if conversion else f":{spec}"
            raise ValueError(
                f"placeholder {{{field}{extra}}} has a conversion or format spec; "
                f"write it plainly (allowed: {allowed})"
            )
    return value


__all__ = [
    "ENV_NAME",
    "MAX_COUNT",
    "RESERVED_ENV_PREFIXES",
    "SHELL_SPECIAL_ENV",
    "UNCATCHABLE_SIGNALS",
    "UNSAFE_CHARS",
    "check_env_name",
    "check_format_template",
    "check_int",
    "check_not_option",
    "check_pattern",
    "check_safe",
    "check_signal_name",
    "env_name_problem",
    "int_checker",
    "is_safe",
    "parse_int",
    "require_int",
    "require_safe",
    "shown",
    "signal_names",
]
