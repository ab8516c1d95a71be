"""The sandbox's own site config: the built-in ``sandbox`` site, sized to the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config import SANDBOX_SITE, SITE_ENV
from hpcjobs.resources import site_configs_dir
from hpcjobs.sandbox.layout import Layout, Settings
from hpcjobs.sandbox.site import site_text, sized_site


@pytest.mark.parametrize(("nodes", "gpus"), [(8, 8), (128, 8), (2, 1), (3, 4), (5, 3)])
def test_the_site_is_the_sandboxs_size_and_validates(tmp_path: Path, nodes: int, gpus: int) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(site_text(Settings(nodes=nodes, gpus_per_node=gpus)))
    data = yaml.safe_load(site.read_text())
    for part in data["partitions"]:
        assert (part["nodes"], part["max_nodes"], part["gpus_per_node"]) == (nodes, nodes, gpus)
    numa = data["topologies"]["sandbox-node"]["numa"]
    assert sorted(g for domain in numa for g in domain["gpus"]) == list(range(gpus))
    result = CliRunner().invoke(cli, ["site", "validate", str(site)])
    assert result.exit_code == 0, result.output


def test_the_default_size_is_the_built_in_site() -> None:
    built_in = yaml.safe_load((site_configs_dir() / f"{SANDBOX_SITE}.yaml").read_text())
    sized = sized_site(Settings())
    assert {**sized, "description": ""} == {**built_in, "description": ""}


def test_env_points_at_the_site_up_wrote(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert layout.shell_env()[SITE_ENV] == SANDBOX_SITE  # nothing written yet
    layout.etc.mkdir()
    layout.site_file.write_text(site_text(Settings(nodes=8, gpus_per_node=8)))
    assert layout.shell_env()[SITE_ENV] == str(layout.site_file)
    result = CliRunner().invoke(cli, ["sandbox", "env", "--state-dir", str(tmp_path)])
    assert f"export HPCJOBS_SITE={layout.site_file}" in result.stdout.splitlines()


@pytest.mark.parametrize("nodes", [8, 128])
def test_a_job_of_the_sandboxs_size_renders_against_its_site(tmp_path: Path, nodes: int) -> None:
    """What `eval "$(hpcjobs sandbox env)"` leaves in the shell after `up --nodes N
    --gpus-per-node 8` takes a job of N nodes x 8 GPUs (the docs show 8 and 128); the built-in
    site refuses it."""
    layout = Layout(tmp_path)
    layout.etc.mkdir()
    layout.site_file.write_text(site_text(Settings(nodes=nodes, gpus_per_node=8)))
    argv = ["render", "-N", str(nodes), "--ntasks-per-node", "8", "--gpus-per-node", "8"]
    argv += ["--", "true"]
    result = CliRunner().invoke(cli, argv, env=layout.shell_env())
    assert result.exit_code == 0, result.output
    refused = CliRunner().invoke(cli, argv, env={**layout.shell_env(), SITE_ENV: SANDBOX_SITE})
    assert refused.exit_code == 2
    assert "have 4" in refused.output
