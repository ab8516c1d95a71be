"""Injection corpus: nasty values reach the program byte for byte and never run anything.

The rendered scripts really run here, under bash, with stand-ins for srun, scontrol and
torchrun (tests/data/jobs/fakebin) and the real numactl/taskset.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.config.models import SiteConfig
from hpcjobs.jobs.supervisorapp import write_supervisor
from hpcjobs.script.jobspec import JobSpec
from hpcjobs.script.render import RenderedJob, is_directive_safe, render_job

FAKEBIN = Path(__file__).resolve().parents[1] / "data" / "jobs" / "fakebin"

#: Values that break naive quoting. "{canary}" becomes a path that must never be created.
NASTY = [
    "plain",
    "two words",
    "it's",
    'say "hi"',
    "$(touch {canary})",
    "`touch {canary}`",
    "; touch {canary}",
    "&& touch {canary} &&",
    "| tee {canary}",
    "'; touch {canary}; '",
    '"; touch {canary}; "',
    "# not a comment",
    "*",
    "~",
    "$HOME ${PATH}",
    "$((6 * 7))",
    "back\\slash\\",
    "!! !$",
    "{a,b}",
    ">{canary}",
    "<{canary}",
    "ünïcødé ✓ 日本語 🚀",
    "  leading and trailing  ",
    "--flag=value",
    "-",
    "",
    "%j %x %%",
    "=starts-with-equals",
    "trailing backslash \\",
]

REPORTER = """\
import json, os, sys
out = os.path.join(sys.argv[1], "report-%s.json" % os.environ.get("RANK", "0"))
env = {k: v for k, v in os.environ.items() if k.startswith("NASTY_")}
env["HPCJOBS_CHECKPOINT_DIR"] = os.environ.get("HPCJOBS_CHECKPOINT_DIR")
with open(out, "w", encoding="utf-8") as f:
    json.dump({"argv": sys.argv[2:], "env": env}, f)
"""


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SiteConfig:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return load_site("sandbox")


def corpus(canary: Path) -> list[str]:
    return [value.replace("{canary}", str(canary)) for value in NASTY]


def run_script(rendered: RenderedJob, folder: Path) -> subprocess.CompletedProcess[str]:
    assert rendered.supervisor is not None
    write_supervisor(rendered.supervisor)  # where 'hpcjobs submit' puts it
    script = folder / "job.sh"
    script.write_text(rendered.script, encoding="utf-8")
    env = {
        "PATH": f"{FAKEBIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(folder),
        "SLURM_JOB_ID": "4242",
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        ["bash", str(script)], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )


def reports(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("report-*"))]


def test_corpus_is_big_enough() -> None:
    assert len(NASTY) >= 15


@pytest.mark.parametrize(("launcher", "ranks"), [("none", 1), ("srun", 4), ("torchrun", 4)])
def test_args_and_env_reach_every_rank_unchanged(
    site: SiteConfig, tmp_path: Path, launcher: str, ranks: int
) -> None:
    canary = tmp_path / "canary"
    values = corpus(canary)
    reporter = tmp_path / "reporter.py"
    reporter.write_text(REPORTER, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    env = {f"NASTY_{i}": v for i, v in enumerate(values)}
    spec = JobSpec(
        name="inject",
        launcher=launcher,  # type: ignore[arg-type]
        torchrun=str(FAKEBIN / "torchrun"),
        output_dir=str(tmp_path / "run"),
        env=env,
        command=[sys.executable, str(reporter), str(out), *values],
    )
    rendered = render_job(spec, site)
    result = run_script(rendered, tmp_path)
    assert result.returncode == 0, result.stderr
    rows = reports(out)
    assert len(rows) == ranks, result.stderr
    for row in rows:
        assert row["argv"] == values
        got = dict(row["env"])  # type: ignore[call-overload]
        assert got.pop("HPCJOBS_CHECKPOINT_DIR") == rendered.spec.checkpoint_dir
        assert got == env
    assert not canary.exists()


@pytest.mark.parametrize("value", NASTY)
def test_name_and_paths_never_execute(site: SiteConfig, tmp_path: Path, value: str) -> None:
    canary = tmp_path / "canary"
    nasty = value.replace("{canary}", str(canary))
    reporter = tmp_path / "reporter.py"
    reporter.write_text(REPORTER, encoding="utf-8")
    spec = JobSpec(
        name=nasty or "x",
        launcher="none",
        output_dir=str(tmp_path / "run"),
        checkpoint_dir=str(tmp_path / f"ck{nasty}"),
        command=[sys.executable, str(reporter), str(tmp_path)],
    )
    rendered = render_job(spec, site)
    assert f"--job-name={nasty or 'x'}" in rendered.sbatch_args
    for line in rendered.script.splitlines():
        if line.startswith("#SBATCH"):
            assert is_directive_safe(line.removeprefix("#SBATCH "))
    result = run_script(rendered, tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = reports(tmp_path)
    expected = os.path.normpath(tmp_path / f"ck{nasty}")
    assert row["env"] == {"HPCJOBS_CHECKPOINT_DIR": expected}
    assert Path(expected).is_dir()
    assert not canary.exists()


def test_unsafe_values_stay_off_sbatch_lines(site: SiteConfig) -> None:
    spec = JobSpec(
        name="a b #c",
        output_dir="/tmp/has space",
        sbatch_options=["--comment=x y", "--exclusive", "--mail-user=a@b.c"],
        command=["x"],
    )
    rendered = render_job(spec, site)
    directives = [
        line.removeprefix("#SBATCH ")
        for line in rendered.script.splitlines()
        if line.startswith("#SBATCH")
    ]
    assert "--exclusive" in directives and "--mail-user=a@b.c" in directives
    assert not any("a b" in d or "has space" in d or "x y" in d for d in directives)
    assert "--job-name=a b #c" in rendered.sbatch_args
    assert "--comment=x y" in rendered.sbatch_args


@pytest.mark.parametrize(
    "args",
    [
        ["-J", "a\nb", "--", "x"],
        ["--", "python", "a\nb"],
        ["--", "python", "a\rb"],
        ["-e", "X=a\x1bb", "--", "x"],
        ["--checkpoint-dir", "/tmp/a\nb", "--", "x"],
        ["--output-dir", "/tmp/a\tb", "--", "x"],
        ["--sbatch", "--comment=a\nb", "--", "x"],
        ["--container-image", "img\n", "--", "x"],
    ],
)
def test_cli_refuses_control_characters_with_exit_2(site: SiteConfig, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["--site", "sandbox", "render", *args])
    assert result.exit_code == 2, result.output
    assert "control characters" in result.output


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("--job-name=x", "set by hpcjobs"),
        ("--export=NONE", "set by hpcjobs"),
        ("--wrap=rm -rf ~", "set by hpcjobs"),
        ("-p urgent", "not of the form"),
        ("--no-such-option", "not an sbatch option"),
        ("--mem", "needs a value"),
        ("--contiguous=yes", "takes no value"),
    ],
)
def test_extra_sbatch_options_are_checked(site: SiteConfig, option: str, needle: str) -> None:
    result = CliRunner().invoke(cli, ["--site", "sandbox", "render", f"--sbatch={option}", "x"])
    assert result.exit_code == 2
    assert needle in result.output
