"""The supervisor as it travels to the job: a zipapp that runs on a bare python3."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hpcjobs.cli import cli
from hpcjobs.jobs.supervisorapp import (
    supervisor_app,
    supervisor_name,
    supervisor_path,
    write_supervisor,
)

#: Interpreters to try the zipapp on besides this one: the oldest the project supports first.
OLD_PYTHONS = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3")))


def test_the_same_sources_give_the_same_bytes_and_name() -> None:
    assert supervisor_app() == supervisor_app()
    assert supervisor_name().startswith("supervisor-") and supervisor_name().endswith(".pyz")
    assert supervisor_path("/out") == Path("/out/.hpcjobs") / supervisor_name()


def test_it_holds_only_the_supervisor_package_and_the_contract() -> None:
    with zipfile.ZipFile(__import__("io").BytesIO(supervisor_app())) as archive:
        names = archive.namelist()
    assert "__main__.py" in names
    allowed = ("hpcjobs_supervisor/", "hpcjobs/contract/")
    assert all(n in ("__main__.py", "hpcjobs/__init__.py") or n.startswith(allowed) for n in names)
    assert "hpcjobs_supervisor/supervise.py" in names
    assert "hpcjobs/contract/eventlog.py" in names


def test_written_private(tmp_path: Path) -> None:
    path = write_supervisor(tmp_path / "out" / ".hpcjobs" / supervisor_name())
    assert path.read_bytes() == supervisor_app()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("python", [sys.executable, *OLD_PYTHONS[:1]])
def test_it_runs_isolated_from_any_installed_hpcjobs(tmp_path: Path, python: str) -> None:
    app = write_supervisor(tmp_path / supervisor_name())
    help_text = subprocess.run(
        [python, "-I", str(app), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--policy" in help_text
    bad = subprocess.run(
        [python, "-I", str(app), "--script", "x", "--policy", "{}", "--", "true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "cannot read its policy" in bad.stderr
    agent = subprocess.run(
        [python, "-I", str(app), "agent", "--help"], capture_output=True, text=True, check=True
    )
    assert "--shared" in agent.stdout


@pytest.mark.parametrize("python", ["python3", "/opt/conda/bin/python3.12", "python3.11"])
def test_the_sites_python_runs_the_supervisor(python: str) -> None:
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    site = load_site("sandbox")
    site = site.model_copy(update={"setup": site.setup.model_copy(update={"python": python})})
    script = render_job(parse_spec({"command": ["python", "t.py"]}), site).script
    assert f"export HPCJOBS_PYTHON={python}\n" in script
    assert 'exec "$HPCJOBS_PYTHON" -E -s "$hpcjobs_supervisor"' in script


@pytest.mark.parametrize("python", ["python3 -u", "", "py;rm", "-python3", "$(id)"])
def test_setup_python_is_a_command_or_a_path(python: str) -> None:
    from pydantic import ValidationError

    from hpcjobs.config.models import Setup

    with pytest.raises(ValidationError):
        Setup(python=python)


# ---- 'hpcjobs render' writes it, so that its script can be given to sbatch by hand ------------


def _render(tmp_path: Path, *extra: str) -> tuple[Path, Result]:
    out = tmp_path / "out"
    argv = ["--site", "sandbox", "render", "--output-dir", str(out), *extra, "--", "true"]
    return out, CliRunner().invoke(cli, argv, env={"HPCJOBS_NO_TEMPLATE_CACHE": "1"})


def test_render_writes_the_supervisor_its_script_runs(tmp_path: Path) -> None:
    out, result = _render(tmp_path)
    assert result.exit_code == 0, result.output
    path = supervisor_path(out)
    assert f"hpcjobs_supervisor={path}\n" in result.stdout  # the path the script names
    assert path.read_bytes() == supervisor_app()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert zipfile.is_zipfile(path)
    listing = subprocess.run(
        [sys.executable, "-m", "zipfile", "-l", str(path)], capture_output=True, text=True
    )
    assert listing.returncode == 0 and "__main__.py" in listing.stdout
    # One line on stderr names it; stdout is the script alone.
    assert result.stderr == f"Supervisor: wrote {path} (the script runs it)\n"
    assert "Supervisor:" not in result.stdout


def test_a_second_render_checks_before_it_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, first = _render(tmp_path)
    assert first.exit_code == 0, first.output
    from hpcjobs.jobs import supervisorapp

    def never() -> bytes:
        raise AssertionError("the archive was built though the file is there")

    monkeypatch.setattr(supervisorapp, "supervisor_app", never)
    _, again = _render(tmp_path)
    assert again.exit_code == 0, again.output
    assert (
        again.stderr
        == f"Supervisor: {supervisor_path(out)} is already there (the script runs it)\n"
    )


def test_help_and_dry_run_write_nothing(tmp_path: Path) -> None:
    out, result = _render(tmp_path, "--help")
    assert result.exit_code == 0 and "supervisor" in result.stdout
    assert "sbatch job.sh" in result.stdout
    assert not out.exists()
    argv = ["--site", "sandbox", "submit", "--dry-run", "--output-dir", str(out), "--", "true"]
    dry = CliRunner().invoke(cli, argv)
    assert dry.exit_code == 0, dry.output
    assert not out.exists()


def test_a_script_that_runs_no_supervisor_gets_none(tmp_path: Path) -> None:
    blocks = tmp_path / "tpl" / "blocks"
    blocks.mkdir(parents=True)
    (blocks / "launch.sh.j2").write_text("exec {{ command | shjoin }}\n")
    out, result = _render(tmp_path, "--template-dir", str(tmp_path / "tpl"))
    assert result.exit_code == 0, result.output
    assert not out.exists() and "Supervisor:" not in result.output


def test_render_into_a_folder_it_cannot_write_exits_2(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("a file, not a folder\n")
    out, result = _render(tmp_path)
    assert result.exit_code == 2
    assert result.stdout == ""  # no script to give to sbatch
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"Error: cannot create folder {out}/.hpcjobs: ")
    assert lines[1].startswith("Hint: choose another output dir") and "--dry-run" in lines[1]
    assert len(lines) == 2


def test_an_unwritable_supervisor_folder_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcjobs.errors import BadInputError
    from hpcjobs.jobs import records

    def refuse(path: Path, data: object, **kwargs: object) -> Path:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(records, "write_atomic", refuse)
    target = tmp_path / ".hpcjobs" / supervisor_name()
    with pytest.raises(BadInputError, match="cannot write the job's supervisor") as info:
        write_supervisor(target)
    assert "Permission denied" in info.value.message and info.value.hint


def _agents_program(app: Path, env: dict[str, str]) -> list[str]:
    """The command the zipapp's supervisor would start its node agents with."""
    probe = (
        "import json, sys; sys.argv = sys.argv[1:]; sys.path.insert(0, sys.argv[0]); "
        "from hpcjobs_supervisor.cli import _program; print(json.dumps(_program()))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", probe, str(app)], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    argv: list[str] = __import__("json").loads(out.stdout)
    return argv


def test_agents_run_the_supervisors_own_interpreter_where_the_node_has_it(tmp_path: Path) -> None:
    app = write_supervisor(tmp_path / supervisor_name())
    env = {k: v for k, v in os.environ.items() if k != "HPCJOBS_PYTHON"}
    argv = _agents_program(app, env)
    # The site's "python3" (a name): the supervisor's own interpreter, else the name.
    assert argv[:2] == ["/bin/sh", "-c"] and argv[4:] == [
        sys.executable, "python3", "-E", "-s", "-S", str(app)
    ]  # fmt: skip
    for own in (sys.executable, str(tmp_path / "no-such-python")):
        argv[4] = own
        ran = subprocess.run([*argv, "agent", "--help"], capture_output=True, text=True, env=env)
        assert ran.returncode == 0 and "--shared" in ran.stdout, ran.stderr
    # A path the site named is used as it is.
    env["HPCJOBS_PYTHON"] = sys.executable
    assert _agents_program(app, env) == [sys.executable, "-E", "-s", "-S", str(app)]
