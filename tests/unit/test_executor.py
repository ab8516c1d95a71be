"""hpcjobs.executor: parameters, rendering, submission and jobs that follow their chain."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from submitit.core import utils

import hpcjobs
from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import EXIT_BAD_INPUT, BadInputError, HpcJobsError
from hpcjobs.runner import Result
from hpcjobs.submitit.executor import HpcExecutor, make_executor
from hpcjobs.submitit.hpcjob import HpcJob, newest_result
from hpcjobs.submitit.params import PARAMETERS, UnknownParameterError
from hpcjobs.submitit.pickles import write_pickle
from tests.eventlines import line
from tests.fakes import FakeRunner, client_for, ok
from tests.unit.test_requeue import script_policy

PYTHON = "/opt/venv/bin/python"


@pytest.fixture(scope="module")
def site() -> SiteConfig:
    return load_site("sandbox")


@pytest.fixture(autouse=True)
def _private_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job index that submissions keep goes to a temp folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _ids(start: int = 100) -> Any:
    counter = itertools.count(start)

    def reply(argv: Sequence[str]) -> Result:
        return Result(tuple(argv), 0, f"{next(counter)}\n", "")

    return reply


def _runner(max_array_size: int = 1001) -> FakeRunner:
    return (
        FakeRunner()
        .add("sbatch", ok("slurm-wlm 22.05.8\n"), _ids())
        .add("scontrol", ok(f"MaxArraySize            = {max_array_size}\n"))
    )


def _executor(
    site: SiteConfig, folder: Path, runner: FakeRunner | None = None, **params: Any
) -> HpcExecutor:
    client = client_for(runner) if runner is not None else None
    return make_executor(site, folder=folder, python=PYTHON, client=client, **params)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def add(a: int, b: int) -> int:
    return a + b


# ---- import cost ---------------------------------------------------------------------------


def test_import_hpcjobs_leaves_submitit_alone() -> None:
    code = (
        "import sys, hpcjobs\n"
        "assert callable(hpcjobs.executor) and hpcjobs.Resumable and hpcjobs.Interrupted\n"
        "print('submitit' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"]


# ---- parameters ----------------------------------------------------------------------------


def test_unknown_parameters_are_refused_with_the_valid_ones(
    site: SiteConfig, tmp_path: Path
) -> None:
    with pytest.raises(UnknownParameterError) as caught:
        _executor(site, tmp_path, gpus=4, cpus_per_gpu=2)
    error = caught.value
    assert isinstance(error, BadInputError) and isinstance(error, ValueError)
    assert error.exit_code == EXIT_BAD_INPUT
    assert "cpus_per_gpu, gpus" in error.message
    for name in PARAMETERS:
        assert f"  {name}: " in error.message
    ex = _executor(site, tmp_path)
    with pytest.raises(UnknownParameterError):
        ex.update_parameters(setup=["module load x"])
    assert ex.parameters == {}


def test_executor_function_takes_the_main_resources(site: SiteConfig, tmp_path: Path) -> None:
    ex = hpcjobs.executor(
        site, partition="urgent", nodes=2, gpus_per_node=2, folder=tmp_path, python=PYTHON
    )
    assert isinstance(ex, HpcExecutor)
    assert ex.parameters == {"partition": "urgent", "nodes": 2, "gpus_per_node": 2}
    assert ex._num_tasks() == 4
    args = ex.render().sbatch_args
    assert "--partition=urgent" in args and "--nodes=2" in args
    assert "--ntasks-per-node=2" in args and "--gpus-per-node=h100:2" in args


def test_submitit_names_and_sbatch_options(site: SiteConfig, tmp_path: Path) -> None:
    ex = _executor(site, tmp_path)
    ex.update_parameters(
        name="sweep",
        timeout_min=30,
        mem_gb=1.5,
        tasks_per_node=2,
        gpus_per_node=2,
        exclusive=True,
        constraint="h100",
        comment="nightly",
        additional_parameters={"gres-flags": "enforce-binding", "contiguous": True},
        signal_delay_s=45,
        max_requeues={"preemption": 2, "total": 5},
        env={"OMP_NUM_THREADS": "1"},
        nccl_debug=True,
    )
    rendered = ex.render()
    args = rendered.sbatch_args
    for wanted in (
        "--job-name=sweep",
        "--time=30",
        "--ntasks-per-node=2",
        "--mem=1536M",
        "--exclusive",
        "--constraint=h100",
        "--comment=nightly",
        "--gres-flags=enforce-binding",
        "--contiguous",
        "--signal=B:USR2@45",
        "--requeue",
    ):
        assert wanted in args
    policy = script_policy(rendered.script)
    assert policy.budgets["preemption"] == 2 and policy.max_total == 5
    assert "export OMP_NUM_THREADS=1" in rendered.script
    assert "NCCL_DEBUG=INFO" in rendered.script
    ex.update_parameters(mem_gb=16, requeue=False, max_requeues=3)
    rendered = ex.render()
    assert "--mem=16G" in rendered.sbatch_args and "--no-requeue" in rendered.sbatch_args
    assert script_policy(rendered.script).max_total == 3


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"partition": "nope"}, "no partition 'nope'"),
        ({"nodes": 9}, "9 nodes requested"),
        ({"gpus_per_node": 8}, "8 GPUs per node"),
        ({"time": 1, "signal_delay_s": 300}, "warning signal"),
        ({"max_requeues": {"bogus": 1}}, "requeue.max_requeues"),
        ({"additional_parameters": {"time": "1:00"}}, "--time is set by hpcjobs"),
        ({"env": {"SLURM_X": "1"}}, "reserved"),
    ],
)
def test_bad_values_stop_before_slurm(
    site: SiteConfig, tmp_path: Path, params: dict[str, Any], words: str
) -> None:
    ex = _executor(site, tmp_path)
    with pytest.raises(BadInputError) as caught:
        ex.update_parameters(**params)
    assert words in caught.value.message
    assert ex.parameters == {}


def test_python_must_be_absolute(site: SiteConfig, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="absolute path"):
        make_executor(site, folder=tmp_path, python="python3")
    ex = make_executor(site, folder=tmp_path, python="/usr/bin/env -S python3")
    assert ex.python_argv == ["/usr/bin/env", "-S", "python3"]
    assert make_executor(site, folder=tmp_path).python_argv[0] == str(
        Path(sys.executable).absolute()
    )


def test_folder_may_not_hold_percent(site: SiteConfig, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="contains '%'"):
        make_executor(site, folder=tmp_path / "%j", python=PYTHON)


def test_default_folder_is_the_sites_output_dir(
    site: SiteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ex = make_executor(site, python=PYTHON)
    assert ex.folder == tmp_path / "hpcjobs" / "runs" / "submitit"


# ---- rendering -----------------------------------------------------------------------------


def test_every_rank_runs_the_task_module_through_srun(site: SiteConfig, tmp_path: Path) -> None:
    ex = _executor(site, tmp_path, nodes=2)
    rendered = ex.render(uid="u1")
    folder = str(ex.folder)
    assert f"{PYTHON} -u -m hpcjobs.submitit.task {folder}" in rendered.script
    assert "srun --nodes=2 --ntasks-per-node=4" in rendered.script
    assert f"--output={folder}/slurm-%j.out" in rendered.sbatch_args
    assert f"export HPCJOBS_JOB_OUTPUT_DIR={folder}" in rendered.script
    assert f"export HPCJOBS_CHECKPOINT_DIR={folder}/checkpoints/u1" in rendered.script
    assert rendered.binding is not None and rendered.binding.by_gpu
    assert ex._submitit_command_str == f"{PYTHON} -u -m hpcjobs.submitit.task {folder}"
    assert ex._make_submission_file_text(ex._submitit_command_str, "u2").startswith("#!/bin/bash")


def test_arrays_get_one_checkpoint_folder_per_task(site: SiteConfig, tmp_path: Path) -> None:
    ex = _executor(site, tmp_path, array_parallelism=2, checkpoint_dir=str(tmp_path / "ck"))
    rendered = ex.render(count=5, uid="u1")
    assert "--array=0-4%2" in rendered.sbatch_args
    assert f"--output={ex.folder}/slurm-%A_%a.out" in rendered.sbatch_args
    line = next(x for x in rendered.script.splitlines() if "HPCJOBS_CHECKPOINT_DIR=" in x)
    assert line == (
        f"export HPCJOBS_CHECKPOINT_DIR={tmp_path}/ck/u1/task-"
        '"${HPCJOBS_ARRAY_TASK_ID:-${SLURM_ARRAY_TASK_ID:-0}}"'
    )
    for env, task in (
        ({"SLURM_ARRAY_TASK_ID": "3"}, "3"),
        ({"HPCJOBS_ARRAY_TASK_ID": "1003"}, "1003"),
    ):
        shown = subprocess.run(
            ["bash", "-c", f'{line}; echo "$HPCJOBS_CHECKPOINT_DIR"'],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": os.environ["PATH"], **env},
        )
        assert shown.stdout.strip() == f"{tmp_path}/ck/u1/task-{task}"


# ---- submission ----------------------------------------------------------------------------


def test_submit_writes_private_pickle_and_returns_an_hpcjob(
    site: SiteConfig, tmp_path: Path
) -> None:
    runner = _runner()
    ex = _executor(site, tmp_path / "runs", runner)
    job = ex.submit(add, 1, b=2)
    assert isinstance(job, HpcJob) and job.job_id == "100" and job.num_tasks == 4
    pickled = ex.folder / "100_submitted.pkl"
    assert _mode(pickled) == 0o600 and _mode(ex.folder) == 0o700
    delayed = utils.DelayedSubmission.load(pickled)
    assert delayed.function is add and delayed.args == (1,) and delayed.kwargs == {"b": 2}
    assert not list(ex.folder.glob(".*.pkl"))
    script = ex.folder / "100_submission.sh"
    assert script.is_symlink() and "hpcjobs.submitit.task" in script.read_text()
    assert job.checkpoint_dir is not None and job.checkpoint_dir.parent == ex.folder / "checkpoints"
    assert (ex.folder / "checkpoints" / "100").resolve() == job.checkpoint_dir.resolve()
    [argv] = [c for c in runner.calls if c[:2] == ["sbatch", "--parsable"]]
    assert "--job-name=add" in argv and any(a.startswith("--comment=hpcjobs:") for a in argv)
    jobs = tmp_path / "state" / "hpcjobs" / "jobs"
    index = json.loads((jobs / "local" / "100.json").read_text())
    assert index["output_dir"] == str(ex.folder)


def test_map_array_is_split_to_fit_max_array_size(site: SiteConfig, tmp_path: Path) -> None:
    runner = _runner(max_array_size=3)
    ex = _executor(site, tmp_path, runner, gpus_per_node=0)
    jobs = ex.map_array(add, [1, 2, 3, 4, 5], [10, 20, 30, 40, 50])
    assert [j.job_id for j in jobs] == ["100_0", "100_1", "100_2", "101_0", "101_1"]
    for job, (a, b) in zip(jobs, [(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)], strict=True):
        assert isinstance(job, HpcJob) and job.num_tasks == 1
        assert job.submission().args == (a, b)
    assert [j.checkpoint_dir.name for j in jobs if j.checkpoint_dir] == [
        f"task-{i}" for i in range(5)
    ]
    arrays = [a for c in runner.calls if c[0] == "sbatch" for a in c if a.startswith("--array")]
    assert arrays == ["--array=0-2%3", "--array=0-1%2"]  # the %5 throttle, shared
    assert (ex.folder / "100_submission.sh").is_symlink()
    assert (ex.folder / "101_submission.sh").is_symlink()


def test_batch_submits_one_array(site: SiteConfig, tmp_path: Path) -> None:
    runner = _runner()
    ex = _executor(site, tmp_path, runner, gpus_per_node=0)
    with ex.batch():
        first = ex.submit(add, 1, 2)
        second = ex.submit(add, 3, 4)
    assert [first.job_id, second.job_id] == ["100_0", "100_1"]
    assert isinstance(first, HpcJob)
    assert runner.count("sbatch") == 2  # --version, then one submission


def test_failed_submission_leaves_no_pickles(site: SiteConfig, tmp_path: Path) -> None:
    runner = (
        FakeRunner()
        .add("sbatch", ok("slurm-wlm 22.05.8\n"))
        .add("sbatch", Result(("sbatch",), 1, "", "sbatch: error: invalid partition"))
    )
    ex = _executor(site, tmp_path / "runs", runner)
    with pytest.raises(HpcJobsError, match="invalid partition"):
        ex.submit(add, 1, 2)
    assert not list((tmp_path / "runs").glob("*.pkl")) + list((tmp_path / "runs").glob(".*.pkl"))


# ---- jobs that follow their chain ----------------------------------------------------------


class FakeWatcher:
    """Answers job states from a dict; remembers retired ids."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.retired: set[str] = set()

    def register_job(self, job_id: str) -> None:
        pass

    def get_state(self, job_id: str, mode: str = "standard") -> str:
        return self.states.get(job_id, "UNKNOWN")

    def get_info(self, job_id: str, mode: str = "standard") -> dict[str, str]:
        return {"State": self.get_state(job_id)}

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        return self.get_state(job_id) not in ("PENDING", "RUNNING", "UNKNOWN", "PREEMPTED")

    def retire(self, job_id: str) -> None:
        self.retired.add(job_id)


@pytest.fixture
def watcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeWatcher]:
    fake = FakeWatcher()
    monkeypatch.setattr(HpcJob, "watcher", fake)
    monkeypatch.setattr(HpcJob, "_results_timeout_s", 0)
    monkeypatch.setattr("hpcjobs.submitit.hpcjob.queue_state", lambda job_id: None)
    yield fake


def _event(job: str, event: str, cause: str = "-", detail: str = "", **data: object) -> str:
    return line(job, event, cause, detail, at=1700000000.0, **data)


PREEMPTED = _event("5", "start", "-", "checkpoint=-1", checkpoint=-1) + _event(
    "5",
    "requeue",
    "preemption",
    "continued as job 7",
    checkpoint=3,
    progress=4,
    how="continued",
    next="7",
)


def _result(folder: Path, job_id: str, task: int, outcome: str, value: Any) -> None:
    write_pickle(
        utils.JobPaths(folder, job_id=job_id, task_id=task).result_pickle, (outcome, value)
    )


def test_job_follows_its_continuation(tmp_path: Path, watcher: FakeWatcher) -> None:
    job: HpcJob[int] = HpcJob(tmp_path, "5")
    watcher.states["5"] = "RUNNING"
    assert job.job_ids == ["5"] and job.state == "RUNNING" and not job.done()

    (tmp_path / "chain-5.jsonl").write_text(PREEMPTED)
    watcher.states["5"] = "PREEMPTED"
    assert job.job_ids == ["5", "7"] and job.current_job_id == "7"
    assert job.state == "PENDING"  # not in accounting yet
    assert not job.done()
    assert "5" in watcher.retired

    watcher.states["7"] = "RUNNING"
    (tmp_path / "chain-5.jsonl").write_text(
        PREEMPTED + _event("7", "start", "-", "checkpoint=3", checkpoint=3)
    )
    _result(tmp_path, "5", 0, "error", "killed by the preemption")  # superseded by run 7
    (tmp_path / "5_0_log.out").write_text("first run\n")
    (tmp_path / "7_0_log.out").write_text("second run\n")
    assert job.state == "RUNNING" and not job.done()
    assert job.stdout() == "first run\nsecond run\n"

    _result(tmp_path, "7", 0, "success", 42)
    with (tmp_path / "chain-5.jsonl").open("a") as handle:
        handle.write(_event("7", "end", "finish", "completed"))
    watcher.states["7"] = "COMPLETED"
    assert job.done() and job.result() == 42 and job.state == "COMPLETED"
    assert [cut.resumed_from for cut in job.chain().interruptions()] == [3]


def test_run_that_left_slurm_without_an_end_is_done(tmp_path: Path, watcher: FakeWatcher) -> None:
    (tmp_path / "chain-5.jsonl").write_text(PREEMPTED)
    job: HpcJob[int] = HpcJob(tmp_path, "5")
    watcher.states["7"] = "CANCELLED by 0"
    assert job.done()
    with pytest.raises(utils.UncompletedJobError, match="no end recorded"):
        job.result()


def test_failed_chain_reports_why(tmp_path: Path, watcher: FakeWatcher) -> None:
    text = PREEMPTED + _event("7", "start", "-", "checkpoint=3", checkpoint=3)
    text += _event("7", "end", "fail", "requeue budget for preemption exhausted: 1/1")
    (tmp_path / "chain-5.jsonl").write_text(text)
    (tmp_path / "7_0_log.err").write_text("Traceback: boom\n")
    job: HpcJob[int] = HpcJob(tmp_path, "5")
    assert job.done()
    with pytest.raises(utils.UncompletedJobError) as caught:
        job.result()
    message = str(caught.value)
    assert "budget for preemption exhausted" in message and "Runs: 5, 7" in message
    assert "Traceback: boom" in message


def test_error_of_the_last_run_is_raised(tmp_path: Path, watcher: FakeWatcher) -> None:
    text = _event("5", "start") + _event("5", "end", "fail", "application failed")
    (tmp_path / "chain-5.jsonl").write_text(text)
    _result(tmp_path, "5", 0, "error", "Traceback (most recent call last):\nValueError: bad")
    job: HpcJob[int] = HpcJob(tmp_path, "5")
    with pytest.raises(utils.FailedJobError, match="ValueError: bad"):
        job.result()


def test_multi_task_result_is_rank_zeros(tmp_path: Path, watcher: FakeWatcher) -> None:
    (tmp_path / "chain-5.jsonl").write_text(_event("5", "start") + _event("5", "end", "finish"))
    for task in range(3):
        _result(tmp_path, "5", task, "success", f"rank {task}")
    job: HpcJob[str] = HpcJob(tmp_path, "5", tasks=[0, 1, 2])
    assert job.result() == "rank 0"
    assert job.results() == ["rank 0", "rank 1", "rank 2"]
    assert job.task(2).result() == "rank 2"


def test_newest_success_wins_over_older_errors(tmp_path: Path) -> None:
    assert newest_result(tmp_path, ["5", "7", "9"], 0) is None
    _result(tmp_path, "5", 0, "success", 1)
    _result(tmp_path, "7", 0, "error", "superseded")
    assert newest_result(tmp_path, ["5", "7", "9"], 0) == ("success", 1)
    _result(tmp_path, "9", 0, "error", "last")
    assert newest_result(tmp_path, ["5", "7", "9"], 0) == ("error", "last")


def test_pickles_are_private_and_replace_links(tmp_path: Path) -> None:
    target = tmp_path / "5_submitted.pkl"
    write_pickle(target, {"a": 1})
    link = tmp_path / "7_submitted.pkl"
    os.symlink(target.name, link)
    write_pickle(link, {"a": 2})
    assert not link.is_symlink() and _mode(link) == 0o600
    assert utils.pickle_load(target) == {"a": 1} and utils.pickle_load(link) == {"a": 2}


def test_every_parameter_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "python-api.md").read_text()
    missing = [name for name in PARAMETERS if f"`{name}`" not in doc]
    assert not missing
