"""Parsing Slurm and node output, and drafting a site config that validates as is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hpcjobs.backoff import NO_RETRY
from hpcjobs.config.discover import ClusterSnapshot, build_draft, discover_site, read_cluster
from hpcjobs.config.nodeprobe import (
    parse_default_route,
    parse_ibv_devinfo,
    parse_lscpu,
    parse_nvidia_topo,
    parse_probe_output,
)
from hpcjobs.errors import BadInputError, CommandError, SlurmError
from hpcjobs.runner import Result
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.clusterinfo import Gres, parse_gres
from hpcjobs.slurm.parse import parse_config, parse_key_values, parse_scontrol_records
from tests.fakes import RecordedRunner
from tests.scenarios import SCENARIOS, draft_problems

DATA = Path(__file__).resolve().parents[1] / "data"
PROBES = DATA / "configs" / "probe"
VERSIONS = ["22.05", "24.11"]


def test_key_values_keep_spaces_and_equals() -> None:
    text = (
        "NodeName=n1 OS=Linux 6.1.0 #1 SMP (2024-02-01) CfgTRES=cpu=8,mem=4000M "
        "Reason=bad  gpu [root@x]"
    )
    values = parse_key_values(text)
    assert values["OS"] == "Linux 6.1.0 #1 SMP (2024-02-01)"
    assert values["CfgTRES"] == "cpu=8,mem=4000M"
    assert values["Reason"] == "bad  gpu [root@x]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu:h100:4", [Gres("gpu", "h100", 4)]),
        ("gpu:h100:8(S:0-1)", [Gres("gpu", "h100", 8, "0-1")]),
        ("gpu:8", [Gres("gpu", None, 8)]),
        ("gpu:a100:4(S:0-1),nvme:1", [Gres("gpu", "a100", 4, "0-1"), Gres("nvme", None, 1)]),
        ("gpu:nvidia_h100_80gb_hbm3:8(IDX:0-7)", [Gres("gpu", "nvidia_h100_80gb_hbm3", 8)]),
        ("(null)", []),
        ("", []),
    ],
)
def test_parse_gres(text: str, expected: list[Gres]) -> None:
    assert parse_gres(text) == expected


def test_multiline_and_oneline_node_records_agree() -> None:
    multi = parse_scontrol_records(
        (DATA / "slurm/24.11/cluster/scontrol-show-node.txt").read_text()
    )
    assert [r["NodeName"] for r in multi] == ["dgx001", "dgx002", "dgx003", "cpu01", "cpu02"]
    assert multi[2]["Reason"].startswith("GPU 3 XID 79")
    assert multi[1]["Gres"] == "gpu:h100:8(S:0-1),nvme:1"
    one = parse_scontrol_records((DATA / "slurm/22.05/cluster/scontrol-show-node.txt").read_text())
    assert one[0]["CPUTot"] == "8" and one[0]["Gres"] == "gpu:h100:4"


@pytest.mark.parametrize("version", VERSIONS)
def test_cluster_facts(version: str) -> None:
    snapshot = read_cluster(SlurmClient(RecordedRunner(version)))
    facts = snapshot.facts
    assert facts.send_user_signal is True
    assert facts.preempt_type == "preempt/partition_prio"
    assert facts.version is not None and facts.version.startswith(version)
    assert facts.max_array_size in (1001, 10001)
    assert facts.job_expansion is False  # the recorded clusters do not permit it


def test_cluster_facts_say_whether_jobs_may_expand() -> None:
    from hpcjobs.slurm.clusterinfo import parse_cluster_facts

    facts = parse_cluster_facts({"SchedulerParameters": "bf_continue,permit_job_expansion"})
    assert facts.job_expansion is True
    assert parse_cluster_facts({"SchedulerParameters": "(null)"}).job_expansion is False


def test_scontrol_config_ignores_section_headers() -> None:
    config = parse_config((DATA / "slurm/24.11/cluster/scontrol-show-config.txt").read_text())
    assert config["ClusterName"] == "dgx-prod"
    assert config["ConstrainCores"] == "yes"
    assert "Cgroup Support Configuration:" not in config


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_scenario_on_the_recorded_sandbox(scenario: Callable[[SlurmClient], None]) -> None:
    """The shared scenarios (tests/scenarios.py) on output recorded from the 22.05 sandbox;
    tests/live/test_scenarios.py runs the same ones on the live sandbox."""
    scenario(SlurmClient(RecordedRunner("22.05")))


def test_draft_for_24_11_with_hidden_empty_and_cpu_partitions() -> None:
    draft = discover_site(SlurmClient(RecordedRunner("24.11")), name="dgx prod!")
    data, errors, _ = draft_problems(draft.text)
    assert errors == []
    assert data["name"] == "dgx-prod"
    parts = {p["name"]: p for p in data["partitions"]}  # type: ignore[attr-defined]
    assert list(parts) == ["batch", "debug", "cpu"]
    assert parts["batch"]["max_nodes"] == 64 and parts["batch"]["max_time"] == "2-00:00:00"
    assert parts["batch"]["gpus_per_node"] == 8 and parts["batch"]["nodes"] == 3
    assert parts["batch"]["cpus_per_node"] == 224
    assert parts["cpu"]["gpu_type"] is None and parts["cpu"]["gpus_per_node"] == 0
    assert parts["cpu"]["max_nodes"] == 2
    assert any("'maint' has no nodes" in note for note in draft.notes)


def test_draft_with_probed_dgx_node() -> None:
    runner = RecordedRunner("24.11", probe="dgx-h100.txt")
    draft = discover_site(SlurmClient(runner), probe="dgx001")
    data, errors, warnings = draft_problems(draft.text)
    assert errors == []
    assert len(warnings) == 1 and "partition 'debug' allows (00:30:00)" in warnings[0]
    srun = next(c for c in runner.calls if c[0] == "srun")
    assert "--nodelist=dgx001" in srun and "--partition=batch" in srun
    topo = data["topologies"]["dgx001-node"]  # type: ignore[index]
    assert topo["bootstrap_interface"] == "bond0"
    assert [(d["cpus"], d["gpus"]) for d in topo["numa"]] == [
        ("0-55,112-167", [0, 1, 2, 3]),
        ("56-111,168-223", [4, 5, 6, 7]),
    ]
    nics = {n["name"]: n for n in topo["nics"]}
    assert nics["mlx5_5"]["gpus"] == [5] and nics["mlx5_5"]["numa"] == 1
    assert nics["mlx5_8"]["nccl"] is False  # port down: not for NCCL
    parts = {p["name"]: p for p in data["partitions"]}  # type: ignore[attr-defined]
    assert parts["batch"]["topology"] == "dgx001-node"
    assert "topology" not in parts["cpu"]


def test_probe_unknown_node_is_bad_input() -> None:
    with pytest.raises(BadInputError, match="node 'gpu9' is not in this cluster"):
        discover_site(SlurmClient(RecordedRunner("24.11", probe="dgx-h100.txt")), probe="gpu9")


def test_roce_probe_gets_a_gid_index_and_spreads_gpus() -> None:
    snapshot = read_cluster(SlurmClient(RecordedRunner("22.05")))
    snapshot.probed = parse_probe_output((PROBES / "roce-node.txt").read_text())
    snapshot.probe_node = "n1"
    draft = build_draft(snapshot)
    data, errors, _ = draft_problems(draft.text)
    assert errors == []
    topo = data["topologies"]["n1-node"]  # type: ignore[index]
    assert [d["gpus"] for d in topo["numa"]] == [[0, 1], [2, 3]]
    assert {n["kind"] for n in topo["nics"]} == {"roce"}
    assert all(n["gid_index"] == 3 for n in topo["nics"])
    assert topo["bootstrap_interface"] == "eth0"
    assert any("gid_index 3 is a guess" in n for n in draft.notes)
    assert any("bootstrap_interface is a guess" in n for n in draft.notes)


def test_no_partitions_is_an_error() -> None:
    from hpcjobs.errors import SlurmError
    from hpcjobs.slurm.clusterinfo import ClusterFacts

    with pytest.raises(SlurmError, match="no partition"):
        build_draft(ClusterSnapshot(ClusterFacts(), {}, []))


def test_slurm_failure_surfaces_as_a_slurm_error() -> None:
    class Failing(RecordedRunner):
        def run(self, argv: Sequence[str], **_: object) -> Result:  # type: ignore[override]
            raise CommandError(argv, 1, "slurm_load_partitions: Unable to contact slurm controller")

    with pytest.raises(SlurmError) as info:
        discover_site(SlurmClient(Failing("22.05"), policy=NO_RETRY))
    assert info.value.exit_code == 3
    assert "Unable to contact slurm controller" in info.value.message


def test_probe_parsers_individually() -> None:
    assert parse_lscpu("# CPU,Node\n0,0\n1,0\n2,1\n3,\n") == {0: [0, 1, 3], 1: [2]}
    assert parse_default_route("default via 10.0.0.1 dev ib0 proto dhcp\n") == "ib0"
    assert parse_default_route("") is None
    ports = parse_ibv_devinfo(
        "hca_id:\tmlx5_0\n\t\tport:\t1\n\t\t\tstate:\tPORT_ACTIVE (4)\n"
        "\t\t\tlink_layer:\tEthernet\n\t\tport:\t2\n\t\t\tstate:\tPORT_DOWN (1)\n"
    )
    assert [(p.device, p.port, p.active, p.kind) for p in ports] == [
        ("mlx5_0", 1, True, "roce"),
        ("mlx5_0", 2, False, "ib"),
    ]
    topo = parse_nvidia_topo(
        "        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity\n"
        "GPU0     X      NV4     PIX     0-15    0\n"
        "GPU1    NV4      X      SYS     16-31   1\n"
        "NIC Legend:\n\n  NIC0: mlx5_2\n"
    )
    assert topo.gpu_numa == {0: 0, 1: 1}
    assert topo.gpu_nics == {0: ["mlx5_2"], 1: []}
