"""Backend selection: the CLI by default, pyslurm only when it imports and matches."""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.slurm.backend import PyslurmQueue, make_client, select_backend
from tests.fakes import FakeRunner, ok


def _pyslurm(version: str, jobs: list[Any] | None = None, fail: bool = False) -> ModuleType:
    module = ModuleType("pyslurm")
    module.__version__ = version  # type: ignore[attr-defined]

    class Jobs:
        @staticmethod
        def load() -> dict[int, Any]:
            if fail:
                raise RuntimeError("slurm_load_jobs: Unable to contact slurm controller")
            return {job.id: job for job in jobs or []}

    module.Jobs = Jobs  # type: ignore[attr-defined]
    return module


def _importer(module: ModuleType | None) -> Any:
    def load(name: str) -> ModuleType:
        assert name == "pyslurm"
        if module is None:
            raise ImportError("No module named 'pyslurm'")
        return module

    return load


def _job(**fields: Any) -> Any:
    base = {
        "id": 10,
        "name": "train",
        "state": "RUNNING",
        "state_reason": None,
        "allocated_nodes": "n[1-2]",
        "num_nodes": 2,
        "run_time": 65,
        "requeue_count": 1,
        "partition": "batch",
        "user_name": "alice",
        "array_id": None,
        "array_task_id": None,
        "array_tasks_waiting": None,
    }
    base.update(fields)
    return SimpleNamespace(**base)


def _version(value: str) -> Any:
    calls: list[str] = []

    def get() -> str:
        calls.append(value)
        return value

    get.calls = calls  # type: ignore[attr-defined]
    return get


def test_cli_is_the_default_and_asks_nothing() -> None:
    version = _version("22.05.8")
    choice = select_backend("cli", version, importer=_importer(_pyslurm("22.5.0")))
    assert choice.name == "cli" and version.calls == []


@pytest.mark.parametrize("wanted", ["pyslurm", "auto"])
def test_pyslurm_when_it_matches(wanted: str) -> None:
    module = _pyslurm("24.11.0")
    choice = select_backend(wanted, _version("24.11.5"), importer=_importer(module))
    assert choice.name == "pyslurm" and choice.module is module


def test_pyslurm_22_5_matches_slurm_22_05() -> None:
    choice = select_backend("auto", _version("22.05.8"), importer=_importer(_pyslurm("22.5.1")))
    assert choice.name == "pyslurm"


def test_falls_back_when_versions_differ() -> None:
    choice = select_backend("pyslurm", _version("22.05.8"), importer=_importer(_pyslurm("25.11.0")))
    assert choice.name == "cli" and "does not match" in choice.reason


def test_falls_back_when_pyslurm_is_missing() -> None:
    choice = select_backend("pyslurm", _version("22.05.8"), importer=_importer(None))
    assert choice.name == "cli" and "does not import" in choice.reason


def test_falls_back_when_slurm_version_is_unknown() -> None:
    choice = select_backend("auto", _version("unknown"), importer=_importer(_pyslurm("22.5.0")))
    assert choice.name == "cli"


def test_rejects_unknown_backend() -> None:
    with pytest.raises(BadInputError):
        select_backend("rest", _version("x"))


def test_pyslurm_rows_and_filters() -> None:
    jobs = [
        _job(),
        _job(id=11, user_name="bob"),
        _job(id=21, array_id=20, array_task_id=1, state="PENDING", state_reason="Priority"),
        _job(id=20, array_id=20, array_tasks_waiting="2-9", state="PENDING", allocated_nodes=None),
    ]
    source = PyslurmQueue(_pyslurm("24.11.0", jobs), user="alice")
    rows = {r.job_id: r for r in source.queue(None, mine=True)}
    assert set(rows) == {"10", "20_1", "20_[2-9]"}
    assert rows["10"].restarts == 1 and rows["10"].elapsed_s == 65
    assert rows["10"].nodelist == "n[1-2]" and rows["10"].reason == ""
    assert rows["20_1"].reason == "Priority"
    picked = source.queue(["20_5", "11"], mine=False)
    assert {r.job_id for r in picked} == {"20_[2-9]", "11"}


def test_make_client_uses_pyslurm_and_falls_back_on_error() -> None:
    runner = FakeRunner().add("sbatch", ok("slurm 24.11.5\n")).add("squeue", ok(""))
    module = _pyslurm("24.11.0", fail=True)
    client = make_client(runner, backend="pyslurm", importer=_importer(module))
    assert client.queue_source is not None
    assert client.queue(["5"]) == []
    assert runner.count("squeue") == 1  # the failed pyslurm call fell back to squeue
    assert client.queue_source is None


def test_make_client_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCJOBS_SLURM_BACKEND", "auto")
    runner = FakeRunner().add("sbatch", ok("slurm-wlm 22.05.8\n"))
    client = make_client(runner, importer=_importer(None))
    assert client.queue_source is None
    assert runner.count("sbatch") == 0  # pyslurm did not import: no need for the version
