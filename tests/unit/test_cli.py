"""The CLI's error contract: exit codes, one message with a hint, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hpcjobs import __version__
from hpcjobs.cli import cli
from hpcjobs.errors import (
    EXIT_BAD_INPUT,
    EXIT_SLURM,
    EXIT_TRANSPORT,
    BadInputError,
    CommandError,
    ConfigError,
    HpcJobsError,
    SlurmError,
    TemplateError,
    TransportError,
)
from hpcjobs.slurm.classify import ErrorKind, SlurmCommandError


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpcjobs", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_help_lists_command_groups() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "sandbox" in result.output
    assert "Exit codes" in result.output


def test_unknown_command_is_usage_error() -> None:
    proc = run("nonsense")
    assert proc.returncode == EXIT_BAD_INPUT
    assert "No such command 'nonsense'" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_missing_site_file_exits_2_naming_it() -> None:
    proc = run("--site", "/no/such.yaml", "sandbox", "status")
    assert proc.returncode == EXIT_BAD_INPUT
    assert "/no/such.yaml" in proc.stderr
    assert "Hint:" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_site_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCJOBS_SITE", "/no/such/site.yaml")
    result = CliRunner().invoke(cli, ["sandbox", "env"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "/no/such/site.yaml" in result.output


def test_debug_shows_traceback() -> None:
    proc = run("--debug", "--site", "/no/such.yaml", "sandbox", "status")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BadInputError("bad"), EXIT_BAD_INPUT),
        (ConfigError("bad config"), EXIT_BAD_INPUT),
        (TemplateError("bad template"), EXIT_BAD_INPUT),
        (SlurmError("slurm said no"), EXIT_SLURM),
        (
            SlurmCommandError(
                "sbatch: Invalid partition name specified",
                kind=ErrorKind.PERMANENT,
                argv=("sbatch",),
                stderr="sbatch: error: Invalid partition name specified",
            ),
            EXIT_SLURM,
        ),
        # Not a Slurm command (printenv over SSH, the sandbox's MariaDB grant): not exit 3.
        (CommandError(["apt-get", "install"], 100, "E: Unable to locate package"), EXIT_BAD_INPUT),
        (TransportError("ssh down"), EXIT_TRANSPORT),
    ],
)
def test_error_classes_map_to_exit_codes(error: HpcJobsError, code: int) -> None:
    @cli.command("raise-for-test")
    def _raise() -> None:
        raise error

    try:
        result = CliRunner().invoke(cli, ["raise-for-test"])
    finally:
        cli.commands.pop("raise-for-test")
    assert result.exit_code == code
    assert result.output.startswith("Error: ")
    assert "Traceback" not in result.output


def test_command_error_message_carries_stderr() -> None:
    err = CommandError(["sbatch", "--parsable"], 1, "sbatch: error: Invalid partition name\n")
    assert "sbatch failed with exit code 1" in err.message
    assert "Invalid partition name" in err.message
    assert err.argv == ("sbatch", "--parsable")


def test_hint_is_printed() -> None:
    @cli.command("raise-hint")
    def _raise() -> None:
        raise ConfigError("broken", hint="fix it like this")

    try:
        result = CliRunner().invoke(cli, ["raise-hint"])
    finally:
        cli.commands.pop("raise-hint")
    assert "Hint: fix it like this" in result.output


def test_group_is_click_group() -> None:
    assert isinstance(cli, click.Group)


def test_only_the_subclasses_of_hpcjobs_error_are_raised() -> None:
    """Each kind of error says its exit code; the base class says none (it once meant 'job
    failed', and an unreadable file exited 1)."""
    import ast

    package = Path(__file__).resolve().parents[2] / "hpcjobs"
    raised = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name == "HpcJobsError":
                    raised.append(f"{path.relative_to(package)}:{node.lineno}")
    assert raised == []


def test_a_run_the_log_does_not_hold_is_bad_input(tmp_path: Path) -> None:
    from hpcjobs.cli.logs import _read

    folder = tmp_path / "unreadable"
    folder.mkdir()
    with pytest.raises(BadInputError, match="cannot read"):
        _read(folder)  # a folder: IsADirectoryError
    assert BadInputError.exit_code == EXIT_BAD_INPUT
