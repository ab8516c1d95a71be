"""What a new user trips on: every such error names its cause and says what to do."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config import SANDBOX_SITE, SITE_ENV
from hpcjobs.config.locate import select_site_for_host
from hpcjobs.errors import EXIT_BAD_INPUT, EXIT_SLURM, ConfigError, TemplateError
from hpcjobs.sandbox.layout import SANDBOX_ENV_COMMAND, Layout
from hpcjobs.script.render import master_port_expr
from hpcjobs.slurm.classify import ErrorKind, SlurmCommandError, classify_text, config_hint

DOCS = Path(__file__).resolve().parents[2] / "docs"

NO_CONFIG_STDERR = """\
sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host
sbatch: error: fetch_config: DNS SRV lookup failed
sbatch: error: _establish_config_source: failed to fetch config
sbatch: fatal: Could not establish a configuration source
"""
MISSING_CONF_STDERR = """\
sbatch: error: s_p_parse_file: cannot stat file /nope/slurm.conf: No such file or directory, \
retrying in 1sec up to 60sec
sbatch: error: ClusterName needs to be specified
sbatch: fatal: Unable to process configuration file
"""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpcjobs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


# ---- 7: the sandbox selects its site; a missing SLURM_CONF gets a hint ---------------------


def test_sandbox_env_exports_slurm_conf_and_the_sandbox_site(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["sandbox", "env", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"export SLURM_CONF={tmp_path / 'etc' / 'slurm.conf'}",
        "export HPCJOBS_SITE=sandbox",
    ]
    as_json = CliRunner().invoke(cli, ["sandbox", "env", "--json", "--state-dir", str(tmp_path)])
    assert '"HPCJOBS_SITE": "sandbox"' in as_json.stdout


def test_shell_env_is_the_client_env_plus_the_site(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.shell_env() == {**layout.client_env(), SITE_ENV: SANDBOX_SITE}
    # Slurm clients and daemons started by the sandbox get only what Slurm needs.
    assert SITE_ENV not in layout.client_env()


def test_the_sandbox_env_selects_the_sandbox_site(tmp_path: Path) -> None:
    """What `eval "$(hpcjobs sandbox env)"` leaves in the shell is enough for `render`."""
    env = Layout(tmp_path).shell_env()
    result = CliRunner().invoke(cli, ["render", "--", "true"], env=env)
    assert result.exit_code == 0, result.output
    assert "# Job script rendered by hpcjobs for site sandbox, partition batch." in result.stdout


def test_no_site_for_this_host_points_at_sandbox_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        select_site_for_host("laptop")
    hint = info.value.hint or ""
    assert SITE_ENV in hint
    assert SANDBOX_ENV_COMMAND in hint and "HPCJOBS_SITE (the sandbox's site)" in hint


def test_missing_slurm_conf_hint() -> None:
    hint = config_hint(NO_CONFIG_STDERR)
    assert hint is not None
    assert "SLURM_CONF is not set" in hint
    assert "cannot find the cluster config" in hint
    assert 'eval "$(hpcjobs sandbox env)"' in hint
    # Not worth retrying: nothing will change until the shell is set up.
    assert classify_text(NO_CONFIG_STDERR) is ErrorKind.PERMANENT


def test_unreadable_slurm_conf_hint_names_the_file() -> None:
    hint = config_hint(MISSING_CONF_STDERR)
    assert hint is not None
    assert "cannot read its config file /nope/slurm.conf" in hint
    assert "SLURM_CONF" in hint and "hpcjobs sandbox status" in hint


def test_other_slurm_errors_get_no_config_hint() -> None:
    assert config_hint("sbatch: error: Invalid partition name specified") is None


def test_slurm_command_error_carries_the_config_hint() -> None:
    err = SlurmCommandError(
        "sbatch: Could not establish a configuration source",
        kind=ErrorKind.PERMANENT,
        stderr=NO_CONFIG_STDERR,
    )
    assert err.hint == config_hint(NO_CONFIG_STDERR)
    assert err.exit_code == EXIT_SLURM
    explicit = SlurmCommandError("x", kind=ErrorKind.PERMANENT, stderr=NO_CONFIG_STDERR, hint="h")
    assert explicit.hint == "h"


def test_cli_without_slurm_conf_prints_the_hint(tmp_path: Path) -> None:
    """A real sbatch (or a stand-in printing its words) without any config."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("sbatch", "squeue", "scontrol", "sacct"):
        script = fake / name
        script.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{NO_CONFIG_STDERR}EOF\nexit 1\n")
        script.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = run("status", "--mine", env=env)
    assert proc.returncode == EXIT_SLURM, proc.stderr
    assert "Could not establish a configuration source" in proc.stderr
    assert "Hint: Slurm cannot find the cluster config: SLURM_CONF is not set" in proc.stderr
    assert SANDBOX_ENV_COMMAND in proc.stderr
    assert "Traceback" not in proc.stderr


# ---- 8: a bad HPCJOBS_* value names the variable, not the file ------------------------------


def test_bad_env_time_names_the_variable_in_the_cli() -> None:
    result = CliRunner().invoke(
        cli, ["--site", "sandbox", "render", "--", "true"], env={"HPCJOBS_TIME": "abc"}
    )
    assert result.exit_code == EXIT_BAD_INPUT
    lines = result.output.splitlines()
    assert lines[0].startswith("Error: HPCJOBS_TIME='abc': slurm.time: 'abc' is not a Slurm time")
    assert lines[1] == "Hint: fix or unset HPCJOBS_TIME (it overrides the site config)"
    assert "sandbox.yaml" not in result.output and "site validate" not in result.output


def test_bad_site_env_names_the_variable() -> None:
    result = CliRunner().invoke(cli, ["render", "--", "true"], env={SITE_ENV: "sandbx"})
    assert result.exit_code == EXIT_BAD_INPUT
    assert "Error: HPCJOBS_SITE='sandbx': no site config named 'sandbx'" in result.output
    assert "(did you mean 'sandbox'?)" in result.output
    assert "Hint: fix or unset HPCJOBS_SITE" in result.output


def test_bad_site_flag_is_not_blamed_on_the_env() -> None:
    result = CliRunner().invoke(cli, ["--site", "sandbx", "render", "--", "true"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "Error: no site config named 'sandbx'" in result.output
    assert SITE_ENV not in result.output.splitlines()[0]


# ---- 9: job files, templates, time limits ---------------------------------------------------


def test_job_file_typo_gets_did_you_mean(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("nodse: 2\ncommand: [hostname]\n")
    result = CliRunner().invoke(cli, ["--site", "sandbox", "render", "-f", str(job)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "nodse: unknown field 'nodse' (did you mean 'nodes'?)" in result.output
    assert "Hint: " in result.output


def test_missing_job_file_has_a_hint(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--site", "sandbox", "render", "-f", str(tmp_path / "nosuch.yaml")]
    )
    assert result.exit_code == EXIT_BAD_INPUT
    assert f"Error: job file {tmp_path / 'nosuch.yaml'} does not exist" in result.output
    assert "Hint: check the path given to -f/--file" in result.output


def test_unknown_template_has_a_hint() -> None:
    result = CliRunner().invoke(
        cli, ["--site", "sandbox", "render", "--template", "nosuch", "--", "x"]
    )
    assert result.exit_code == EXIT_BAD_INPUT
    assert "Error: template 'nosuch.sh.j2' was not found" in result.output
    assert "Hint: run 'hpcjobs template list'" in result.output


def test_template_syntax_error_in_a_user_dir_has_a_hint(tmp_path: Path) -> None:
    blocks = tmp_path / "tpl" / "blocks"
    blocks.mkdir(parents=True)
    (blocks / "launch.sh.j2").write_text("{% if launcher %}\necho hi\n")
    args = ["--site", "sandbox", "render", "--template-dir", str(tmp_path / "tpl"), "--", "x"]
    result = CliRunner().invoke(cli, args, env={"HPCJOBS_NO_TEMPLATE_CACHE": "1"})
    assert result.exit_code == EXIT_BAD_INPUT
    assert f"Error: template syntax error at {blocks / 'launch.sh.j2'}:2" in result.output
    assert f"Hint: fix that line, or remove {blocks / 'launch.sh.j2'}" in result.output


def test_template_undefined_value_has_a_hint(tmp_path: Path) -> None:
    blocks = tmp_path / "tpl" / "blocks"
    blocks.mkdir(parents=True)
    (blocks / "launch.sh.j2").write_text("echo {{ no_such_name }}\n")
    args = ["--site", "sandbox", "render", "--template-dir", str(tmp_path / "tpl"), "--", "x"]
    result = CliRunner().invoke(cli, args, env={"HPCJOBS_NO_TEMPLATE_CACHE": "1"})
    assert result.exit_code == EXIT_BAD_INPUT
    assert "'no_such_name' is undefined" in result.output
    assert "Hint: use only the names in the template context" in result.output


@pytest.mark.parametrize("value", ["a\nb", True])
def test_quote_errors_have_hints(value: object) -> None:
    from hpcjobs.script.templating import quote

    with pytest.raises(TemplateError) as info:
        quote(value)
    assert info.value.hint


def test_too_short_time_hint_in_the_cli() -> None:
    result = CliRunner().invoke(cli, ["--site", "sandbox", "render", "-t", "00:30", "--", "x"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "only runs 30 s" in result.output
    hint = next(line for line in result.output.splitlines() if line.startswith("Hint: "))
    assert "up to 60 s earlier than the 60 s lead" in hint and "-t 00:03:00" in hint
    assert "--signal" not in hint


# ---- docs say what the code does -----------------------------------------------------------


def test_debug_is_a_global_option() -> None:
    assert run("--debug", "--site", "/no/such.yaml", "sandbox", "status").returncode != 0
    proc = run("--site", "sandbox", "render", "--debug", "--", "true")
    assert proc.returncode == EXIT_BAD_INPUT and "No such option '--debug'" in proc.stderr
    index = (DOCS / "index.md").read_text()
    assert "hpcjobs --debug submit" in index
    assert not re.search(r"`--debug` \(or", index)


def test_docs_state_the_master_port_formula() -> None:
    text = (DOCS / "templates.md").read_text()
    assert master_port_expr() == "$(( 20000 + SLURM_JOB_ID % 10000 ))"
    assert f"`{master_port_expr()}`, a port in 20000-29999" in text
    assert "% 20000" not in text


def test_docs_describe_restart_count_one_way() -> None:
    text = (DOCS / "templates.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `HPCJOBS_RESTART_COUNT`"))
    assert "number of runs before this one" in row
    assert "`start` events" in row and "`SLURM_RESTART_COUNT`" in row and "larger" in row
