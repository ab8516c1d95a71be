"""The command runner: argv only, timeouts, scrubbed environment, rich failures."""

from __future__ import annotations

import time

import pytest

from hpcjobs.errors import CommandError, CommandNotFoundError, CommandTimeoutError
from hpcjobs.runner import LocalRunner, child_environment


def test_runs_argv_without_shell() -> None:
    result = LocalRunner().run(["echo", "$(whoami)", "a;b"])
    assert result.stdout == "$(whoami) a;b\n"
    assert result.ok


def test_rejects_a_single_string() -> None:
    with pytest.raises(TypeError):
        LocalRunner().run("echo hi")  # type: ignore[arg-type]


def test_failure_carries_argv_code_and_stderr() -> None:
    with pytest.raises(CommandError) as info:
        LocalRunner().run(["bash", "-c", "echo oops >&2; exit 7"])
    assert info.value.returncode == 7
    assert info.value.argv == ("bash", "-c", "echo oops >&2; exit 7")
    assert "oops" in info.value.stderr
    assert info.value.exit_code == 2  # not a Slurm command: SlurmClient makes those exit 3


def test_check_false_returns_result() -> None:
    result = LocalRunner().run(["bash", "-c", "exit 3"], check=False)
    assert result.returncode == 3
    assert not result.ok


def test_missing_program() -> None:
    with pytest.raises(CommandNotFoundError, match="not found"):
        LocalRunner().run(["definitely-not-a-program-xyz"])


def test_timeout_kills_process_group() -> None:
    start = time.monotonic()
    with pytest.raises(CommandTimeoutError):
        LocalRunner().run(["bash", "-c", "sleep 30 & sleep 30"], timeout=0.5)
    assert time.monotonic() - start < 10


def test_stdin_is_passed() -> None:
    assert LocalRunner().run(["cat"], stdin="hello").stdout == "hello"


def test_sbatch_variables_are_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SBATCH_PARTITION", "evil")
    monkeypatch.setenv("SALLOC_ACCOUNT", "evil")
    monkeypatch.setenv("SRUN_CPUS_PER_TASK", "9")
    out = LocalRunner().run(["env"]).stdout
    assert "SBATCH_PARTITION" not in out
    assert "SALLOC_ACCOUNT" not in out
    assert "SRUN_CPUS_PER_TASK" not in out


def test_overlay_environment() -> None:
    runner = LocalRunner(env={"SLURM_CONF": "/x/slurm.conf"})
    out = runner.run(["env"], env={"EXTRA": "1"}).stdout
    assert "SLURM_CONF=/x/slurm.conf" in out
    assert "EXTRA=1" in out


def test_child_environment_pure() -> None:
    env = child_environment({"SBATCH_X": "1", "PATH": "/bin"}, {"A": "b"})
    assert env == {"PATH": "/bin", "A": "b"}
