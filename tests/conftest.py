"""Shared fixtures: environment hygiene and the live sandbox cluster.

Live tests (marker ``slurm``) run against a real Slurm started by ``hpcjobs sandbox up``.
Without Slurm installed they skip, except when ``CI=true``: then a missing cluster fails.

The test sandbox has its own state dir and ports, so it never disturbs a sandbox you started
by hand. Override with HPCJOBS_TEST_SANDBOX_DIR / HPCJOBS_TEST_PORT_BASE (read once, at import,
before the environment is scrubbed). A sandbox that was already running is left running.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TEST_SANDBOX_DIR = Path(
    os.environ.get("HPCJOBS_TEST_SANDBOX_DIR", "/tmp/hpcjobs-test-sandbox")
).resolve()
TEST_PORT_BASE = int(os.environ.get("HPCJOBS_TEST_PORT_BASE", "17810"))

SCRUB_PREFIXES = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "HPCJOBS_")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never see the Slurm or hpcjobs settings of the shell that runs them, nor its
    job index (``$XDG_STATE_HOME/hpcjobs/jobs``)."""
    for key in list(os.environ):
        if key.startswith(SCRUB_PREFIXES):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def _slurm_available() -> str | None:
    """None if a sandbox can run here, else the reason it cannot."""
    from hpcjobs.sandbox.packages import missing_packages

    missing = missing_packages()
    if missing and os.geteuid() != 0:
        return f"Slurm packages missing ({', '.join(missing)}) and not root"
    if os.geteuid() != 0:
        return "the sandbox needs root"
    return None


@pytest.fixture(scope="session")
def sandbox() -> Iterator[object]:
    """A running sandbox cluster (hpcjobs.sandbox.cluster.Sandbox)."""
    from hpcjobs.sandbox.cluster import Sandbox
    from hpcjobs.sandbox.layout import Settings

    reason = _slurm_available()
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true but the live Slurm tests cannot run: {reason}")
        pytest.skip(reason)
    box = Sandbox(TEST_SANDBOX_DIR)
    was_running = box.is_running()
    box.up(Settings(port_base=TEST_PORT_BASE, grace_time=15))
    if not was_running:
        # Jobs a killed earlier run left in the controller's state must not compete with ours.
        box.cancel_all_jobs()
    yield box
    if not was_running:
        box.down()


@pytest.fixture
def slurm_env(sandbox: object) -> dict[str, str]:
    """Environment variables that point Slurm's commands at the test sandbox."""
    from hpcjobs.sandbox.cluster import Sandbox

    assert isinstance(sandbox, Sandbox)
    return sandbox.layout.client_env()


@pytest.fixture
def shared_tmp(sandbox: object) -> Iterator[Path]:
    """A temp folder that job processes (running as the submitting user) can write to."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="hpcjobs-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


#: Live tests that need torch (torchrun, the frameworks, or examples/ddp_train.py: the quick
#: tour and the plan
#: tests). PyPI has only a multi-GB CUDA torch for Python 3.13 and 3.14, so the trixie and sid
#: venvs have none: there they are deselected, loudly; bookworm still runs them.
TORCH_TESTS = (
    "tests/live/test_torchrun.py",
    "test_frameworks.py::test_lightning_",
    "test_frameworks.py::test_hf_trainer_",
    "test_frameworks.py::test_accelerate_",
    "tests/live/test_elastic_ddp.py",
    "tests/live/test_plan_apply.py",
    "test_ddp_preempted_once",
    "test_quick_tour_runs_as_written",
)
NO_TORCH_RELEASES = ("trixie", "sid")
#: Live tests that need a browser (Debian's chromium, which scripts/bootstrap.sh installs on the
#: machine). The other release's Debian root has none; what they check does not depend on the
#: Slurm release, so there they are deselected, loudly, and run on the machine's own release.
BROWSER_TESTS = ("test_html_page_renders_in_chromium", "test_before_after_of_two_real_chains")
#: Live tests that start sandboxes of their own (128 nodes): what they check is the sandbox and
#: the machine, not the Slurm release, so they run on the machine's own release only.
OWN_RELEASE_TESTS = ("tests/scale/",)
#: Live tests of a rule hpcjobs applies to its own node agents' reports (stragglers,
#: hpcjobs/runtime/supervisor/pace.py): the Slurm side of what they end with (a node leaving a
#: job with spares, the chain running again in it) runs on every release in test_spares.py.
#: They run on the machine's own release only: two more minutes on each release would take
#: the suite past its hour.
OWN_RELEASE_RULE_TESTS = ("tests/live/test_stragglers.py",)
#: Set by scripts/test-other-release.sh (read at import: tests scrub HPCJOBS_*).
IN_OTHER_RELEASE = os.environ.get("HPCJOBS_TEST_OTHER_RELEASE") == "1"
_DESELECTED: list[str] = []
_REASONS: list[str] = []


def release_line() -> str:
    """What the suite runs against, e.g. "Slurm 24.11.5 (trixie), Python 3.13.5"."""
    import platform

    from hpcjobs.errors import CommandError
    from hpcjobs.runner import LocalRunner
    from hpcjobs.sandbox.release import host_release

    release = host_release()
    # Not `sinfo --version`: Slurm 22.05 wants a configuration even for that.
    argv = ["dpkg-query", "-W", "-f=${Version}", "slurm-client"]
    try:
        out = LocalRunner().run(argv, check=False, timeout=10).stdout.strip()
    except CommandError:
        out = ""
    slurm = out.split(":")[-1].split("-")[0] if out else "not installed"
    codename = release.codename if release else "unknown release"
    return f"Slurm {slurm} ({codename}), Python {platform.python_version()}"


def pytest_report_header(config: pytest.Config) -> str:
    return f"hpcjobs: {release_line()}"


def _torch_missing() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Anything under tests/live is a live Slurm test. Torch tests leave the run on releases
    whose venv has no torch (see TORCH_TESTS), with the reason printed."""
    from hpcjobs.sandbox.release import host_release

    for item in items:
        path = str(item.fspath).replace(os.sep, "/")
        if "tests/live/" in path or "tests/scale/" in path:
            item.add_marker(pytest.mark.slurm)
    release = host_release()
    patterns: list[str] = []
    if release is not None and release.codename in NO_TORCH_RELEASES and _torch_missing():
        patterns += TORCH_TESTS
        _REASONS.append(
            "torch test(s): no torch here (PyPI has only a multi-GB CUDA build for Python "
            "3.13 and 3.14); they run on bookworm"
        )
    if IN_OTHER_RELEASE and not (shutil.which("chromium") or shutil.which("chromium-browser")):
        patterns += BROWSER_TESTS
        _REASONS.append("browser test(s): no chromium in this root; they run on the machine")
    if IN_OTHER_RELEASE:
        patterns += OWN_RELEASE_TESTS + OWN_RELEASE_RULE_TESTS
        _REASONS.append(
            "scale and straggler tests: they run on the machine's own release (the spare "
            "swap's Slurm side runs here in test_spares.py)"
        )
    if not patterns:
        return
    keep, drop = [], []
    for item in items:
        nodeid = item.nodeid.replace(os.sep, "/")
        (drop if any(t in nodeid for t in patterns) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        _DESELECTED[:] = [item.nodeid for item in drop]


def pytest_collection_finish(session: pytest.Session) -> None:
    if _DESELECTED:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(_deselect_reason())


def _deselect_reason() -> str:
    return (
        f"hpcjobs: deselected {len(_DESELECTED)} test(s) on this release, "
        + "; ".join(_REASONS)
        + ": "
        + ", ".join(_DESELECTED)
    )


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _DESELECTED:
        terminalreporter.write_line(_deselect_reason())
    terminalreporter.write_line(f"hpcjobs: ran against {release_line()}")
