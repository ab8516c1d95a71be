"""submit_rendered: private files, the record, split arrays, dependencies, failures."""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hpcjobs import __version__
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.records import find_record
from hpcjobs.jobs.submission import parse_after, submit_rendered, take_option, with_offset
from hpcjobs.jobs.supervisorapp import supervisor_app, supervisor_name
from hpcjobs.runner import Result
from hpcjobs.slurm.classify import SlurmCommandError
from tests.fakes import FakeRunner, client_for, fail, ok

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
SCRIPT = (
    "#!/bin/bash\n#SBATCH --open-mode=append\n\nset -euo pipefail\necho task $SLURM_ARRAY_TASK_ID\n"
)


@dataclass(frozen=True)
class Spec:
    name: str = "sweep"
    partition: str = "batch"
    array: str | None = None


@dataclass(frozen=True)
class Rendered:
    script: str
    sbatch_args: list[str]
    spec: Spec
    site_name: str
    output_dir: Path
    blocks: dict[str, str] = field(default_factory=dict)
    supervisor: Path | None = None


def _ids(start: int = 100) -> Any:
    counter = itertools.count(start)

    def reply(argv: Sequence[str]) -> Result:
        return Result(tuple(argv), 0, f"{next(counter)}\n", "")

    return reply


def _runner() -> FakeRunner:
    return FakeRunner().add("sbatch", ok("slurm-wlm 22.05.8\n"), _ids())


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_plain_job_files_and_record(tmp_path: Path) -> None:
    out = tmp_path / "runs" / "sweep"
    supervisor = out / ".hpcjobs" / supervisor_name()
    rendered = Rendered(
        SCRIPT, ["-J", "sweep", "-p", "batch"], Spec(), "sandbox", out, supervisor=supervisor
    )
    runner = _runner()
    result = submit_rendered(rendered, client=client_for(runner), index_dir=tmp_path / "index")
    assert result.job_ids == ["100"]
    assert result.script_path.read_text() == SCRIPT
    # The script runs its supervisor from the output folder.
    assert supervisor.read_bytes() == supervisor_app() and _mode(supervisor) == 0o600
    assert _mode(out) == 0o700 and _mode(out.parent) == 0o700
    assert _mode(result.script_path.parent) == 0o700
    for path in (result.script_path, result.record_path):
        assert _mode(path) == 0o600
    record = json.loads(result.record_path.read_text())
    assert record["state"] == "submitted" and record["job_ids"] == ["100"]
    assert record["token"] == result.token and len(result.token) == 32
    assert record["hpcjobs_version"] == __version__
    assert record["slurm_version"] == "22.05.8"
    assert record["site"] == "sandbox" and record["spec"]["partition"] == "batch"
    assert record["created"] and record["submitted"]
    argv = runner.calls[-1]
    assert argv[-1] == str(result.script_path)
    assert f"--comment=hpcjobs:{result.token}" in argv
    assert find_record("100", index_dir=tmp_path / "index") == result.record_path
    assert _mode(tmp_path / "index" / "local" / "100.json") == 0o600
    assert result.to_dict()["job_id"] == "100"


def test_existing_output_dir_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    rendered = Rendered(SCRIPT, [], Spec(), "s", out)
    result = submit_rendered(rendered, client=client_for(_runner()), index_dir=tmp_path / "i")
    assert _mode(out) == 0o755 and _mode(result.script_path.parent) == 0o700


def test_fitting_array_is_one_call_unchanged(tmp_path: Path) -> None:
    rendered = Rendered(SCRIPT, ["--array=0-999%50"], Spec(), "s", tmp_path / "o")
    runner = _runner()
    result = submit_rendered(
        rendered, client=client_for(runner), max_array_size=1001, index_dir=tmp_path / "i"
    )
    assert result.job_ids == ["100"]
    sbatch = [c for c in runner.calls if "--parsable" in c]
    assert len(sbatch) == 1 and "--array=0-999%50" in sbatch[0]
    assert sbatch[0][-1].endswith("job.sh")


def test_large_array_is_split_with_offsets(tmp_path: Path) -> None:
    config = (DATA / "22.05/scontrol-show-config.txt").read_text()
    runner = _runner().add("scontrol", ok(config))
    rendered = Rendered(SCRIPT, ["-J", "sweep", "-a", "0-2499%50"], Spec(), "s", tmp_path / "o")
    result = submit_rendered(rendered, client=client_for(runner), index_dir=tmp_path / "i")
    assert result.job_ids == ["100", "101", "102"]
    assert runner.count("scontrol") == 1  # MaxArraySize from the cluster
    sbatch = [c for c in runner.calls if "--parsable" in c]
    arrays = [next(a for a in c if a.startswith("--array=")) for c in sbatch]
    assert arrays == ["--array=0-1000%17", "--array=0-1000%17", "--array=0-497%16"]
    tokens = [next(a for a in c if a.startswith("--comment=")) for c in sbatch]
    assert tokens == [f"--comment=hpcjobs:{result.token}.{i}" for i in range(3)]
    scripts = [Path(c[-1]) for c in sbatch]
    assert [s.name for s in scripts] == ["job.chunk0.sh", "job.chunk1.sh", "job.chunk2.sh"]
    assert "export HPCJOBS_ARRAY_OFFSET=1001\n" in scripts[1].read_text()
    assert all(_mode(s) == 0o600 for s in scripts)
    record = json.loads(result.record_path.read_text())
    assert record["array"]["max_array_size"] == 1001
    assert [c["offset"] for c in record["array"]["chunks"]] == [0, 1001, 2002]
    assert "-a" not in record["sbatch_args"]


def test_offset_script_runs_and_keeps_header(tmp_path: Path) -> None:
    text = with_offset(SCRIPT, 1001)
    lines = text.splitlines()
    assert lines[:2] == ["#!/bin/bash", "#SBATCH --open-mode=append"]
    script = tmp_path / "s.sh"
    script.write_text(text + 'echo "global $HPCJOBS_ARRAY_TASK_ID"\n')
    out = subprocess.run(
        ["bash", str(script)],
        env={"SLURM_ARRAY_TASK_ID": "5", "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "global 1006" in out and "task 5" in out


def test_array_from_the_spec(tmp_path: Path) -> None:
    rendered = Rendered(SCRIPT, [], Spec(array="0-4"), "s", tmp_path / "o")
    runner = _runner()
    submit_rendered(rendered, client=client_for(runner), max_array_size=1001, index_dir=tmp_path)
    assert "--array=0-4" in runner.calls[-1]


def test_dependencies_merge(tmp_path: Path) -> None:
    rendered = Rendered(SCRIPT, ["--dependency=singleton"], Spec(), "s", tmp_path / "o")
    runner = _runner()
    submit_rendered(
        rendered,
        client=client_for(runner),
        after=["10", "11:afterany", "12_3:afterok"],
        index_dir=tmp_path / "i",
    )
    assert "--dependency=singleton,afterok:10:12_3,afterany:11" in runner.calls[-1]


def test_bad_dependency_and_array_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        parse_after(["10:afterwards"])
    rendered = Rendered(SCRIPT, ["--array=a-b"], Spec(), "s", tmp_path / "o")
    with pytest.raises(BadInputError):
        submit_rendered(rendered, client=client_for(FakeRunner()), max_array_size=10)


def test_comment_with_newline_is_rejected(tmp_path: Path) -> None:
    rendered = Rendered(SCRIPT, ["--comment=a\nb"], Spec(), "s", tmp_path / "o")
    with pytest.raises(BadInputError):
        submit_rendered(rendered, client=client_for(FakeRunner()))


def test_user_comment_follows_the_token(tmp_path: Path) -> None:
    rendered = Rendered(SCRIPT, ["--comment", "nightly"], Spec(), "s", tmp_path / "o")
    runner = _runner()
    result = submit_rendered(rendered, client=client_for(runner), index_dir=tmp_path / "i")
    comments = [a for a in runner.calls[-1] if a.startswith("--comment")]
    assert comments == [f"--comment=hpcjobs:{result.token} nightly"]


def test_permanent_failure_keeps_a_failed_record(tmp_path: Path) -> None:
    stderr = (DATA / "22.05/sbatch-invalid-partition.stderr").read_text()
    runner = FakeRunner().add("sbatch", ok("slurm 24.11.5\n"), fail(stderr))
    rendered = Rendered(SCRIPT, ["-p", "nope"], Spec(partition="nope"), "s", tmp_path / "o")
    with pytest.raises(SlurmCommandError) as info:
        submit_rendered(rendered, client=client_for(runner), index_dir=tmp_path / "i")
    assert "Invalid partition name specified" in info.value.message
    (record_path,) = (tmp_path / "o").glob("submit-*/record.json")
    record = json.loads(record_path.read_text())
    assert record["state"] == "failed" and record["job_ids"] == []
    assert "Invalid partition" in record["error"]
    assert not (tmp_path / "i").exists()


def test_partial_array_failure_names_the_submitted_chunks(tmp_path: Path) -> None:
    stderr = "sbatch: error: Batch job submission failed: Invalid qos specification"
    runner = FakeRunner().add("sbatch", ok("slurm 24.11.5\n"), ok("7\n"), fail(stderr))
    rendered = Rendered(SCRIPT, ["--array=0-19"], Spec(), "s", tmp_path / "o")
    with pytest.raises(SlurmCommandError) as info:
        submit_rendered(
            rendered, client=client_for(runner), max_array_size=10, index_dir=tmp_path / "i"
        )
    assert "7" in (info.value.hint or "")
    (record_path,) = (tmp_path / "o").glob("submit-*/record.json")
    assert json.loads(record_path.read_text())["state"] == "partial"


def test_take_option_forms() -> None:
    assert take_option(["-a", "1-3", "-p", "x"], "--array", "-a") == ("1-3", ["-p", "x"])
    assert take_option(["-a1-3"], "--array", "-a") == ("1-3", [])
    assert take_option(["--array=1-3", "--account=x"], "--array", "-a") == (
        "1-3",
        ["--account=x"],
    )
    assert take_option(["--array", "5"], "--array", "-a") == ("5", [])
    with pytest.raises(BadInputError):
        take_option(["--array"], "--array", "-a")


def test_job_index_keeps_clusters_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same job id on two clusters (or sandboxes) points at two different records."""
    from hpcjobs.jobs.records import remember

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("{}")
    b.write_text("{}")
    monkeypatch.setenv("SLURM_CONF", "/cluster/a/slurm.conf")
    remember(["5"], a, index_dir=tmp_path / "index")
    monkeypatch.setenv("SLURM_CONF", "/cluster/b/slurm.conf")
    remember(["5"], b, index_dir=tmp_path / "index")
    assert find_record("5", index_dir=tmp_path / "index") == b
    monkeypatch.setenv("SLURM_CONF", "/cluster/a/slurm.conf")
    assert find_record("5", index_dir=tmp_path / "index") == a
    assert find_record("5", index_dir=tmp_path / "index", host="login1") is None
