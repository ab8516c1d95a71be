"""Quoting argv for the remote shell: what arrives is byte-for-byte what was sent."""

from __future__ import annotations

import random
import shutil

import pytest

from hpcjobs.remote.command import remote_command
from hpcjobs.runner import LocalRunner, checked_argv

NASTY = [
    "it's",
    'say "hi"',
    "two  spaces",
    "$(touch /tmp/hpcjobs-pwned)",
    "`id`",
    "a; b",
    "x && y || z | w > out < in &",
    "line1\nline2\ttab",
    "",
    "*",
    "~",
    "$HOME ${HOME} $0 $@",
    "back\\slash\\",
    "-n",
    "--",
    "üñïçødé ✓",
    "'",
    '"',
    "#comment",
    "!history",
    "{a,b}",
    "\x1b[31m",
]


def _through_sh(command: str) -> list[str]:
    """Run ``command`` the way sshd does (``sh -c``), returning printf's NUL-split output."""
    out = LocalRunner().run(["sh", "-c", command]).stdout
    return out.split("\0")[:-1]


def test_nasty_values_survive_a_posix_shell() -> None:
    assert _through_sh(remote_command(["printf", "%s\\0", *NASTY])) == NASTY


@pytest.mark.skipif(not shutil.which("bash"), reason="bash missing")
def test_random_values_survive_bash() -> None:
    rng = random.Random(8)
    # No "\r": the local runner reads text with universal newlines, which would turn it into "\n".
    alphabet = [chr(c) for c in range(1, 128) if c != 13] + ["é", "✓"]
    values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))) for _ in range(200)]
    command = remote_command(["printf", "%s\\0", *values])
    out = LocalRunner().run(["bash", "-c", command]).stdout
    assert out.split("\0")[:-1] == values


def test_env_prefix_is_quoted() -> None:
    command = remote_command(
        ["sh", "-c", 'printf "%s\\0" "$A" "$B_2"'], {"A": "it's $(id)", "B_2": "x\ny"}
    )
    assert command.startswith("env ")
    assert _through_sh(command) == ["it's $(id)", "x\ny"]


def test_no_env_no_prefix() -> None:
    assert remote_command(["sinfo", "--version"]) == "sinfo --version"
    assert remote_command(["echo", "a b"], {}) == "echo 'a b'"


@pytest.mark.parametrize("name", ["", "1A", "A-B", "A B", "A=B", "$(id)"])
def test_bad_env_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="variable name"):
        remote_command(["true"], {name: "x"})


def test_bad_argv_is_refused() -> None:
    with pytest.raises(TypeError):
        checked_argv("echo hi")
    with pytest.raises(ValueError):
        checked_argv([])
    with pytest.raises(ValueError, match="NUL"):
        remote_command(["echo", "a\0b"])
    with pytest.raises(ValueError, match="NUL"):
        remote_command(["true"], {"A": "a\0b"})
    with pytest.raises(ValueError, match="="):
        remote_command(["A=B", "x"], {"C": "d"})
