"""Shell completion (click's own) for bash, zsh and fish, through the installed entry point."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENTRY = [sys.executable, "-c", "from hpcjobs.cli import main; main()"]


def complete(shell: str, words: str, cword: str) -> str:
    env = {
        **os.environ,
        "_HPCJOBS_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": cword,
    }
    proc = subprocess.run(ENTRY, env=env, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


def test_bash_completes_a_command() -> None:
    assert complete("bash", "hpcjobs sub", "1").split() == ["plain,submit"]


def test_zsh_completes_a_command_with_its_help() -> None:
    out = complete("zsh", "hpcjobs su", "1").splitlines()
    assert out[:2] == ["plain", "submit"]
    assert out[2].startswith("Render a job script")


def test_fish_completes_a_command_with_its_help() -> None:
    out = complete("fish", "hpcjobs su", "su")
    assert out.startswith("plain,submit\tRender a job script")


def test_site_completes_to_the_site_names() -> None:
    names = [line.split(",", 1)[1] for line in complete("bash", "hpcjobs --site ", "2").split()]
    assert {"sandbox", "dgx-h100-ib", "a100-roce"} <= set(names)
    assert complete("bash", "hpcjobs --site dgx", "2").split() == ["plain,dgx-h100-ib"]


def test_site_path_completes_as_a_file() -> None:
    assert complete("bash", "hpcjobs --site ./si", "2").split() == ["file,./si"]


def test_option_choices_complete() -> None:
    out = complete("bash", "hpcjobs submit --launcher ", "3").split()
    assert out == ["plain,srun", "plain,torchrun", "plain,none"]


@pytest.mark.parametrize(
    ("shell", "marker"),
    [("bash", "complete -o nosort -F"), ("zsh", "compdef"), ("fish", "complete --no-files")],
)
def test_each_shell_gets_a_completion_script(shell: str, marker: str) -> None:
    env = {**os.environ, "_HPCJOBS_COMPLETE": f"{shell}_source"}
    proc = subprocess.run(ENTRY, env=env, capture_output=True, text=True, timeout=60, check=True)
    assert marker in proc.stdout
