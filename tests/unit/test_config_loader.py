"""Layered loading: precedence, origins, where sites are found, and hostname selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site, load_site_layers
from hpcjobs.config.locate import list_sites, locate_site, select_site_for_host
from hpcjobs.config.problems import InvalidConfigError
from hpcjobs.errors import ConfigError

SITE = """\
name: alpha
hostnames: ["^alpha-login[0-9]+$"]
slurm:
  account: site-acct
  qos: site-qos
  time: "02:00:00"
defaults:
  partition: gpu
partitions:
  - {name: gpu, cpus_per_node: 8, memory_mb: 1000, max_nodes: 4}
  - {name: cpu, cpus_per_node: 8, memory_mb: 1000, max_nodes: 4}
nccl_profiles:
  prod: {env: {NCCL_IB_TIMEOUT: "22"}}
  fast: {env: {NCCL_IB_TIMEOUT: "18"}}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    return tmp_path


@pytest.fixture
def site_file(home: Path) -> Path:
    path = home / "alpha.yaml"
    path.write_text(SITE)
    return path


def write_user(home: Path, text: str) -> Path:
    folder = home / ".config" / "hpcjobs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.yaml"
    path.write_text(text)
    return path


def test_builtin_defaults_fill_what_the_site_leaves_out(site_file: Path) -> None:
    loaded = load_site_layers(site_file, environ={})
    assert loaded.config.requeue.signal == "USR2"
    assert str(loaded.origin_of("requeue.signal")) == "built-in"
    assert str(loaded.origin_of("slurm.time")) == f"file:{site_file}:6"
    assert str(loaded.origin_of("slurm.version")) == "default"


def test_precedence_site_user_env_flags(home: Path, site_file: Path) -> None:
    user = write_user(
        home,
        "slurm:\n  account: user-acct\n  qos: user-qos\n  time: '03:00:00'\n"
        "sites:\n  alpha:\n    slurm: {time: '04:00:00'}\n",
    )
    env = {"HPCJOBS_QOS": "env-qos", "HPCJOBS_ACCOUNT": "env-acct"}
    loaded = load_site_layers(site_file, environ=env, overrides={"slurm.account": "flag-acct"})
    slurm = loaded.config.slurm
    assert slurm.account == "flag-acct"
    assert slurm.qos == "env-qos"
    assert slurm.time == "04:00:00"  # sites.alpha beats the user file's general value
    assert str(loaded.origin_of("slurm.account")) == "command line"
    assert str(loaded.origin_of("slurm.qos")) == "env:HPCJOBS_QOS"
    assert str(loaded.origin_of("slurm.time")) == f"file:{user}:7"
    assert loaded.user_file == user
    # Keys no higher layer touches keep the site file as origin.
    assert str(loaded.origin_of("defaults.partition")) == f"file:{site_file}:8"


def test_user_file_only_applies_its_own_site_section(home: Path, site_file: Path) -> None:
    write_user(home, "sites:\n  other:\n    slurm: {qos: nope}\n")
    assert load_site(site_file, environ={}).slurm.qos == "site-qos"


def test_env_changes_default_partition_and_profile(site_file: Path) -> None:
    env = {
        "HPCJOBS_PARTITION": "cpu",
        "HPCJOBS_NCCL_PROFILE": "fast",
        "HPCJOBS_REQUEUE_LEAD_TIME": "90",
    }
    site = load_site(site_file, environ=env)
    assert site.default_partition.name == "cpu"
    assert site.nccl_env_for(None) == {"NCCL_IB_TIMEOUT": ("18", "profile fast")}
    assert site.requeue.lead_time == 90


def test_bad_env_value_names_the_variable(site_file: Path) -> None:
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={"HPCJOBS_REQUEUE_LEAD_TIME": "soon"})
    assert info.value.message == (
        "HPCJOBS_REQUEUE_LEAD_TIME='soon': requeue.lead_time: must be a whole number, not 'soon'"
    )


def test_bad_env_time_blames_the_variable_not_the_file(site_file: Path) -> None:
    """The site file is fine ('site validate' says so): the error must not send the user there."""
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={"HPCJOBS_TIME": "abc"})
    message, hint = info.value.message, info.value.hint or ""
    assert message.startswith("HPCJOBS_TIME='abc': slurm.time: 'abc' is not a Slurm time")
    assert "is invalid" not in message and str(site_file) not in message
    assert hint == "fix or unset HPCJOBS_TIME (it overrides the site config)"
    assert "site validate" not in hint
    assert info.value.exit_code == 2


def test_several_bad_env_values_are_each_named(site_file: Path) -> None:
    env = {"HPCJOBS_TIME": "abc", "HPCJOBS_PARTITION": "gpus"}
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ=env)
    message = info.value.message
    assert message.startswith("2 invalid values from the environment or command line:")
    assert "  HPCJOBS_TIME='abc': slurm.time: 'abc' is not a Slurm time" in message
    assert "  HPCJOBS_PARTITION='gpus': defaults.partition: partition 'gpus'" in message
    assert info.value.hint == (
        "fix or unset HPCJOBS_TIME, HPCJOBS_PARTITION (they override the site config)"
    )


def test_bad_override_is_named_as_a_command_line_value(site_file: Path) -> None:
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={}, overrides={"slurm.time": "soon"})
    assert info.value.message.startswith("slurm.time='soon' (command line): slurm.time: 'soon'")
    assert "site validate" not in (info.value.hint or "")


def test_env_and_file_errors_together_blame_each_layer(home: Path) -> None:
    path = home / "broken.yaml"
    path.write_text(SITE.replace("max_nodes: 4}\n  - {name: cpu", "max_nodes: -1}\n  - {name: cpu"))
    with pytest.raises(InvalidConfigError) as info:
        load_site(path, environ={"HPCJOBS_TIME": "abc"})
    message, hint = info.value.message, info.value.hint or ""
    assert message.startswith(f"site config {path} is invalid (2 problems):")
    assert "  HPCJOBS_TIME='abc': slurm.time:" in message
    assert f"{path}:10: partitions.0.max_nodes:" in message
    assert hint.startswith("fix or unset HPCJOBS_TIME (it overrides the site config); ")
    assert f"'hpcjobs site validate {path}'" in hint


def test_error_from_a_higher_layer_points_at_that_layer(home: Path, site_file: Path) -> None:
    user = write_user(home, "defaults:\n  partition: gpus\n")
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={})
    message = info.value.message
    assert f"{user}:2: defaults.partition: partition 'gpus' does not exist" in message
    assert "did you mean 'gpu'" in message
    assert info.value.exit_code == 2


def test_env_error_names_the_variable(site_file: Path) -> None:
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={"HPCJOBS_PARTITION": "nope"})
    assert "HPCJOBS_PARTITION='nope': defaults.partition: partition 'nope'" in info.value.message


def test_user_file_unknown_key_gets_a_suggestion(home: Path, site_file: Path) -> None:
    write_user(home, "slrum:\n  qos: x\n")
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={})
    assert "unknown key 'slrum' in a user config (did you mean 'slurm'?)" in info.value.message
    assert "config.yaml:1" in info.value.message


def test_broken_user_file_is_named(home: Path, site_file: Path) -> None:
    user = write_user(home, "slurm: [\n")
    with pytest.raises(InvalidConfigError) as info:
        load_site(site_file, environ={})
    assert str(user) in info.value.message
    assert "YAML syntax error" in info.value.message


def test_lists_replace_and_mappings_merge(home: Path, site_file: Path) -> None:
    write_user(
        home, "nccl_profiles:\n  prod: {env: {NCCL_IB_RETRY_CNT: '7'}}\nsetup: {modules: [a]}\n"
    )
    site = load_site(site_file, environ={})
    assert site.nccl_profiles["prod"].env == {"NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7"}
    assert site.setup.modules == ["a"]


def test_overrides_reject_bad_keys(site_file: Path) -> None:
    with pytest.raises(ConfigError, match="only mapping keys"):
        load_site(site_file, environ={}, overrides={"partitions.0.name": "x"})
    with pytest.raises(ConfigError, match="invalid config key"):
        load_site(site_file, environ={}, overrides={"slurm..qos": "x"})


def test_items_with_origin_cover_every_leaf(home: Path, site_file: Path) -> None:
    rows = {key: str(origin) for key, _, origin in load_site_layers(site_file).items_with_origin()}
    assert rows["partitions.1.name"] == f"file:{site_file}:11"
    assert rows["nccl_profiles.fast.env.NCCL_IB_TIMEOUT"] == f"file:{site_file}:14"
    assert rows["requeue.max_requeues.preemption"] == "built-in"
    assert rows["setup.container.image"] == "default"


def test_site_path_search_order(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = home / "first", home / "second"
    first.mkdir()
    second.mkdir()
    (first / "alpha.yaml").write_text(SITE)
    (second / "alpha.yaml").write_text(SITE)
    (second / "sandbox.yaml").write_text(SITE.replace("alpha", "sandbox"))
    monkeypatch.setenv("HPCJOBS_SITE_PATH", f"{first}:{second}")
    assert locate_site("alpha") == (first / "alpha.yaml").resolve()
    assert locate_site("sandbox") == (second / "sandbox.yaml").resolve()
    entries = [(e.name, e.source, e.active) for e in list_sites()]
    assert entries[:3] == [
        ("alpha", "HPCJOBS_SITE_PATH", True),
        ("alpha", "HPCJOBS_SITE_PATH", False),
        ("sandbox", "HPCJOBS_SITE_PATH", True),
    ]
    assert ("sandbox", "built-in", False) in entries


def test_user_sites_folder_beats_builtin(home: Path) -> None:
    folder = home / ".config" / "hpcjobs" / "sites"
    folder.mkdir(parents=True)
    (folder / "sandbox.yaml").write_text(SITE.replace("alpha", "sandbox"))
    assert locate_site("sandbox") == (folder / "sandbox.yaml").resolve()


def test_unknown_site_name_suggests(home: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'sandbox'"):
        locate_site("sandbx")


def test_missing_path_is_named(home: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml' does not exist"):
        load_site(home / "nope.yaml")


def test_hostname_selection(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = home / "sites"
    folder.mkdir()
    (folder / "alpha.yaml").write_text(SITE)
    (folder / "broken.yaml").write_text("hostnames: [\n")
    monkeypatch.setenv("HPCJOBS_SITE_PATH", str(folder))
    assert select_site_for_host("alpha-login2") == (folder / "alpha.yaml").resolve()
    assert load_site(hostname="alpha-login1", environ={}).name == "alpha"
    with pytest.raises(ConfigError, match="no site config matches this host"):
        select_site_for_host("alpha-login")
    with pytest.raises(ConfigError, match="no site config matches"):
        load_site(hostname="hpcjobs-sandbox.example.org", environ={})


def test_builtin_sandbox_never_matches_real_hosts(home: Path) -> None:
    for name in ("login1", "login01.cluster.example.org", "node001", "localhost"):
        with pytest.raises(ConfigError):
            select_site_for_host(name)
    assert select_site_for_host("hpcjobs-sandbox").name == "sandbox.yaml"


def test_user_file_picks_the_default_site(home: Path, site_file: Path) -> None:
    write_user(home, f"site: {site_file}\n")
    assert load_site(environ={}, hostname="unmatched").name == "alpha"


def test_x_keys_hold_anchors(home: Path) -> None:
    path = home / "anchors.yaml"
    path.write_text(
        "name: anc\n"
        "x-node: &node {cpus_per_node: 8, memory_mb: 1, max_nodes: 2}\n"
        "partitions:\n"
        "  - {<<: *node, name: a}\n"
        "  - {<<: *node, name: b, max_nodes: 1}\n"
    )
    site = load_site(path, environ={})
    assert [(p.name, p.max_nodes) for p in site.partitions] == [("a", 2), ("b", 1)]
