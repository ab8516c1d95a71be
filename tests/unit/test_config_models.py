"""The site config models and their helpers, on the built-in site configs."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from hpcjobs.config.loader import load_site
from hpcjobs.config.models import Partition, SiteConfig
from hpcjobs.config.validate import validate_site_file
from hpcjobs.errors import BadInputError
from hpcjobs.resources import site_configs_dir

BUILTIN = sorted(site_configs_dir().glob("*.yaml"))


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user config file and no extra site folders leak in from the machine."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    return tmp_path


def test_builtin_configs_are_shipped() -> None:
    assert {p.stem for p in BUILTIN} >= {"sandbox", "dgx-h100-ib", "a100-roce"}


@pytest.mark.parametrize("path", BUILTIN, ids=lambda p: p.stem)
def test_every_builtin_config_validates_without_warnings(path: Path) -> None:
    report = validate_site_file(path)
    assert report.ok, [p.format() for p in report.problems]
    assert report.warnings == []
    assert report.config is not None
    assert report.config.name == path.stem


def test_sandbox_fits_this_host(isolated_home: Path) -> None:
    site = load_site("sandbox")
    assert site.partition_names == ["batch", "urgent"]
    assert site.default_partition.name == "batch"
    for part in site.partitions:
        assert (part.gpu_type, part.gpus_per_node, part.cpus_per_node, part.max_nodes) == (
            "h100",
            4,
            8,
            3,
        )
    topo = site.topology_for("batch")
    assert topo is not None
    assert topo.bootstrap_interface == "lo"
    assert [(d.id, d.cpu_ids, d.gpus) for d in topo.numa] == [(0, [0], [0, 1]), (1, [1], [2, 3])]
    assert [n.name for n in topo.nccl_nics_for_gpu(1)] == ["mlx5_0"]
    assert [n.name for n in topo.nccl_nics_for_gpu(2)] == ["mlx5_1"]
    assert not any(site.matches_host(h) for h in ("login1", "login01.cluster.org", "vm"))


def test_dgx_rails_and_storage_nic(isolated_home: Path) -> None:
    site = load_site("dgx-h100-ib")
    topo = site.topology_for(None)
    assert topo is not None
    assert topo.gpu_ids == list(range(8))
    assert topo.gpu_numa(3).id == 0
    assert topo.gpu_numa(4).id == 1
    for gpu in range(8):
        assert [n.name for n in topo.nccl_nics_for_gpu(gpu)] == [f"mlx5_{gpu}"]
    assert "mlx5_8" in [n.name for n in topo.nics]
    assert "mlx5_8" not in [n.name for n in topo.nccl_nics()]
    assert topo.nics[0].hca == "mlx5_0:1"
    assert site.matches_host("login1.dgx.example")
    assert not site.matches_host("login1.dgx.example.evil")


def test_nccl_env_layers_profile_then_partition(isolated_home: Path) -> None:
    site = load_site("dgx-h100-ib")
    env = site.nccl_env_for("batch")
    assert env["NCCL_IB_TIMEOUT"] == ("23", "partition batch")
    assert env["NCCL_IB_RETRY_CNT"] == ("7", "profile production")
    debug = site.nccl_env_for(site.partition("debug"))
    assert debug["NCCL_DEBUG"] == ("INFO", "profile debug")


def test_a100_roce_tiers(isolated_home: Path) -> None:
    site = load_site("a100-roce")
    assert site.default_partition.name == "finetune"
    pretrain, finetune = site.partition("pretrain"), site.partition("finetune")
    assert pretrain.preemptible is False and finetune.preemptible is True
    assert (pretrain.priority_tier or 0) > (finetune.priority_tier or 0)
    topo = site.topology_for(finetune)
    assert topo is not None
    assert all(n.gid_index == 3 for n in topo.nics if n.kind == "roce")
    assert site.topology_for("cpu") is None
    assert site.nccl_env_for("finetune")["NCCL_IB_QPS_PER_CONNECTION"] == (
        "2",
        "partition finetune",
    )


def test_unknown_partition_lists_the_known_ones(isolated_home: Path) -> None:
    site = load_site("sandbox")
    with pytest.raises(BadInputError) as info:
        site.partition("gpu")
    assert info.value.exit_code == 2
    assert "batch, urgent" in info.value.message


def test_gpu_outside_the_numa_map_is_a_clear_error(isolated_home: Path) -> None:
    topo = load_site("sandbox").topology_for(None)
    assert topo is not None
    with pytest.raises(BadInputError, match="GPU 9 is not in the topology"):
        topo.gpu_numa(9)


def test_nic_fallback_to_same_numa_domain() -> None:
    site = SiteConfig.model_validate(
        {
            "name": "x",
            "partitions": [
                {"name": "p", "cpus_per_node": 4, "memory_mb": 1, "max_nodes": 1, "topology": "t"}
            ],
            "topologies": {
                "t": {
                    "bootstrap_interface": "lo",
                    "numa": [{"id": 0, "cpus": "0-1", "gpus": [0]}, {"id": 1, "cpus": "2-3"}],
                    "nics": [
                        {"name": "a", "numa": 0},
                        {"name": "b", "numa": 1},
                        {"name": "s", "numa": 0, "nccl": False},
                    ],
                }
            },
        }
    )
    topo = site.topology_for("p")
    assert topo is not None
    assert [n.name for n in topo.nccl_nics_for_gpu(0)] == ["a"]
    assert site.nccl_env_for("p") == {}


def test_models_are_frozen_and_strict() -> None:
    part = Partition(name="p", cpus_per_node=1, memory_mb=1, max_nodes=1)
    with pytest.raises(ValidationError):
        part.name = "q"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        Partition.model_validate(
            {"name": "p", "cpus_per_node": 1, "memory_mb": 1, "max_nodes": 1, "x": 1}
        )
    env = Partition.model_validate(
        {"name": "p", "cpus_per_node": 1, "memory_mb": 1, "max_nodes": 1, "env": {"A": 22}}
    ).env
    assert env == {"A": "22"}


def _key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    from hpcjobs.config.validate import _unwrap

    paths = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        annotation = _unwrap(info.annotation)
        origin = typing.get_origin(annotation)
        if origin is list:
            inner, suffix = _unwrap(typing.get_args(annotation)[0]), "[]."
        elif origin is dict:
            inner, suffix = _unwrap(typing.get_args(annotation)[1]), ".<name>."
        else:
            inner, suffix = annotation, "."
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            paths.extend(_key_paths(inner, path + suffix))
    return paths


def test_docs_describe_every_key() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "site-config.md").read_text()
    paths = _key_paths(SiteConfig)
    assert len(paths) > 60
    missing = [p for p in paths if f"`{p}`" not in docs]
    assert missing == []
