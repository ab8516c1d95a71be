"""``plan`` in money and choices: achieved rates end to end, the GPU catalogue, sizes beyond the
partition, prices and the comparison table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.errors import BadInputError
from hpcjobs.plan.catalogue import CATALOGUE, catalogue_gpu
from hpcjobs.plan.inputs import parse_node_counts, parse_targets
from hpcjobs.plan.timing import end_to_end_seconds
from tests.unit.test_plan_cli import LLAMA_70B as LLAMA_SHAPE_70B
from tests.unit.test_plan_cli import plan, plan_json

LLAMA_70B = ["--params", "70B", "--seq-len", "4096", "--tokens", "2T", "--global-batch", "1024"]
LLAMA_SHAPE = LLAMA_SHAPE_70B  # the worked example's shape (docs/plan.md)


def test_the_command_reproduces_megatron_lms_34_days_for_gpt3() -> None:
    # Narayanan et al. 2021, section 5.1: GPT-3 175B on 300B tokens, 1,024 A100 at 140
    # TFLOP/s achieved (end to end, full recomputation): "about 34 days".
    data = plan_json("--params", "175B", "--seq-len", "2048", "--tokens", "300B",
                     "--global-batch", "1536", "--gpu", "A100", "--gpus", "1024",
                     "--achieved-tflops", "140", "--recompute", "full")  # fmt: skip
    days = data["layouts"][0]["training"]["days"]
    assert data["speed"] == "end_to_end"
    assert days == pytest.approx(end_to_end_seconds(300e9, 175e9, 1024, 140e12) / 86400, 1e-3)
    assert round(days) == 34  # 33.9; before, the all-reduce added on top made it 35.8


def test_the_command_reproduces_megatron_lms_84_days_for_the_1t_model() -> None:
    # The same paper: 1T parameters, 450B tokens, 3,072 A100 at 163 TFLOP/s: "84 days"
    # (8TP/nX gives 83.2); 384 nodes is beyond any partition here, planned all the same.
    data = plan_json("--params", "1T", "--seq-len", "2048", "--tokens", "450B",
                     "--global-batch", "2048", "--gpu", "A100", "--gpus", "3072",
                     "--achieved-tflops", "163", "--recompute", "full")  # fmt: skip
    days = data["layouts"][0]["training"]["days"]
    assert days == pytest.approx(end_to_end_seconds(450e9, 1e12, 3072, 163e12) / 86400, 1e-3)
    assert 83 <= days <= 84


def test_an_achieved_rate_adds_no_bubble_or_all_reduce() -> None:
    data = plan_json(*LLAMA_70B, "--nodes", "64", "--achieved-tflops", "400")
    for item in data["layouts"]:
        step = item["step_s"]
        assert step["pipeline_bubble"] == 0 and step["dp_allreduce"] == 0
        assert step["total"] == pytest.approx(item["flops_per_iteration"] / (512 * 400e12))
        assert item["achieved_flops_per_gpu"] == pytest.approx(400e12)
    text = plan(*LLAMA_70B, "--nodes", "64", "--achieved-tflops", "400").output
    assert "end to end" in text and "nothing is added to it" in text
    # An MFU models the compute only: the bubble and the all-reduce come on top.
    mfu = plan_json(*LLAMA_70B, "--nodes", "64", "--layout", "tp=8,pp=4", "--mfu", "0.4")
    assert mfu["speed"] == "mfu" and mfu["layouts"][0]["step_s"]["pipeline_bubble"] > 0


def test_help_says_what_each_speed_means() -> None:
    text = plan("--help").output
    assert "end to end" in text and "compute achieves" in text


def test_the_catalogue_has_every_gpu_with_a_source_for_each_figure() -> None:
    assert set(CATALOGUE) == {"H100", "H200", "B200", "A100", "L40S", "MI300X", "910B"}
    for gpu in CATALOGUE.values():
        assert set(gpu.sources) == {"bf16_tflops", "memory_bytes", "nvlink", "internode_gbit_s"}
        assert all(len(text) > 20 for text in gpu.sources.values())
    assert catalogue_gpu("h100").key == "H100" and catalogue_gpu("Ascend 910B").key == "910B"
    with pytest.raises(BadInputError, match="no GPU 'V100'"):
        catalogue_gpu("V100")
    listing = plan("--list-gpus")
    assert listing.exit_code == 0 and "MI300X" in listing.output and "Sources:" in listing.output
    assert "H200" in json.loads(plan("--list-gpus", "--json").output)


def test_a_catalogue_gpu_is_planned_without_a_partition() -> None:
    data = plan_json(*LLAMA_70B, "--gpu", "H200", "--nodes", "32")
    assert data["hardware"]["gpu"] == "NVIDIA H200 SXM 141GB"
    assert data["hardware"]["memory_bytes"] == 141 * 10**9 and data["price"] is None
    assert (
        data["layouts"][0]["cost"] is None
        and data["layouts"][0]["training"]["time_limit_chunks"] is None
    )
    bad = plan(*LLAMA_70B, "--gpu", "H100", "-p", "batch", "--nodes", "2")
    assert bad.exit_code == 2 and "not both" in bad.output


def test_the_cost_is_gpu_hours_times_the_partitions_price() -> None:
    data = plan_json(*LLAMA_70B, "--nodes", "64", "--spare-nodes", "1")
    item = data["layouts"][0]
    training, cost = item["training"], item["cost"]
    assert data["price"] == {"currency": "USD", "gpu_hour": 2.5, "node_hour": None,
                             "reserved": 1.9, "on_demand": 3.9}  # fmt: skip
    assert cost["run"] == pytest.approx(training["gpu_hours"] * 2.5)
    assert cost["spare_nodes"] == pytest.approx(training["spare_gpu_hours"] * 2.5)
    assert cost["total"] == pytest.approx(cost["run"] + cost["spare_nodes"])
    held = training["gpu_hours"] + training["spare_gpu_hours"]
    assert cost["at_other_rates"] == pytest.approx(
        {"reserved": held * 1.9, "on_demand": held * 3.9}
    )
    assert "COST USD" in plan(*LLAMA_70B, "--nodes", "64").output


def test_comparing_two_partitions_by_hand() -> None:
    # The worked comparison of docs/plan.md: one layout, batch (2.50 USD) and debug (3.20 USD).
    data = plan_json(*LLAMA_SHAPE, "--partitions", "batch,debug", "--nodes", "64",
                     "--layout", "tp=8,pp=4,mb=1,sp=on", "--zero", "1",
                     "--recompute", "selective")  # fmt: skip
    batch, debug = data["comparison"]
    assert batch["days"] == debug["days"] == pytest.approx(52.41, abs=0.01)
    gpu_hours = batch["days"] * 24 * 512
    assert batch["gpu_hours"] == pytest.approx(gpu_hours)
    assert batch["cost"] == pytest.approx(gpu_hours * 2.50)
    assert debug["cost"] == pytest.approx(gpu_hours * 3.20)
    assert round(batch["cost"]) == 1_610_082 and round(debug["cost"]) == 2_060_905
    assert batch["marks"] == ["fastest", "cheapest"] and debug["marks"] == ["fastest"]  # a tie
    assert debug["notes"] == [
        "64 nodes is more than partition 'debug' allows (2): planned as if it were larger"
    ]


def test_a_node_range_shows_where_more_nodes_stop_paying() -> None:
    data = plan_json(*LLAMA_70B, "--nodes", "16-128")
    rows = data["comparison"]
    assert [r["nodes"] for r in rows] == [16, 32, 64, 128]
    efficiencies = [r["scaling_efficiency"] for r in rows]
    assert efficiencies[0] == 1.0 and efficiencies == sorted(efficiencies, reverse=True)
    assert efficiencies[-1] < 0.95  # the all-reduce grows: the 128-node run pays less per GPU
    assert "fastest" in rows[-1]["marks"] and "cheapest" in rows[0]["marks"]
    text = plan(*LLAMA_70B, "--nodes", "16,32").output
    assert "SCALING" in text and "cheapest" in text


def test_comparisons_refuse_what_does_not_compare() -> None:
    rate = plan(*LLAMA_70B, "--nodes", "16", "--gpu", "H100,A100", "--achieved-tflops", "300")
    assert rate.exit_code == 2 and "an achieved rate was measured on one GPU" in rate.output
    sizes = plan(*LLAMA_70B, "--nodes", "16,32", "--achieved-tflops", "300")
    assert sizes.exit_code == 2 and "at one size" in sizes.output
    both = plan(*LLAMA_70B, "--nodes", "16,32", "-p", "debug", "--partitions", "batch")
    assert both.exit_code == 2 and "not both" in both.output
    catalogue = plan(*LLAMA_70B, "--nodes", "16", "--gpu", "H100", "--apply", "job.yaml")
    assert catalogue.exit_code == 2 and "not for a catalogue GPU" in catalogue.output
    assert plan(*LLAMA_70B, "--nodes", "1e8").exit_code == 2  # refused, not searched
    apply = plan(*LLAMA_70B, "--nodes", "16,32", "--apply", "job.yaml")
    assert apply.exit_code == 2 and "--apply writes one layout" in apply.output


def test_node_counts_and_targets_parse() -> None:
    assert parse_node_counts("16") == [16]
    assert parse_node_counts("16,32,32") == [16, 32]
    assert parse_node_counts("16-128") == [16, 32, 64, 128]
    assert parse_node_counts("3-10") == [3, 6, 10]
    for bad in ("0", "8-4", "x", ",".join(str(n) for n in range(1, 66))):
        with pytest.raises(BadInputError):
            parse_node_counts(bad)
    site = load_site("dgx-h100-ib")
    assert [t.partition for t in parse_targets(site, "all", None)] == ["batch", "debug"]
    assert [t.gpu for t in parse_targets(site, None, "a100,MI300X")] == ["A100", "MI300X"]
    with pytest.raises(BadInputError):
        parse_targets(site, "nope", None)


def test_the_plan_counts_interruptions_and_what_spares_or_checkpoints_change() -> None:
    from hpcjobs.plan.faults import REFERENCE_GPUS, REFERENCE_MTTF_H

    data = plan_json(*LLAMA_SHAPE, "--nodes", "64", "--layout", "tp=8,pp=4,mb=1,sp=on",
                     "--zero", "1", "--recompute", "selective")  # fmt: skip
    item = data["layouts"][0]
    faults, base_s = item["interruptions"], item["training"]["total_s"]
    # One interruption per 7.9 h at 1,024 GPUs: per 15.8 h at 512.
    assert faults["mttf_h"] == pytest.approx(REFERENCE_MTTF_H * REFERENCE_GPUS / 512)
    assert "arXiv:2410.21680" in faults["source"]
    # Each costs half the 30-min interval + 5-min restart + 10-min queue wait = 0.5 h.
    assert faults["per_interruption_h"] == pytest.approx(0.25 + 5 / 60 + 10 / 60)
    hours = base_s / 3600 / (1 - 0.5 / faults["mttf_h"])
    assert faults["total_s"] == pytest.approx(hours * 3600)
    assert faults["expected"] == pytest.approx(hours / faults["mttf_h"])
    # The queue waits cost days, not money: no GPU is held while the job waits.
    billed = hours - faults["expected"] * 10 / 60
    assert faults["gpu_hours"] == pytest.approx(billed * 512)
    assert faults["cost"] == pytest.approx(billed * 512 * 2.5)
    spare = faults["what_if"]["one_spare_node"]  # no queue wait, but 8 more GPUs held
    assert spare["per_interruption_h"] == pytest.approx(0.25 + 5 / 60)
    assert spare["days"] < faults["days"] and spare["gpu_hours"] == pytest.approx(
        spare["total_s"] * 520 / 3600
    )
    shorter = faults["what_if"]["checkpoint_interval_third"]
    assert shorter["per_interruption_h"] == pytest.approx(5 / 60 + 5 / 60 + 10 / 60)
    text = plan(*LLAMA_SHAPE, "--nodes", "64", "--layout", "tp=8,pp=4,mb=1,sp=on").output
    assert "Interruptions: one per 15.8 h at this size" in text and "with one spare node" in text
    # Which way a GPU run that shrank grows back on this site.
    assert "grows back by moving to a larger job once the nodes are free beside it" in text


def test_interruption_flags_are_checked_and_a_run_that_never_ends_is_said() -> None:
    never = plan_json(*LLAMA_70B, "--nodes", "16", "--mttf", "0.2")
    faults = never["layouts"][0]["interruptions"]
    assert faults["days"] is None and faults["expected"] is None
    assert "never ends" in plan(*LLAMA_70B, "--nodes", "16", "--mttf", "0.2").output
    given = plan_json(*LLAMA_70B, "--nodes", "16", "--mttf", "100")
    assert given["layouts"][0]["interruptions"]["source"] == "given (--mttf)"
    for flag, value in (("--mttf", "0"), ("--checkpoint-minutes", "nan"),
                        ("--restart-minutes", "-1"), ("--requeue-minutes", "inf")):  # fmt: skip
        result = plan(*LLAMA_70B, "--nodes", "16", flag, value)
        assert result.exit_code == 2 and flag in result.output, result.output


def test_measured_history_gives_the_rate_and_the_cost_of_an_interruption() -> None:
    from hpcjobs.plan.faults import measured_fault_model

    chains = [
        {  # 100 GPU-hours, preempted once: 300 s in the queue, 60 s start-up, 120 s redone
            "allocated_gpu_hours": 100.0,
            "interruptions": [
                {
                    "cause": "preemption",
                    "resume_latency_s": 300.0,
                    "resumed_job_id": "12",
                    "resumed_at": 1300.0,
                }
            ],
            "runs": [
                {"job_id": "10", "start": 0.0, "parts_s": {"startup": 30.0, "redone": 0.0}},
                {"job_id": "12", "start": 1301.0, "parts_s": {"startup": 60.0, "redone": 120.0}},
            ],
        },
        {  # 60 GPU-hours, a time limit (planned for: not counted) and a node failure
            "allocated_gpu_hours": 60.0,
            "interruptions": [
                {
                    "cause": "timeout",
                    "resume_latency_s": 10.0,
                    "resumed_job_id": "21",
                    "resumed_at": 500.0,
                },
                {
                    "cause": "node_failure",
                    "resume_latency_s": 100.0,
                    "resumed_job_id": "22",
                    "resumed_at": 900.0,
                },
            ],
            "runs": [  # the run after the time limit is not an interruption's
                {"job_id": "20", "start": 0.0, "parts_s": {"startup": 20.0}},
                {"job_id": "21", "start": 500.0, "parts_s": {"startup": 70.0, "redone": 9.0}},
                {"job_id": "22", "start": 901.0, "parts_s": {"startup": 40.0, "redone": 80.0}},
            ],
        },
    ]
    model, what = measured_fault_model(chains, 16, since="now-30days")
    assert what == "2 interruption(s) in 160.0 GPU-hours of 2 chain(s) since now-30days"
    assert model is not None and model.mttf_h == pytest.approx(160 / (2 * 16))
    assert model.requeue_h == pytest.approx(400 / 2 / 3600)
    assert model.restart_h == pytest.approx(100 / 2 / 3600)
    assert model.checkpoint_h / 2 == pytest.approx(200 / 2 / 3600)
    assert model.source.startswith("measured: 2 interruption(s)")
    none, _ = measured_fault_model([{"allocated_gpu_hours": 5.0, "interruptions": []}], 8,
                                   since="now-1days")  # fmt: skip
    assert none is None


def test_a_catalogue_plan_needs_no_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # no user file: no site here
    result = CliRunner().invoke(cli, ["plan", *LLAMA_70B, "--gpu", "H100", "--nodes", "16"])
    assert result.exit_code == 0, result.output
    assert "figures from the built-in catalogue" in result.output
    result = CliRunner().invoke(cli, ["plan", *LLAMA_70B, "--nodes", "16"])
    assert result.exit_code == 2  # a partition needs a site
