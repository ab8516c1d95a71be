"""The one definition of acceptable user input: safe text, numbers, signals, variable names."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hpcjobs.errors import EXIT_BAD_INPUT, BadInputError
from hpcjobs.safetext import (
    MAX_COUNT,
    SHELL_SPECIAL_ENV,
    check_env_name,
    check_format_template,
    check_int,
    check_not_option,
    check_safe,
    check_signal_name,
    env_name_problem,
    is_safe,
    parse_int,
    require_int,
    require_safe,
    shown,
    signal_names,
    unsafe_reason,
)

UNSAFE = [
    "a\x00b",
    "a\tb",
    "a\nb",
    "a\rb",
    "a\x1b[31mb",
    "a\x1fb",
    "a\x7fb",
    "a\x80b",
    "a\x85b",  # NEL
    "a\x9bb",  # CSI
    "a\x9fb",
    "a\u2028b",
    "a\u2029b",
    "a\udcffb",  # an invalid UTF-8 byte decoded with surrogateescape
    "a\ud800b",
    "trailing newline\n",
]

SAFE = [
    "",
    "plain",
    "two words",
    "$(touch x) `y` ; | && 'q' \"d\"",
    "ünïcødé ✓ 日本語 🚀",
    "\u00a0non-breaking space",
    "\u00a0\u00ff",  # the first characters after C1
    "~/path/with %j",
]


@pytest.mark.parametrize("value", UNSAFE)
def test_unsafe_text_is_refused(value: str) -> None:
    assert not is_safe(value)
    reason = unsafe_reason(value)
    assert reason is not None
    with pytest.raises(ValueError, match=r"control characters|UTF-8"):
        check_safe(value)
    with pytest.raises(BadInputError) as info:
        require_safe(value, "--thing")
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert info.value.message.startswith("--thing ")


@pytest.mark.parametrize("value", SAFE)
def test_safe_text_passes(value: str) -> None:
    assert is_safe(value)
    assert check_safe(value) == value
    assert require_safe(value, "x") == value
    assert shown(value) == value


def test_reasons_name_the_character() -> None:
    assert "a newline, U+000A" in str(unsafe_reason("a\nb"))
    assert "next-line (NEL)" in str(unsafe_reason("a\x85b"))
    assert "line separator, U+2028" in str(unsafe_reason("a\u2028b"))
    assert "0xFF" in str(unsafe_reason("a\udcffb"))
    assert unsafe_reason("a\tb\nc", allow="\t\n") is None
    assert unsafe_reason("a\tb\x1bc", allow="\t\n") is not None
    assert shown("a\nb") == "'a\\nb'"


def test_every_code_point_is_judged_by_the_documented_set() -> None:
    """The printable fast path and the pattern agree on all of Unicode: exactly C0, DEL, C1,
    U+2028/U+2029 and the surrogates are refused, alone or inside other text."""
    unsafe = {*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0xD800, 0xE000)}
    for code in range(0x110000):
        char = chr(code)
        assert is_safe(char) is (code not in unsafe), hex(code)
        assert is_safe(f"a{char}b") is (code not in unsafe), hex(code)


@pytest.mark.parametrize(
    ("text", "expected"), [("0", 0), ("7", 7), ("007", 7), (str(MAX_COUNT), MAX_COUNT)]
)
def test_parse_int_accepts_ascii_digits(text: str, expected: int) -> None:
    assert parse_int(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 5",
        "5 ",
        "5\n",
        "+5",
        "-5",
        "1_000",
        "١٠",  # Arabic-Indic digits: int() would take them
        "²",
        "５",  # fullwidth
        "0x10",
        "1e3",
        "1.0",
        "true",
        str(MAX_COUNT + 1),
        "9" * 30,
        "9" * 5000,  # beyond int()'s digit limit: still a clear error, no traceback
    ],
)
def test_parse_int_refuses_everything_else(text: str) -> None:
    with pytest.raises(ValueError, match=r"whole number|less than or equal"):
        parse_int(text)


def test_parse_int_bounds_and_messages() -> None:
    assert parse_int("5", minimum=5, maximum=5) == 5
    with pytest.raises(ValueError, match="greater than 0"):
        parse_int("0", minimum=1)
    with pytest.raises(ValueError, match="less than or equal to 10 \\(got 11\\)"):
        parse_int("11", maximum=10)
    with pytest.raises(ValueError, match="digits 0-9 only"):
        parse_int("١٠")
    with pytest.raises(BadInputError, match=r"^--n: must be a whole number"):
        require_int("x", "--n")


@pytest.mark.parametrize("value", [True, False, 1.0, 2.5, None, "3", [1], 10**40])
def test_check_int_is_strict(value: object) -> None:
    with pytest.raises(ValueError):
        check_int(value)


def test_check_int_accepts_ints_and_text_when_asked() -> None:
    assert check_int(3) == 3
    assert check_int("3", text_ok=True) == 3
    with pytest.raises(ValueError, match="more than 24 digits"):
        check_int(10**40)


@pytest.mark.parametrize(
    ("value", "bare"),
    [("USR2", "USR2"), ("usr1", "USR1"), ("SIGTERM", "TERM"), ("sigint", "INT"), ("HUP", "HUP")],
)
def test_real_signals_are_accepted(value: str, bare: str) -> None:
    assert check_signal_name(value) == bare


@pytest.mark.parametrize(
    "value",
    [
        "KILL",
        "SIGSTOP",
        "_IGN",
        "SIG_IGN",
        "_DFL",
        "SIG_DFL",
        "_BLOCK",
        "SIG_BLOCK",
        "SIG_SETMASK",
        "NSIG",
        "SIGNSIG",
        "ITIMER_REAL",
        "uſr2",  # 'ſ'.upper() == 'S': only ASCII names
        "USR2\n",
        "10",
        "",
        "USR3",
    ],
)
def test_fake_signals_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not a signal a job can catch"):
        check_signal_name(value)


def test_signal_names_are_real_and_catchable() -> None:
    names = signal_names()
    assert {"USR1", "USR2", "TERM", "INT", "HUP"} <= names
    assert not names & {"KILL", "STOP", "_IGN", "_DFL"}


@pytest.mark.parametrize("name", ["PATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "_x", "NCCL_A1"])
def test_ordinary_variable_names_pass(name: str) -> None:
    assert check_env_name(name) == name


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("NCCL_IB_SL\n", "not a valid environment variable name"),
        ("1ABC", "not a valid"),
        ("A-B", "not a valid"),
        ("", "not a valid"),
        ("ÄBC", "not a valid"),  # ASCII only
        ("A B", "not a valid"),
        ("SLURM_X", "reserved"),
        ("HPCJOBS_SIGNAL", "reserved"),
        ("BASH_FUNC_f%%", "not a valid"),
        ("IFS", "changes how bash runs"),
        ("BASH_ENV", "changes how bash runs"),
        ("SHELLOPTS", "changes how bash runs"),
        ("PS4", "changes how bash runs"),
    ],
)
def test_bad_variable_names_are_refused(name: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        check_env_name(name)


def test_managed_names_and_the_shell_list() -> None:
    assert "set by hpcjobs" in str(env_name_problem("RANK", managed={"RANK"}))
    assert env_name_problem("RANK") is None
    assert {"IFS", "BASH_ENV", "ENV", "POSIXLY_CORRECT", "GLOBIGNORE", "CDPATH"} <= (
        SHELL_SPECIAL_ENV
    )
    assert not {"PATH", "LD_LIBRARY_PATH", "HOME"} & SHELL_SPECIAL_ENV


FIELDS = {"job_name", "user"}


@pytest.mark.parametrize("value", ["~/runs/{job_name}", "/x/{user}/{job_name}", "{{literal}}", ""])
def test_plain_placeholders_pass(value: str) -> None:
    assert check_format_template(value, FIELDS) == value


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("{job_name.__class__}", "unknown placeholder"),
        ("{user[0]}", "unknown placeholder"),
        ("{}", "unknown placeholder"),
        ("{0}", "unknown placeholder"),
        ("{site}", "unknown placeholder"),
        ("{user:>99999999}", "format spec"),
        ("{user!r}", "conversion"),
        ("{user:{job_name}}", "format spec"),
        ("{user", "invalid placeholder syntax"),
        ("user}", "invalid placeholder syntax"),
    ],
)
def test_format_templates_allow_only_plain_fields(value: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        check_format_template(value, FIELDS)


def test_not_option() -> None:
    assert check_not_option("image.sqsh") == "image.sqsh"
    with pytest.raises(ValueError, match="starts with '-'"):
        check_not_option("--privileged")


def test_module_is_cheap_to_import() -> None:
    code = (
        "import sys, json; import hpcjobs.safetext; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pydantic', 'yaml', "
        "'jinja2', 'click', 'hpcjobs.')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["hpcjobs.errors", "hpcjobs.safetext", "hpcjobs.textlines"]
