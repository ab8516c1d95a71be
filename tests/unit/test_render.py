"""Rendering: sbatch argv, tuning variables with origins, blocks and their overrides, the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.errors import BadInputError, TemplateError
from hpcjobs.script.jobspec import ContainerSpec, JobSpec
from hpcjobs.script.render import render_job
from hpcjobs.script.templating import BLOCKS, Raw, make_environment, quote, render_template


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", "/home/user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def dgx() -> SiteConfig:
    return load_site("dgx-h100-ib")


def site_with(**changes: Any) -> SiteConfig:
    """The dgx site with top-level sections replaced (for profile and topology cases)."""
    data = load_site("dgx-h100-ib").model_dump()
    data.update(changes)
    return SiteConfig.model_validate(data)


def exports(script: str) -> dict[str, str]:
    """``NAME -> 'value  # origin'`` for every top-level export line."""
    rows = {}
    for line in script.splitlines():
        if line.startswith("export ") and "=" in line:
            name, _, rest = line.removeprefix("export ").partition("=")
            rows[name] = rest
    return rows


def test_sbatch_args_carry_every_scheduler_option(dgx: SiteConfig) -> None:
    spec = JobSpec(
        name="big",
        nodes=16,
        time="12:00:00",
        account="proj",
        qos="high",
        array="0-3",
        dependency="afterok:7",
        chdir="/proj",
        sbatch_options=["--exclusive"],
        command=["python", "train.py"],
    )
    rendered = render_job(spec, dgx)
    assert rendered.sbatch_args == [
        "--job-name=big",
        "--partition=batch",
        "--nodes=16",
        "--ntasks-per-node=8",
        "--cpus-per-task=28",
        "--gpus-per-node=h100:8",
        "--time=12:00:00",
        "--account=proj",
        "--qos=high",
        "--chdir=/proj",
        "--output=/home/user/hpcjobs/runs/big/slurm-%A_%a.out",
        "--open-mode=append",
        "--signal=B:USR2@300",
        "--requeue",
        "--array=0-3",
        "--dependency=afterok:7",
        "--exclusive",
    ]
    assert rendered.sbatch_argv("/x/job.sh")[:2] == ["sbatch", "--parsable"]
    assert rendered.sbatch_argv("/x/job.sh")[-1] == "/x/job.sh"
    assert rendered.site_name == "dgx-h100-ib"
    assert rendered.output_dir == Path("/home/user/hpcjobs/runs/big")
    assert set(rendered.blocks) == {"main", *BLOCKS}
    for line in rendered.script.splitlines():
        if line.startswith("#SBATCH "):
            assert line.removeprefix("#SBATCH ") in rendered.sbatch_args


def test_torchrun_asks_one_task_per_node_with_all_cpus(dgx: SiteConfig) -> None:
    rendered = render_job(JobSpec(launcher="torchrun", command=["python", "t.py"]), dgx)
    assert "--ntasks-per-node=1" in rendered.sbatch_args
    assert "--cpus-per-task=224" in rendered.sbatch_args
    assert "--nproc-per-node=8" in rendered.script
    assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in rendered.script
    assert '--rdzv-id="${SLURM_JOB_ID:-0}"' in rendered.script


def test_tuning_variables_carry_their_origin(dgx: SiteConfig) -> None:
    spec = JobSpec(env={"NCCL_IB_RETRY_CNT": "3", "UCX_TLS": "rc", "MY_VAR": "x"}, command=["x"])
    rows = exports(render_job(spec, dgx).script)
    assert rows["NCCL_IB_HCA"].endswith("# topology dgx-h100")
    assert "mlx5_8" not in rows["NCCL_IB_HCA"]  # the storage NIC
    assert rows["NCCL_SOCKET_IFNAME"] == "bond0  # topology dgx-h100"
    assert rows["NCCL_NET_GDR_LEVEL"] == "PHB  # topology dgx-h100"
    assert rows["NCCL_IB_QPS_PER_CONNECTION"] == "4  # profile production"
    assert rows["NCCL_IB_TIMEOUT"] == "23  # partition batch"
    assert rows["NCCL_IB_RETRY_CNT"] == "3  # user override"
    assert rows["UCX_TLS"] == "rc  # user override"
    assert rows["MY_VAR"] == "x  # job"
    assert "NCCL_IB_GID_INDEX" not in rows  # InfiniBand, not RoCE


def test_roce_sets_gid_index_from_the_topology() -> None:
    site = load_site("a100-roce")
    data = site.model_dump()
    data["nccl_profiles"]["roce"]["env"].pop("NCCL_IB_GID_INDEX")
    rows = exports(render_job(JobSpec(command=["x"]), SiteConfig.model_validate(data)).script)
    assert rows["NCCL_IB_GID_INDEX"] == "3  # topology a100-roce"


def test_debug_variables_only_with_nccl_debug() -> None:
    site = site_with(
        nccl_profiles={
            "production": {
                "env": {"NCCL_IB_TIMEOUT": "22", "NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO"}
            }
        }
    )
    quiet = exports(render_job(JobSpec(command=["x"]), site).script)
    assert "NCCL_ALGO" not in quiet and "NCCL_DEBUG" not in quiet
    assert quiet["NCCL_IB_TIMEOUT"] == "23  # partition batch"
    loud = exports(render_job(JobSpec(command=["x"], nccl_debug=True), site).script)
    assert loud["NCCL_ALGO"] == "Ring  # profile production"
    assert loud["NCCL_DEBUG"] == "INFO  # --nccl-debug"
    assert loud["NCCL_DEBUG_SUBSYS"] == "INIT,NET  # --nccl-debug"


def test_nccl_debug_takes_only_debug_variables_from_debug_profiles(dgx: SiteConfig) -> None:
    rows = exports(render_job(JobSpec(command=["x"], nccl_debug=True), dgx).script)
    assert rows["NCCL_DEBUG"] == "INFO  # profile debug (--nccl-debug)"
    assert rows["NCCL_DEBUG_SUBSYS"] == "INIT,NET,GRAPH  # profile debug (--nccl-debug)"
    assert rows["NCCL_IB_TIMEOUT"] == "23  # partition batch"  # not the debug profile's 22
    plain = exports(render_job(JobSpec(command=["x"]), dgx).script)
    assert plain["NCCL_DEBUG"] == "WARN  # profile production"  # a quiet level stays


def test_debug_partition_keeps_its_debug_profile(dgx: SiteConfig) -> None:
    rows = exports(render_job(JobSpec(partition="debug", command=["x"]), dgx).script)
    assert rows["NCCL_DEBUG"] == "INFO  # profile debug"


def test_per_rank_nics_only_when_the_topology_chose_them(dgx: SiteConfig) -> None:
    script = render_job(JobSpec(command=["x"]), dgx).script
    assert 'export NCCL_IB_HCA="=$nics" UCX_NET_DEVICES="$nics"' in script
    pinned = render_job(JobSpec(env={"NCCL_IB_HCA": "=mlx5_0"}, command=["x"]), dgx).script
    assert 'NCCL_IB_HCA="=$nics"' not in pinned
    assert exports(pinned)["NCCL_IB_HCA"] == "'=mlx5_0'  # user override"


def test_no_bind_and_none_launcher_skip_placement(dgx: SiteConfig) -> None:
    unbound = render_job(JobSpec(bind=False, command=["x"]), dgx)
    assert unbound.binding is None
    assert "hpcjobs_bind_exec" not in unbound.script
    assert 'export RANK="${SLURM_PROCID:-0}"' in unbound.script
    plain = render_job(JobSpec(launcher="none", command=["x"]), dgx)
    assert plain.binding is None and "srun" not in plain.script.split("# --- launch")[1]


def test_partition_without_topology_renders_without_binding() -> None:
    site = load_site("a100-roce")
    rendered = render_job(JobSpec(partition="cpu", launcher="srun", command=["x"]), site)
    assert rendered.binding is None
    assert "--gpus-per-node" not in " ".join(rendered.sbatch_args)


def test_containers(dgx: SiteConfig) -> None:
    spec = JobSpec(
        container={"image": "nvcr.io#nvidia/pytorch:24.05", "mounts": ["/d:/d"], "workdir": "/w"},  # type: ignore[arg-type]
        command=["python", "t.py"],
    )
    script = render_job(spec, dgx).script
    assert "'--container-image=nvcr.io#nvidia/pytorch:24.05'" in script
    assert "--container-mounts=/lustre:/lustre,/d:/d" in script
    assert "--container-workdir=/w" in script
    roce = load_site("a100-roce")
    script = render_job(spec.model_copy(update={"container": None}), roce).script
    assert "apptainer" not in script  # the site has no default image
    apptainer = render_job(
        JobSpec(container={"image": "/img.sif"}, command=["x"]),  # type: ignore[arg-type]
        roce,
    ).script
    assert "hpcjobs-rank apptainer exec --nv --bind /scratch:/scratch /img.sif" in apptainer


def test_enroot_refuses_a_workdir() -> None:
    site = site_with(setup={"container": {"runtime": "enroot"}})
    spec = JobSpec(container={"image": "img", "workdir": "/w"}, command=["x"])  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="enroot"):
        render_job(spec, site)
    ok = render_job(spec.model_copy(update={"container": ContainerSpec(image="i")}), site)
    assert "enroot start" in ok.script


def test_script_ends_in_its_supervisor_with_the_jobs_policy(tmp_path: Path) -> None:
    from hpcjobs.config.models import MaxRequeues
    from hpcjobs.jobs.supervisorapp import supervisor_path
    from tests.unit.test_requeue import script_policy

    spec = JobSpec(
        command=["python", "t.py"],
        output_dir=str(tmp_path / "out"),
        requeue={"signal": "USR1", "lead_time": 120, "max_requeues": {"preemption": 2}},
        stall_timeout=600,
        sbatch_options=["--begin=now+1hour", "--exclusive"],
    )  # type: ignore[arg-type]
    rendered = render_job(spec, load_site("sandbox"))
    assert rendered.supervisor == supervisor_path(tmp_path / "out")
    assert rendered.supervisor.name.startswith("supervisor-")
    assert str(rendered.supervisor) in rendered.script
    lines = rendered.script.rstrip("\n").split("\n")
    (start,) = [i for i, ln in enumerate(lines) if ln.startswith('exec "$HPCJOBS_PYTHON" -E -s')]
    assert '--script "$0" --policy "$hpcjobs_policy" --' in lines[start]
    assert lines[-1].strip() == "python t.py"  # the launcher's argv follows, and nothing else
    policy = script_policy(rendered.script)
    assert (policy.signal, policy.lead, policy.stall_timeout) == ("USR1", 120, 600)
    assert policy.budgets == {**MaxRequeues().model_dump(), "preemption": 2}
    assert "--exclusive" in policy.sbatch_args
    assert not any(a.startswith("--begin") for a in policy.sbatch_args)


def test_one_block_can_be_overridden(dgx: SiteConfig, tmp_path: Path) -> None:
    blocks = tmp_path / "tpl" / "blocks"
    blocks.mkdir(parents=True)
    (blocks / "launch.sh.j2").write_text(
        "# custom launch for {{ job.name }}\nexec {{ command | shjoin }}\n",
        encoding="utf-8",
    )
    rendered = render_job(
        JobSpec(name="a b", command=["x", "y z"]), dgx, template_dirs=[tmp_path / "tpl"]
    )
    assert "# custom launch for 'a b'\nexec x 'y z'\n" in rendered.script
    assert rendered.blocks["launch"] == str(blocks / "launch.sh.j2")
    assert rendered.blocks["binding"].endswith("templates/blocks/binding.sh.j2")


def test_template_path_env_and_site_folder(
    dgx: SiteConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_dir = tmp_path / "env" / "blocks"
    env_dir.mkdir(parents=True)
    (env_dir / "launch.sh.j2").write_text("exec {{ command | shjoin }}  # env\n", encoding="utf-8")
    monkeypatch.setenv("HPCJOBS_TEMPLATE_PATH", str(tmp_path / "env"))
    site_dir = tmp_path / "sites" / "dgx-h100-ib.templates" / "blocks"
    site_dir.mkdir(parents=True)
    (site_dir / "nccl.sh.j2").write_text("# site nccl\n", encoding="utf-8")
    monkeypatch.setenv("HPCJOBS_SITE_PATH", str(tmp_path / "sites"))
    rendered = render_job(JobSpec(command=["x"]), dgx)
    assert rendered.blocks["launch"] == str(env_dir / "launch.sh.j2")
    assert rendered.blocks["nccl"] == str(site_dir / "nccl.sh.j2")
    assert "# site nccl\n" in rendered.script and "# env\n" in rendered.script


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{{ no_such_value }}\n", "undefined value"),
        ("{% if %}\n", "syntax error"),
        ("{{ job.bind }}\n", "boolean"),
        ("{{ 'a\nb' }}\n", "control characters"),
    ],
)
def test_template_errors_are_exit_2(
    dgx: SiteConfig, tmp_path: Path, text: str, needle: str
) -> None:
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    (blocks / "launch.sh.j2").write_text(text, encoding="utf-8")
    with pytest.raises(TemplateError, match=needle) as info:
        render_job(JobSpec(command=["x"]), dgx, template_dirs=[tmp_path])
    assert info.value.exit_code == 2


def test_unknown_main_template(dgx: SiteConfig) -> None:
    with pytest.raises(TemplateError, match="was not found"):
        render_job(JobSpec(template="nope", command=["x"]), dgx)


def test_quote_and_raw() -> None:
    assert quote("a b") == "'a b'"
    assert quote("=x") == "'=x'"
    assert quote(3) == "3"
    assert quote(Raw("$HOME")) == "$HOME"
    env = make_environment([("t", Path("/nonexistent"))])
    template = env.from_string("{{ x }} {{ x | raw }} {{ xs | shjoin }}")
    assert template.render(x="$(id)", xs=["a b", "c"]) == "'$(id)' $(id) 'a b' c"
    with pytest.raises(TemplateError, match="was not found"):
        render_template(env, "missing.sh.j2", {})


def test_render_cli_prints_script_and_sbatch_line(tmp_path: Path) -> None:
    out = str(tmp_path / "out")  # render writes the supervisor there (test_supervisorapp.py)
    argv = ["--site", "sandbox", "render", "-N", "2", "-J", "x y", "--output-dir", out]
    result = CliRunner().invoke(cli, [*argv, "--", "python", "t.py"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert lines[-2].startswith("# --- dry run: nothing was submitted; hpcjobs would run")
    assert lines[-1].startswith("# sbatch --parsable '--job-name=x y' --partition=batch --nodes=2 ")
    assert lines[-1].endswith(" '--comment=hpcjobs:<token>' SUBMITDIR/job.sh")


def test_submit_dry_run_and_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: from-file\nnodes: 3\ncommand: [python, t.py]\n", encoding="utf-8")
    monkeypatch.setenv("SBATCH_PARTITION", "urgent")
    result = CliRunner().invoke(
        cli, ["--site", "sandbox", "submit", "--dry-run", "-f", str(job), "-N", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "--job-name=from-file --partition=batch --nodes=2 " in result.stdout
    assert "ignoring inherited SBATCH_PARTITION" in result.stderr


def test_submit_cli_bad_input_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--site", "sandbox", "submit", "--dry-run", "-N", "9", "x"])
    assert result.exit_code == 2 and "allows at most 3" in result.output
    result = runner.invoke(cli, ["--site", "sandbox", "submit", "--dry-run"])
    assert result.exit_code == 2 and "no command to run" in result.output
    result = runner.invoke(cli, ["--site", "sandbox", "render", "--container-mount", "/a", "x"])
    assert result.exit_code == 2 and "need --container-image" in result.output


def test_template_list_and_show(tmp_path: Path) -> None:
    runner = CliRunner()
    listing = runner.invoke(cli, ["--site", "sandbox", "template", "list"])
    assert listing.exit_code == 0, listing.output
    for block in BLOCKS:
        assert f"  {block}" in listing.stdout
    assert "built-in" in listing.stdout
    override = tmp_path / "blocks"
    override.mkdir()
    (override / "launch.sh.j2").write_text("# mine\n", encoding="utf-8")
    shown = runner.invoke(cli, ["template", "show", "launch", "--template-dir", str(tmp_path)])
    assert shown.exit_code == 0 and shown.stdout == "# mine\n"
    main = runner.invoke(cli, ["template", "show", "job"])
    assert main.exit_code == 0 and main.stdout.startswith("#!/bin/bash")
    missing = runner.invoke(cli, ["template", "show", "nope"])
    assert missing.exit_code == 2
