"""``hpcjobs site list|show|validate|discover`` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hpcjobs.cli import cli

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "site-configs" / "sandbox.yaml"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    return tmp_path


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert "Traceback" not in result.output
    return result


def test_list_shows_builtin_sites_and_where() -> None:
    result = invoke("site", "list")
    assert result.exit_code == 0
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert {"sandbox", "dgx-h100-ib", "a100-roce"} <= set(lines)
    assert "built-in" in lines["sandbox"] and str(SANDBOX) in lines["sandbox"]


def test_list_json_marks_shadowed(home: Path) -> None:
    folder = home / ".config" / "hpcjobs" / "sites"
    folder.mkdir(parents=True)
    (folder / "sandbox.yaml").write_text(SANDBOX.read_text())
    rows = json.loads(invoke("site", "list", "--json").output)
    sandbox = [r for r in rows if r["name"] == "sandbox"]
    assert [r["source"] for r in sandbox] == ["user", "built-in"]
    assert sandbox[0]["shadowed_by"] is None
    assert sandbox[1]["shadowed_by"] == str(folder / "sandbox.yaml")


def test_show_yaml_and_json() -> None:
    result = invoke("site", "show", "sandbox")
    assert result.exit_code == 0
    assert "name: sandbox" in result.output and "bootstrap_interface: lo" in result.output
    data = json.loads(invoke("site", "show", "dgx-h100-ib", "--json").output)
    assert data["topologies"]["dgx-h100"]["nics"][8]["nccl"] is False


def test_show_uses_the_global_site_option() -> None:
    result = invoke("--site", str(SANDBOX), "site", "show", "--json")
    assert json.loads(result.output)["name"] == "sandbox"
    result = invoke("site", "show", "--json", env={"HPCJOBS_SITE": "a100-roce"})
    assert json.loads(result.output)["name"] == "a100-roce"


def test_show_origin_like_git_config(home: Path) -> None:
    user = home / ".config" / "hpcjobs" / "config.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("slurm:\n  qos: mine\n")
    result = invoke("site", "show", "sandbox", "--origin", env={"HPCJOBS_ACCOUNT": "proj"})
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert f"file:{SANDBOX}:4\tname=sandbox" in lines
    assert f"file:{user}:2\tslurm.qos=mine" in lines
    assert "env:HPCJOBS_ACCOUNT\tslurm.account=proj" in lines
    assert "default\tsetup.container.image=null" in lines
    rows = json.loads(invoke("site", "show", "sandbox", "--origin", "--json").output)["values"]
    assert {"key": "name", "value": "sandbox", "origin": f"file:{SANDBOX}:4"} in rows


def test_show_without_a_matching_site_exits_2() -> None:
    result = invoke("site", "show")
    assert result.exit_code == 2
    assert "no site config matches this host" in result.output
    assert "Hint:" in result.output


def test_show_invalid_site_lists_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\npartitions:\n  - {name: a, cpus_per_node: 0, memory_mb: 0, max_nodes: 1}\n"
    )
    result = invoke("site", "show", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:3: partitions.0.cpus_per_node" in result.output
    assert f"{bad}:3: partitions.0.memory_mb" in result.output


@pytest.mark.parametrize("args", [["--site", "/no/such.yaml"], ["--site", "nosuchsite"]])
def test_global_site_missing_exits_2(args: list[str]) -> None:
    result = invoke(*args, "site", "show")
    assert result.exit_code == 2
    assert args[1].split("/")[-1] in result.output


def test_validate_all_builtin_sites() -> None:
    result = invoke("site", "validate", "--all")
    assert result.exit_code == 0, result.output
    assert result.output.count(": ok") == 3


def test_validate_by_name_and_strict_warnings(tmp_path: Path) -> None:
    assert invoke("site", "validate", "sandbox").exit_code == 0
    warn = tmp_path / "warn.yaml"
    warn.write_text(
        "name: w\npartitions:\n"
        "  - {name: g, gpus_per_node: 2, cpus_per_node: 2, memory_mb: 1, max_nodes: 1}\n"
    )
    result = invoke("site", "validate", str(warn))
    assert result.exit_code == 0
    assert "warning: GPU partition 'g' has no topology" in result.output
    assert invoke("site", "validate", "--strict", str(warn)).exit_code == 2


def test_validate_without_arguments_is_a_usage_error() -> None:
    result = invoke("site", "validate")
    assert result.exit_code == 2
    assert "--all" in result.output


def test_discover_writes_a_private_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcjobs.config import discover
    from hpcjobs.slurm.client import SlurmClient
    from tests.fakes import RecordedRunner

    original = discover.read_cluster

    def recorded(client: object, *, timeout: float = 60.0) -> discover.ClusterSnapshot:
        return original(SlurmClient(RecordedRunner("22.05")), timeout=timeout)

    monkeypatch.setattr(discover, "read_cluster", recorded)
    out = tmp_path / "draft.yaml"
    result = invoke("site", "discover", "--name", "mine", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.stat().st_mode & 0o777 == 0o600
    assert 'name: "mine"' in out.read_text()
    assert invoke("site", "validate", str(out)).exit_code == 0
    assert invoke("--site", str(out), "site", "show", "--json").exit_code == 0


def test_discover_without_slurm_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = invoke("site", "discover")
    assert result.exit_code == 3
    assert "'sinfo' was not found on PATH" in result.output


def test_help_does_not_import_pydantic_or_yaml() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from hpcjobs.cli import main\n"
        "for argv in (['--help'], ['--site', 'sandbox', 'site', '--help']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            main(argv)\n"
        "        except SystemExit:\n"
        "            pass\n"
        "print(sorted(m for m in ('pydantic', 'yaml') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
