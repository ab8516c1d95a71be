"""Job spec: parsing, flags over files, and checks against the partition (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import EXIT_BAD_INPUT, BadInputError
from hpcjobs.script.jobspec import (
    JobSpec,
    RequeuePolicy,
    job_name_for_path,
    load_job_file,
    merge_job_data,
    parse_env_options,
    parse_signal_option,
    parse_spec,
    resolve_spec,
)


@pytest.fixture
def dgx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SiteConfig:
    monkeypatch.setenv("HOME", "/home/user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    return load_site("dgx-h100-ib")


@pytest.fixture
def sandbox_site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SiteConfig:
    monkeypatch.setenv("HOME", "/home/user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    return load_site("sandbox")


def test_parse_spec_accepts_yaml_shapes() -> None:
    spec = parse_spec(
        {
            "name": "run",
            "nodes": 2,
            "command": "python train.py --name 'a b'",
            "env": {"OMP_NUM_THREADS": 4},
            "requeue": {"signal": "SIGUSR2", "lead_time": 120, "max_requeues": {"timeout": 2}},
        }
    )
    assert spec.command == ["python", "train.py", "--name", "a b"]
    assert spec.env == {"OMP_NUM_THREADS": "4"}
    assert spec.requeue.signal == "USR2"
    assert spec.requeue.max_requeues == {"timeout": 2}


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"command": ["x"], "nodez": 2}, "nodez: unknown field"),
        ({"command": ["x", 1.10]}, "command.1: must be text"),
        ({"command": ["x", True]}, "command.1: must be text"),
        ({"command": ["x"], "env": {"BAD-NAME": "1"}}, "not a valid environment variable"),
        ({"command": ["x"], "env": {"SLURM_X": "1"}}, "reserved"),
        ({"command": ["x"], "env": {"RANK": "1"}}, "set by hpcjobs"),
        ({"command": ["x"], "time": "1:99:00"}, "time"),
        ({"command": ["x"], "array": "0-3;rm"}, "not a Slurm array"),
        ({"command": ["x"], "dependency": "afterok:1 2"}, "not a Slurm dependency"),
        ({"command": ["x"], "requeue": {"signal": "KILL"}}, "not a signal"),
        ({"command": ["x"], "container": {"image": "i", "mounts": ["a,b"]}}, "without commas"),
        ({"command": ["x"], "partition": "a b"}, "may only contain"),
        ({"command": ["x"], "nodes": 0}, "nodes"),
    ],
)
def test_parse_spec_rejects_bad_fields(data: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_spec(data, source="job.yaml")
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert "job.yaml" in info.value.message
    assert needle in info.value.message


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\tb", "a\x1b[31mb", "a\x00b", "a\x7fb"])
@pytest.mark.parametrize(
    "field",
    ["name", "command", "env", "checkpoint_dir", "output_dir", "chdir", "image", "sbatch"],
)
def test_control_characters_are_refused_everywhere(field: str, bad: str) -> None:
    data: dict[str, object] = {"command": ["python", "x.py"]}
    if field == "command":
        data["command"] = ["python", bad]
    elif field == "env":
        data["env"] = {"VALUE": bad}
    elif field == "image":
        data["container"] = {"image": bad}
    elif field == "sbatch":
        data["sbatch_options"] = [f"--comment={bad}"]
    else:
        data[field] = bad
    with pytest.raises(BadInputError, match="control characters"):
        parse_spec(data)


def test_flags_override_file_and_merge_env_and_requeue() -> None:
    file_data = {
        "nodes": 4,
        "env": {"A": "file", "B": "file"},
        "requeue": {"signal": "USR2", "lead_time": 300},
        "command": ["old"],
    }
    flags = {"nodes": 2, "env": {"B": "flag"}, "requeue": {"lead_time": 60}, "time": None}
    merged = merge_job_data(file_data, flags)
    assert merged["nodes"] == 2
    assert merged["env"] == {"A": "file", "B": "flag"}
    assert merged["requeue"] == {"signal": "USR2", "lead_time": 60}
    assert merged["command"] == ["old"]
    assert "time" not in merged


def test_signal_and_env_options() -> None:
    assert parse_signal_option("USR2@120") == {"signal": "USR2", "lead_time": 120}
    assert parse_signal_option("B:TERM") == {"signal": "TERM"}
    assert parse_signal_option("@90") == {"lead_time": 90}
    with pytest.raises(BadInputError):
        parse_signal_option("USR2@soon")
    assert parse_env_options(["A=1", "B=x=y", "A=2", "C="]) == {"A": "2", "B": "x=y", "C": ""}
    with pytest.raises(BadInputError):
        parse_env_options(["NOVALUE"])


def test_load_job_file_reports_yaml_errors(tmp_path: Path) -> None:
    good = tmp_path / "job.yaml"
    good.write_text("nodes: 2\ncommand: [python, train.py]\n", encoding="utf-8")
    assert load_job_file(good) == {"nodes": 2, "command": ["python", "train.py"]}
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: 2\ncommand: [python\n", encoding="utf-8")
    with pytest.raises(BadInputError, match=r"bad\.yaml"):
        load_job_file(bad)
    with pytest.raises(BadInputError, match="does not exist") as info:
        load_job_file(tmp_path / "missing.yaml")
    assert info.value.hint and "-f/--file" in info.value.hint


def test_missing_relative_job_file_names_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInputError) as info:
        load_job_file(Path("nosuch.yaml"))
    assert info.value.message == f"job file nosuch.yaml does not exist in {tmp_path}"


def test_broken_job_file_has_a_hint(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n", encoding="utf-8")
    with pytest.raises(BadInputError) as info:
        load_job_file(bad)
    assert info.value.hint and "YAML mapping of job fields" in info.value.hint


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"nodse": 2}, "nodse: unknown field 'nodse' (did you mean 'nodes'?)"),
        ({"tiem": "1:00"}, "tiem: unknown field 'tiem' (did you mean 'time'?)"),
        (
            {"container": {"image": "i", "mount": ["a"]}},
            "container.mount: unknown field 'mount' (did you mean 'mounts'?)",
        ),
        ({"requeue": {"sigal": "USR2"}}, "(did you mean 'signal'?)"),
        ({"zzzz": 1}, "unknown field 'zzzz' (allowed: account, array, bind,"),
    ],
)
def test_unknown_job_fields_get_did_you_mean(data: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInputError) as info:
        parse_spec({"command": ["x"], **data}, source="job.yaml")
    assert needle in info.value.message


def test_unknown_field_message_is_the_site_config_formatter() -> None:
    """One formatter for unknown keys: job files and site configs say it the same way."""
    from hpcjobs.config.problems import unknown_key

    with pytest.raises(BadInputError) as info:
        parse_spec({"command": ["x"], "nodse": 2})
    assert unknown_key("nodse", JobSpec.model_fields, noun="field") in info.value.message


def test_bad_flag_over_a_job_file_is_not_blamed_on_the_file() -> None:
    data = merge_job_data({"command": ["x"], "nodes": 2}, {"time": "abc", "nodes": None})
    with pytest.raises(BadInputError) as info:
        parse_spec(data, source="job.yaml")
    assert "  time (command line): 'abc' is not a Slurm time" in info.value.message
    # Without a job file every value is a flag: nothing to tell apart.
    with pytest.raises(BadInputError) as info:
        parse_spec(merge_job_data(None, {"command": ["x"], "time": "abc"}), source="flags")
    assert "  time: 'abc' is not a Slurm time" in info.value.message


def test_resolve_fills_site_defaults(dgx: SiteConfig) -> None:
    job = resolve_spec(JobSpec(command=["python", "train.py"]), dgx, cwd=Path("/work"))
    assert job.name == "python"
    assert job.partition == "batch"
    assert (job.gpus_per_node, job.ntasks_per_node, job.cpus_per_task) == (8, 8, 28)
    assert job.time == "01:00:00"
    assert job.launcher == "srun"
    assert job.output_dir == "/home/user/hpcjobs/runs/python"
    assert job.checkpoint_dir == "/home/user/hpcjobs/runs/python/checkpoints"
    assert job.requeue.signal == "USR2" and job.requeue.lead_time == 300
    assert job.requeue.max_requeues["preemption"] == 20


def test_resolve_shares_cpus_by_gpus_and_launcher(dgx: SiteConfig) -> None:
    half = resolve_spec(JobSpec(gpus_per_node=4, command=["x"]), dgx)
    assert (half.ntasks_per_node, half.cpus_per_task) == (4, 28)
    torch = resolve_spec(JobSpec(launcher="torchrun", command=["x"]), dgx)
    assert (torch.ntasks_per_node, torch.cpus_per_task) == (8, 28)
    plain = resolve_spec(JobSpec(launcher="none", gpus_per_node=0, command=["x"]), dgx)
    assert (plain.ntasks_per_node, plain.cpus_per_task) == (1, 224)


def test_relative_paths_are_taken_from_the_working_directory(dgx: SiteConfig) -> None:
    spec = JobSpec(command=["x"], output_dir="runs/a", checkpoint_dir="~/ck", chdir="/proj")
    job = resolve_spec(spec, dgx, cwd=Path("/elsewhere"))
    assert job.output_dir == "/proj/runs/a"
    assert job.checkpoint_dir == "/home/user/ck"
    assert job.chdir == "/proj"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (JobSpec(command=[]), "no command to run"),
        (JobSpec(partition="gpu", command=["x"]), "has no partition 'gpu'"),
        (JobSpec(gpus_per_node=9, command=["x"]), "9 GPUs per node requested"),
        (JobSpec(nodes=129, command=["x"]), "129 nodes requested"),
        (JobSpec(time="3-00:00:00", command=["x"]), "longer than partition 'batch' allows"),
        (JobSpec(time="UNLIMITED", command=["x"]), "longer than partition"),
        (JobSpec(cpus_per_task=64, command=["x"]), "8 tasks x 64 CPUs"),
        (JobSpec(time="00:04:00", command=["x"]), "warning signal would come 300 s"),
        (JobSpec(launcher="none", ntasks_per_node=2, command=["x"]), "runs the command once"),
        (JobSpec(output_dir="/tmp/%j", command=["x"]), "contains '%'"),
    ],
)
def test_resolve_refuses_requests_the_partition_cannot_meet(
    dgx: SiteConfig, spec: JobSpec, needle: str
) -> None:
    with pytest.raises(BadInputError) as info:
        resolve_spec(spec, dgx)
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert needle in info.value.message
    assert info.value.hint


def test_container_needs_a_site_runtime(sandbox_site: SiteConfig) -> None:
    spec = JobSpec(command=["x"], container={"image": "img"})  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="no container runtime"):
        resolve_spec(spec, sandbox_site)


def test_requeue_policy_from_spec_wins(sandbox_site: SiteConfig) -> None:
    spec = JobSpec(
        command=["x"],
        requeue=RequeuePolicy(enabled=False, signal="TERM", max_requeues={"timeout": 1}),
    )
    job = resolve_spec(spec, sandbox_site)
    assert job.requeue.enabled is False
    assert job.requeue.signal == "TERM"
    assert job.requeue.lead_time == 60
    assert job.requeue.max_requeues["timeout"] == 1
    assert job.requeue.max_requeues["preemption"] == 20


def test_job_name_for_path() -> None:
    assert job_name_for_path("train") == "train"
    assert job_name_for_path("../../etc/passwd") == "etc_passwd"
    assert job_name_for_path("a b$(x)") == "a_b_x"
    assert job_name_for_path("...") == "job"


@pytest.mark.parametrize("time", ["00:30", "00:59", "1"])
def test_too_short_time_hint_suggests_what_can_work(sandbox_site: SiteConfig, time: str) -> None:
    """Slurm may send the warning up to 60 s before the lead (docs/requeue.md): the hint must
    not suggest a lead inside that window, and the time it suggests must pass the check."""
    with pytest.raises(BadInputError) as info:
        resolve_spec(JobSpec(time=time, command=["x"]), sandbox_site)  # lead 60 s
    hint = info.value.hint or ""
    assert "--signal" not in hint  # no lead fits in a minute
    assert "needs more than 120 s, for example -t 00:03:00" in hint
    job = resolve_spec(JobSpec(time="00:03:00", command=["x"]), sandbox_site)
    assert job.requeue.lead_time == 60


def test_too_short_time_hint_offers_a_lead_that_leaves_the_60s_window(dgx: SiteConfig) -> None:
    with pytest.raises(BadInputError) as info:
        resolve_spec(JobSpec(time="00:04:00", command=["x"]), dgx)  # lead 300 s
    hint = info.value.hint or ""
    assert "needs more than 360 s, for example -t 00:07:00" in hint
    assert "--signal USR2@120, if checkpointing takes less than 60 s" in hint
    # Both suggestions are accepted, and the lead one leaves > 60 s before the earliest signal.
    resolve_spec(JobSpec(time="00:07:00", command=["x"]), dgx)
    policy = RequeuePolicy(lead_time=120)
    job = resolve_spec(JobSpec(time="00:04:00", command=["x"], requeue=policy), dgx)
    assert job.requeue.lead_time == 120 and 240 - (120 + 60) >= 60


def test_a_variable_named_like_a_schema_tag_is_still_named() -> None:
    """``nullable`` is a variable name like any other, not a part of pydantic's paths."""
    with pytest.raises(BadInputError) as caught:
        parse_spec({"command": ["x"], "env": {"nullable": [1]}})
    assert "env.nullable: " in caught.value.message
