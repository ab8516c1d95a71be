"""Hostile input through the real entry points: exit 2, one message naming the culprit.

Every case goes in through what a user runs (``hpcjobs --site sandbox render``, ``submit
--dry-run``, ``site validate FILE``, ``parse_spec``, the executor) and must stop before any
script is rendered or anything runs: exit 2, no traceback, the flag, field or file named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from hpcjobs.cli import cli
from hpcjobs.cli.options import Count
from hpcjobs.cli.submit import flags_to_fields, parse_max_requeues
from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import EXIT_BAD_INPUT, BadInputError
from hpcjobs.safetext import MAX_COUNT
from hpcjobs.script.jobspec import parse_signal_option, parse_spec

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "site-configs" / "sandbox.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def refused(result: Result, *needles: str) -> None:
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert "#!/" not in result.output  # no script was rendered
    for needle in needles:
        assert needle in result.output, result.output


# ---- flags -----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["render", "submit --dry-run"])
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--max-requeues", "99999999999999999999"], ["--max-requeues", "2147483647"]),
        (["--max-requeues", "preemption=99999999999"], ["--max-requeues", "less than or equal"]),
        (["--max-requeues", " 5"], ["--max-requeues", "whole number"]),
        (["--max-requeues", "١٠"], ["--max-requeues", "digits 0-9 only"]),
        (["--max-requeues", "1_000"], ["--max-requeues"]),
        (["--max-requeues", "+5"], ["--max-requeues"]),
        (["--signal", "SIG_IGN"], ["--signal"]),
        (["--signal", "_IGN@60"], ["--signal"]),
        (["--signal", "NSIG"], ["--signal", "not a signal a job can catch"]),
        (["--signal", "KILL"], ["--signal", "not a signal a job can catch"]),
        (["--signal", "USR2@٣٠٠"], ["--signal"]),
        (["--signal", "USR2@99999"], ["--signal", "65535"]),
        (["--signal", ""], ["--signal"]),
        (["-e", "FOO\n=1"], ["env.'FOO\\n'", "not a valid environment variable name"]),
        (["-e", "IFS=:"], ["env.IFS", "changes how bash runs the job script"]),
        (["-e", "BASH_ENV=/tmp/x"], ["env.BASH_ENV"]),
        (["-e", "HPCJOBS_SIGNAL=x"], ["env.HPCJOBS_SIGNAL", "reserved"]),
        (["-J", "a\u2028b"], ["name", "U+2028"]),
        (["-J", "a\x85b"], ["name", "NEL"]),
        (["-J", "a\x9b31mb"], ["name", "CSI"]),
        (["-J", "bad\udcffname"], ["name", "UTF-8"]),
        (["--partition", "batch\n"], ["partition"]),
        (["--account", "acct\n"], ["account"]),
        (["--array", "١-٣"], ["array", "not a Slurm array"]),
        (["--array", "0-99999999999"], ["array", "less than or equal"]),
        (["--dependency", "afterok:1\n"], ["dependency"]),
        (["--container-image", "-x"], ["container.image", "starts with '-'"]),
        (["--container-image", ""], ["container.image"]),
        (["--container-image", "img", "--container-mount", "--bind"], ["container.mounts"]),
        (["--torchrun", "-x"], ["torchrun", "starts with '-'"]),
        (["--sbatch", "--comment=a\x85b"], ["sbatch_options.0", "NEL"]),
        (["-t", "10\n"], ["time"]),
        (["-t", "١٠"], ["time"]),
        (["--output-dir", "/tmp/a\u2029b"], ["output_dir"]),
    ],
)
def test_hostile_flags_exit_2(command: str, args: list[str], needles: list[str]) -> None:
    result = invoke("--site", "sandbox", *command.split(), *args, "--", "python", "x.py")
    refused(result, *needles)


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        ([""], "the program to run (the command's first word) is empty"),
        (["   "], "is empty"),
        (["-c", "x"], "'-c' starts with '-'"),
        (["python", "a\x85b"], "command.1"),
        (["python", "\udcff"], "command.1: must be valid UTF-8"),
    ],
)
def test_hostile_commands_exit_2(command: list[str], needle: str) -> None:
    refused(invoke("--site", "sandbox", "render", "--", *command), needle)


def test_legit_values_still_render() -> None:
    result = invoke(
        "--site",
        "sandbox",
        "render",
        "-e",
        "PATH=/opt/bin:/usr/bin",
        "-e",
        "LD_LIBRARY_PATH=/opt/lib",
        "--signal",
        "sigusr1@120",
        "--max-requeues",
        "preemption=3",
        "--max-requeues",
        str(MAX_COUNT),
        "--",
        "python",
        "-",
        "--flag=-x",
        "ünïcødé ✓",
    )
    assert result.exit_code == 0, result.output
    assert "--signal=B:USR1@120" in result.output


# ---- job files and parse_spec --------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"nodes": True}, "nodes: must be a valid integer"),
        ({"nodes": 2.0}, "nodes: must be a valid integer"),
        ({"nodes": " 2"}, "nodes: must be a whole number"),
        ({"nodes": "1_0"}, "nodes: must be a whole number"),
        ({"nodes": 10**30}, "nodes: must be less than or equal to 2147483647"),
        ({"cpus_per_task": False}, "cpus_per_task"),
        ({"requeue": {"max_total": True}}, "requeue.max_total"),
        ({"requeue": {"max_requeues": {"timeout": 2**31}}}, "requeue.max_requeues.timeout"),
        ({"requeue": {"lead_time": 65536}}, "requeue.lead_time"),
        ({"requeue": {"enabled": "yes"}}, "requeue.enabled: must be true or false"),
        ({"requeue": {"signal": "_IGN"}}, "requeue.signal"),
        ({"requeue": {"signal": "SIG_DFL"}}, "requeue.signal"),
        ({"requeue": {"signal": "SIG_BLOCK"}}, "requeue.signal"),
        ({"requeue": {"signal": "SIG_SETMASK"}}, "requeue.signal"),
        ({"bind": 1}, "bind: must be true or false"),
        ({"nccl_debug": "no"}, "nccl_debug"),
        ({"env": {"NCCL_IB_SL\n": "1"}}, "env.'NCCL_IB_SL\\n'"),
        ({"env": {"PROMPT_COMMAND": "x"}}, "env.PROMPT_COMMAND"),
        ({"env": {"ÄB": "1"}}, "not a valid environment variable name"),
        ({"env": {"A": "x\u2028y"}}, "env.A"),
        ({"partition": "gpu\n"}, "partition"),
        ({"template": "job\n"}, "template"),
        ({"command": [""]}, "command"),
        ({"command": "-x y"}, "command"),
        ({"container": {"image": "--privileged"}}, "container.image"),
        ({"container": {"image": "i", "workdir": ""}}, "container.workdir"),
        ({"chdir": "a\x00b"}, "chdir"),
        ({"checkpoint_dir": "a\x9fb"}, "checkpoint_dir"),
        ({"name": "a\udcffb"}, "name"),
    ],
)
def test_parse_spec_refuses(data: dict[str, Any], needle: str) -> None:
    data = {"command": ["python", "x.py"], **data}
    with pytest.raises(BadInputError) as info:
        parse_spec(data, source="job.yaml")
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert "job.yaml" in info.value.message
    assert needle in info.value.message, info.value.message


def test_parse_spec_keeps_numbers_as_text_and_ints() -> None:
    spec = parse_spec({"command": ["x"], "nodes": "2", "requeue": {"max_total": 0}})
    assert spec.nodes == 2 and spec.requeue.max_total == 0


def test_job_file_is_named(home: Path) -> None:
    job = home / "job.yaml"
    job.write_text('nodes: true\ncommand: [python, x]\nenv: {"A\\n": "1"}\n', encoding="utf-8")
    result = invoke("--site", "sandbox", "render", "-f", str(job))
    refused(result, str(job), "nodes: must be a valid integer", "env.'A\\n'")


def test_submit_dry_run_refuses_before_anything_runs(home: Path) -> None:
    canary = home / "canary"
    result = invoke(
        "--site", "sandbox", "submit", "--dry-run", "-e", f"BASH_ENV={canary}", "--", "true"
    )
    refused(result, "env.BASH_ENV")
    assert not canary.exists()
    assert not (home / "home" / "hpcjobs").exists()


# ---- the flag helpers of submit --------------------------------------------------------------


def test_parse_max_requeues() -> None:
    assert parse_max_requeues("5", {}) == {"max_total": 5}
    assert parse_max_requeues("timeout=2", {}) == {"max_requeues": {"timeout": 2}}
    for bad in ["99999999999999999999", "x", "timeout=", "timeout=-1", "=3", "1e3"]:
        with pytest.raises(BadInputError, match="--max-requeues"):
            parse_max_requeues(bad, {})


def test_flags_to_fields_does_not_drop_empty_values() -> None:
    with pytest.raises(BadInputError, match="--signal"):
        flags_to_fields({"signal": ""})
    assert flags_to_fields({"container_image": ""})["container"] == {"image": ""}


@pytest.mark.parametrize("value", ["USR2", "usr2@30", "@30", "B:TERM@60", "SIGHUP"])
def test_parse_signal_option_accepts(value: str) -> None:
    assert parse_signal_option(value)


@pytest.mark.parametrize("value", ["SIG_IGN", "USR2 ", " USR2", "USR2@", "USR2@0", "USR2@1_0"])
def test_parse_signal_option_refuses(value: str) -> None:
    with pytest.raises(BadInputError, match="--signal"):
        parse_signal_option(value)


def test_count_param_type_is_strict() -> None:
    @click.command()
    @click.option("-N", "--nodes", type=Count(1))
    def show(nodes: int) -> None:
        click.echo(str(nodes))

    runner = CliRunner()
    assert runner.invoke(show, ["-N", "3"]).output == "3\n"
    for bad in ["١", "1_0", " 2", "+2", "0", "99999999999"]:
        result = runner.invoke(show, ["-N", bad])
        assert result.exit_code == 2 and "--nodes" in result.output, (bad, result.output)


# ---- site config and environment -------------------------------------------------------------


def _site_file(home: Path, old: str, new: str) -> Path:
    text = SANDBOX.read_text(encoding="utf-8")
    assert old in text
    path = home / "site.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "NCCL_SOCKET_IFNAME: lo",
            'NCCL_SOCKET_IFNAME: lo\n      "NCCL_IB_SL\\n": "1"',
            "nccl_profiles.sandbox.env.'NCCL_IB_SL\\n'",
        ),
        ('NCCL_IB_DISABLE: "1"', 'IFS: "1"', "nccl_profiles.sandbox.env.IFS"),
        ('NCCL_IB_DISABLE: "1"', 'SLURM_X: "1"', "reserved"),
        ("signal: USR2", "signal: _IGN", "requeue.signal"),
        ("signal: USR2", "signal: SIG_DFL", "requeue.signal"),
        ("signal: USR2", "signal: NSIG", "requeue.signal"),
        ('"~/hpcjobs/runs/{job_name}"', '"~/{job_name.__class__}"', "slurm.output_dir"),
        ('"~/hpcjobs/runs/{job_name}"', '"~/{user:>99999999}"', "slurm.output_dir"),
        ('"~/hpcjobs/runs/{job_name}"', '"~/{user!r}"', "slurm.output_dir"),
        ('"~/hpcjobs/runs/{job_name}"', '"~/{0}"', "slurm.output_dir"),
        ("max_nodes: 3", "max_nodes: true", "partitions.0.max_nodes: must be a valid integer"),
        ("max_nodes: 3", "max_nodes: 99999999999", "partitions.0.max_nodes"),
        ("preemption: 20", "preemption: 99999999999999999999", "requeue.max_requeues.preemption"),
        ("lead_time: 60", "lead_time: yes", "requeue.lead_time"),
        ('time: "00:10:00"', 'time: "00:10:00\\n"', "slurm.time"),
        ('time: "00:10:00"', 'time: "١٠"', "slurm.time"),
        ('cpus: "0"', 'cpus: "٠"', "cpus"),
        ("account: sandbox", 'account: "sand\\x85box"', "slurm.account"),
        ("modules: []", 'modules: ["-f"]', "setup.modules.0"),
        ("runtime: none", 'runtime: pyxis\n    image: "-x"', "setup.container.image"),
        ('login_hosts: ["localhost"]', 'login_hosts: ["-oProxyCommand=x"]', "login_hosts.0"),
        ('description: "Local', 'description: "\\u2028Local', "description"),
    ],
)
def test_site_validate_refuses(home: Path, old: str, new: str, needle: str) -> None:
    path = _site_file(home, old, new)
    result = invoke("site", "validate", str(path))
    refused(result, "site.yaml", needle)
    with pytest.raises(BadInputError) as info:
        load_site(path)
    assert needle in info.value.message


def test_site_env_name_warning_is_not_doubled(home: Path) -> None:
    path = _site_file(
        home, "NCCL_SOCKET_IFNAME: lo", 'NCCL_SOCKET_IFNAME: lo\n      "NCCL_IB_SL\\n": "1"'
    )
    result = invoke("site", "validate", str(path))
    assert "unknown NCCL variable" not in result.output


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("HPCJOBS_REQUEUE_LEAD_TIME", " 60", "whole number"),
        ("HPCJOBS_REQUEUE_LEAD_TIME", "٦٠", "digits 0-9 only"),
        ("HPCJOBS_REQUEUE_LEAD_TIME", "99999999999999999999", "less than or equal"),
        ("HPCJOBS_QOS", "a\nb", "control characters"),
        ("HPCJOBS_ACCOUNT", "a\x85b", "NEL"),
        ("HPCJOBS_REQUEUE_SIGNAL", "SIG_IGN", "not a signal"),
        ("HPCJOBS_OUTPUT_DIR", "~/{user.__class__}", "unknown placeholder"),
        ("HPCJOBS_CONTAINER_IMAGE", "-x", "starts with '-'"),
    ],
)
def test_hpcjobs_variables_are_checked(name: str, value: str, needle: str) -> None:
    result = invoke("--site", "sandbox", "render", "--", "python", "x.py", env={name: value})
    refused(result, name, needle)


# ---- the Python API --------------------------------------------------------------------------


@pytest.fixture
def site() -> SiteConfig:
    return load_site("sandbox")


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"nodes": True}, "nodes"),
        ({"max_requeues": 99999999999999}, "requeue.max_total"),
        ({"max_requeues": {"timeout": True}}, "requeue.max_requeues.timeout"),
        ({"signal": "SIG_IGN"}, "requeue.signal"),
        ({"env": {"IFS": "x"}}, "env.IFS"),
        ({"env": {"A\n": "x"}}, "env.'A\\n'"),
        ({"job_name": "a\x85b"}, "name"),
        ({"mem_gb": True}, "mem_gb"),
        ({"mem_gb": float("inf")}, "mem_gb"),
        ({"mem_gb": "lots"}, "mem_gb"),
        ({"array_parallelism": "many"}, "array_parallelism"),
        ({"comment": "a\u2028b"}, "comment"),
    ],
)
def test_executor_parameters_use_the_same_rules(
    site: SiteConfig, tmp_path: Path, params: dict[str, Any], needle: str
) -> None:
    from hpcjobs.submitit.executor import HpcExecutor

    executor = HpcExecutor(tmp_path / "ex", site=site)
    with pytest.raises(BadInputError) as info:
        executor.update_parameters(**params)
        executor.render(count=3)
    assert needle in info.value.message, info.value.message
