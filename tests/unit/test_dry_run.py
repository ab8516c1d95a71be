"""``submit --dry-run`` runs every check ``submit`` runs and prints the exact sbatch argv(s)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli


def _dry(tmp_path: Path, *argv: str):  # type: ignore[no-untyped-def]
    out = str(tmp_path / "out")
    return CliRunner().invoke(
        cli,
        ["--site", "sandbox", "submit", "--dry-run", "--output-dir", out, *argv],
        catch_exceptions=False,
    )


def _sbatch_lines(output: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for line in output.splitlines() if line.startswith("# sbatch ")]


@pytest.fixture(autouse=True)
def _no_slurm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Slurm here: MaxArraySize falls back to Slurm's default, as the note says."""
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("test", "ls", "cat", "mkdir", "mv"):
        found = shutil.which(tool)
        assert found
        (bindir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.chdir(tmp_path)


def test_dry_run_prints_what_submit_sends(tmp_path: Path) -> None:
    result = _dry(tmp_path, "--after", "12", "--after", "13:afterany", "--", "python", "t.py")
    assert result.exit_code == 0, result.output
    (argv,) = _sbatch_lines(result.output)
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--dependency=afterok:12,afterany:13" in argv
    assert argv[-2] == "--comment=hpcjobs:<token>"
    assert argv[-1] == "SUBMITDIR/job.sh"


def test_dry_run_keeps_the_users_comment_behind_the_token(tmp_path: Path) -> None:
    result = _dry(tmp_path, "--sbatch=--comment=sweep-3", "--", "true")
    assert result.exit_code == 0, result.output
    (argv,) = _sbatch_lines(result.output)
    assert argv[-2] == "--comment=hpcjobs:<token> sweep-3"
    assert argv.count("--comment=sweep-3") == 0


def test_dry_run_splits_a_large_array_like_submit(tmp_path: Path) -> None:
    result = _dry(tmp_path, "--array", "0-2500%6", "--", "true")
    assert result.exit_code == 0, result.output
    calls = _sbatch_lines(result.output)
    assert [a[-1] for a in calls] == [f"SUBMITDIR/job.chunk{i}.sh" for i in range(3)]
    assert [a[-2] for a in calls] == [f"--comment=hpcjobs:<token>.{i}" for i in range(3)]
    assert [a for argv in calls for a in argv if a.startswith("--array=")] == [
        "--array=0-1000%2",
        "--array=0-1000%2",
        "--array=0-498%2",
    ]
    assert "MaxArraySize=1001" in result.output
    assert "could not be asked for MaxArraySize" in result.output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--after", "12:afterbogus", "--", "true"], "bad dependency '12:afterbogus'"),
        (["--array", "5-1", "--", "true"], "array"),
        (["--sbatch=--comment=a\u2028b", "--", "true"], "sbatch_options.0"),
    ],
)
def test_dry_run_refuses_what_submit_refuses(tmp_path: Path, argv: list[str], message: str) -> None:
    result = _dry(tmp_path, *argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert "#!/bin/bash" not in result.output
