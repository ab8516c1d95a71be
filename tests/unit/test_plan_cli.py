"""``hpcjobs plan``: layouts, JSON, fixed layouts, --apply, --from-run and bad input."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hpcjobs.cli import cli
from hpcjobs.config.loader import load_site
from hpcjobs.jobs.records import remember, write_record
from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.script.jobspec import load_job_file, parse_spec, resolve_spec

LLAMA_70B = [
    "--layers", "80", "--hidden", "8192", "--heads", "64", "--vocab", "32000",
    "--seq-len", "4096", "--tokens", "2T", "--global-batch", "1024",
]  # fmt: skip


def plan(*args: str, site: str = "dgx-h100-ib") -> Result:
    return CliRunner().invoke(cli, ["--site", site, "plan", *args])


def plan_json(*args: str, site: str = "dgx-h100-ib") -> dict[str, Any]:
    result = plan(*args, "--json", site=site)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_70b_on_dgx_h100_answers_quickly() -> None:
    start = time.perf_counter()
    result = plan(*LLAMA_70B, "--nodes", "64")
    elapsed = time.perf_counter() - start
    print(f"\nplan for a 70B model on 64 DGX H100 nodes: {elapsed * 1000:.0f} ms")
    assert result.exit_code == 0, result.output
    assert elapsed < 5  # a hang guard; it takes a fraction of a second
    assert "GPU-HOURS" in result.output and "CHUNKS" in result.output
    assert "memory per GPU: parameters" in result.output


def test_json_has_every_layout_field_and_keeps_tp_in_the_nvlink_domain() -> None:
    data = plan_json(*LLAMA_70B, "--nodes", "64", "--top", "10")
    assert data["inputs"]["gpus"] == 512 and data["inputs"]["tokens"] == 2 * 10**12
    assert data["hardware"]["peak_flops_per_gpu"] == 989e12
    assert data["hardware"]["memory_bytes"] == 80_000_000_000
    assert data["fitting"] > 0 and len(data["layouts"]) == 10
    steps = [item["step_s"]["total"] for item in data["layouts"]]
    assert steps == sorted(steps)
    for item in data["layouts"]:
        assert item["fits"] and item["tp"] <= 8
        assert item["tp"] * item["pp"] * item["dp"] == 512
        mem = item["memory_bytes"]
        parts = ("parameters", "gradients", "optimizer", "activations", "allowance")
        assert sum(mem[k] for k in parts) == mem["total"] <= mem["available"]
        step = item["step_s"]
        assert step["total"] == pytest.approx(
            step["compute"] + step["pipeline_bubble"] + step["dp_allreduce"]
        )
        run = item["training"]
        assert run["total_s"] == pytest.approx(run["iterations"] * step["total"])
        assert run["gpu_hours"] == pytest.approx(run["total_s"] * 512 / 3600)
        assert run["time_limit_chunks"] == -(-run["total_s"] // (2 * 86400))
    assert data["layouts"][0]["training"]["iterations"] == -(-2 * 10**12 // (1024 * 4096))


def test_achieved_tflops_scales_the_step_time() -> None:
    fast = plan_json(*LLAMA_70B, "--nodes", "64", "--mfu", "0.5")
    slow = plan_json(*LLAMA_70B, "--nodes", "64", "--achieved-tflops", "247.25")
    assert slow["efficiency"] == pytest.approx(0.25)
    a, b = fast["layouts"][0]["step_s"]["compute"], slow["layouts"][0]["step_s"]["compute"]
    if fast["layouts"][0]["recompute"] == slow["layouts"][0]["recompute"]:
        assert b == pytest.approx(2 * a)


def test_a_fixed_layout_is_reported_even_when_it_does_not_fit() -> None:
    args = ("--layout", "tp=1,pp=1", "--zero", "0", "--recompute", "none", "--micro-batch", "1")
    result = plan(*LLAMA_70B, "--nodes", "8", *args)
    assert result.exit_code == 0, result.output
    assert "DOES NOT FIT" in result.output
    data = plan_json(*LLAMA_70B, "--nodes", "8", *args)
    (item,) = data["layouts"]
    assert (item["tp"], item["pp"], item["dp"], item["zero"]) == (1, 1, 64, 0)
    assert not item["fits"] and "more than the 80.0 GB" in item["notes"][0]


def test_tp_beyond_the_nvlink_domain_is_flagged() -> None:
    data = plan_json(
        *LLAMA_70B, "--nodes", "8", "--layout", "tp=16,pp=1", "--zero", "1",
        "--recompute", "full",
    )  # fmt: skip
    assert any("NVLink domain" in note for note in data["layouts"][0]["notes"])


def test_a100_site_and_gpu_type() -> None:
    data = plan_json("--params", "7B", "--seq-len", "2048", "--tokens", "100B",
                     "--global-batch", "256", "--gpu-type", "a100", "--nodes", "4",
                     site="a100-roce")  # fmt: skip
    assert data["hardware"]["peak_flops_per_gpu"] == 312e12
    assert data["model"]["shape_assumed"] is True
    assert all(item["tp"] <= 4 for item in data["layouts"])


def test_model_config_json(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "num_hidden_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "vocab_size": 32000,
                "max_position_embeddings": 4096,
                "architectures": ["LlamaForCausalLM"],
            }
        )
    )
    data = plan_json("--model-config", str(config), "--tokens", "1T", "--global-batch", "512",
                     "--nodes", "2")  # fmt: skip
    assert data["model"]["layers"] == 32 and data["model"]["seq_len"] == 4096
    assert data["model"]["shape_assumed"] is False


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "7x", "--seq-len", "2048"], "is not a count"),
        (["--params", "1.5", "--seq-len", "2048"], "not a whole number"),
        (["--params", "١٠B", "--seq-len", "2048"], "is not a count"),
        (["--params", "7B"], "sequence length"),
        (["--layers", "32", "--seq-len", "2048"], "the model is not known"),
        (["--params", "7B", "--seq-len", "2048", "--mfu", "nan"], "--mfu"),
        (["--params", "7B", "--seq-len", "2048", "--mfu", "1.5"], "--mfu"),
        (["--params", "7B", "--seq-len", "2048", "--achieved-tflops", "2000"], "peak"),
        (["--params", "7B", "--seq-len", "2048", "--layout", "tp=8,xx=1"], "--layout"),
        (["--params", "7B", "--seq-len", "2048", "--layout", "tp=3,pp=1"], "does not divide"),
        (["--params", "7B", "--seq-len", "2048", "--from-run", "999"], "no hpcjobs record"),
    ],
)
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = plan(*args, "--tokens", "1T", "--global-batch", "512", "--nodes", "2")
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_bad_model_config_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    for text, message in [
        ("{", "not valid JSON"),
        ("[1]", "not a JSON object"),
        ('{"num_hidden_layers": 32}', "has no"),
        (
            '{"num_hidden_layers": true, "hidden_size": 1, "num_attention_heads": 1,'
            ' "vocab_size": 1}',
            "num_hidden_layers",
        ),
        ('{"num_hidden_layers": NaN}', "not valid JSON"),
    ]:
        bad.write_text(text)
        result = plan("--model-config", str(bad), "--seq-len", "8", "--tokens", "1B",
                      "--global-batch", "8", "--gpus", "1")  # fmt: skip
        assert result.exit_code == 2, (text, result.output)
        assert message in result.output, (text, result.output)


def test_gpus_must_be_whole_nodes_and_within_the_partition() -> None:
    base = ("--params", "7B", "--seq-len", "2048", "--tokens", "1T", "--global-batch", "512")
    assert plan(*base, "--gpus", "12").exit_code == 2
    assert plan(*base, "--nodes", "1000").exit_code == 2
    assert plan(*base).exit_code == 2  # neither --gpus nor --nodes
    assert plan(*base, "--gpus", "4").exit_code == 0  # part of one node is fine


def test_site_without_gpu_facts_exits_2(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "name: nofacts\npartitions:\n  - {name: b, gpu_type: h100, gpus_per_node: 8,"
        " cpus_per_node: 8, memory_mb: 1000, max_nodes: 2}\n"
    )
    result = plan("--params", "7B", "--seq-len", "2048", "--tokens", "1T",
                  "--global-batch", "512", "--nodes", "1", site=str(site))  # fmt: skip
    assert result.exit_code == 2 and "no GPU facts" in result.output


def test_no_layout_fits_exits_2() -> None:
    result = plan("--params", "1T", "--seq-len", "2048", "--tokens", "1T",
                  "--global-batch", "64", "--gpus", "1")  # fmt: skip
    assert result.exit_code == 2 and "fits" in result.output


def test_apply_writes_a_job_file_that_submit_accepts(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    result = plan(*LLAMA_70B, "--nodes", "64", "--apply", str(job), "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    data = load_job_file(job)
    site = load_site("dgx-h100-ib")
    spec = resolve_spec(parse_spec(data, source=str(job)), site, cwd=tmp_path)
    assert spec.nodes == 64 and spec.gpus_per_node == 8 and spec.launcher == "torchrun"
    assert spec.command == ["python", "train.py"]
    env = spec.env
    tp, pp, dp = (int(env[f"HPCJOBS_PLAN_{k}"]) for k in ("TP", "PP", "DP"))
    assert tp * pp * dp == 512
    assert env["HPCJOBS_PLAN_GLOBAL_BATCH"] == "1024" and env["HPCJOBS_PLAN_SEQ_LEN"] == "4096"
    assert env["HPCJOBS_PLAN_RECOMPUTE"] in ("none", "selective", "full")
    # Not overwritten without --force.
    again = plan(*LLAMA_70B, "--nodes", "64", "--apply", str(job))
    assert again.exit_code == 2 and "exists" in again.output
    assert plan(*LLAMA_70B, "--nodes", "64", "--apply", str(job), "--force").exit_code == 0


def test_spare_nodes_are_costed_and_applied(tmp_path: Path) -> None:
    data = plan_json(*LLAMA_70B, "--nodes", "64", "--spare-nodes", "2")
    assert data["inputs"]["spare_nodes"] == 2
    for layout in data["layouts"]:
        run = layout["training"]
        # Two nodes of 8 GPUs held for the whole run beside 64 nodes: 16/512 of its GPU-hours.
        assert run["spare_gpu_hours"] == pytest.approx(run["gpu_hours"] * 16 / 512)
    text = plan(*LLAMA_70B, "--nodes", "64", "--spare-nodes", "2")
    assert text.exit_code == 0 and "Spare nodes: 2 held beside the run" in text.output
    assert "(+3.1%)" in text.output
    job = tmp_path / "job.yaml"
    applied = plan(*LLAMA_70B, "--nodes", "64", "--spare-nodes", "2", "--apply", str(job))
    assert applied.exit_code == 0, applied.output
    assert load_job_file(job)["spare_nodes"] == 2
    # --spare-nodes 0 is written: the partition's default would otherwise apply at submit.
    zero = plan(*LLAMA_70B, "--nodes", "64", "--spare-nodes", "0", "--apply", str(job), "--force")
    assert zero.exit_code == 0 and load_job_file(job)["spare_nodes"] == 0
    # Without spares, nothing of them is shown or written.
    none = plan_json(*LLAMA_70B, "--nodes", "64")
    assert none["inputs"]["spare_nodes"] == 0
    assert none["layouts"][0]["training"]["spare_gpu_hours"] == 0


def test_a_size_beyond_the_partition_is_planned_and_said() -> None:
    # Renting means asking about sizes the cluster does not have: planned, with a note.
    args = ["--params", "1B", "--seq-len", "2048", "--tokens", "1B", "--global-batch", "48"]
    result = plan(*args, "--nodes", "3", "--spare-nodes", "1", site="sandbox")
    assert result.exit_code == 0, result.output
    assert "Note: 3 nodes and 1 spare node(s) are more than partition 'batch' allows (3)" in (
        result.output
    )
    data = plan_json(*args, "--nodes", "6", site="sandbox")
    assert data["inputs"]["nodes"] == 6 and data["layouts"][0]["fits"]
    assert data["notes"] == [
        "6 nodes is more than partition 'batch' allows (3): planned as if it were larger"
    ]


def test_plan_variables_are_the_only_hpcjobs_names_a_job_may_set() -> None:
    parse_spec({"env": {"HPCJOBS_PLAN_TP": "8"}})
    with pytest.raises(Exception, match="reserved"):
        parse_spec({"env": {"HPCJOBS_JOB_OUTPUT_DIR": "/tmp"}})
    with pytest.raises(Exception, match="reserved"):
        parse_spec({"env": {"HPCJOBS_PLAN_OTHER": "1"}})


def _finished_run(tmp_path: Path, job_id: str, step_s: float, env: dict[str, str]) -> None:
    """A record and a checkpoint folder as a run submitted by hpcjobs leaves them."""
    ckpt = tmp_path / "checkpoints"
    folder = CheckpointDir(ckpt, keep=5)
    os.environ["SLURM_JOB_ID"] = job_id
    try:
        for step in (19, 39, 59):
            with folder.save(step):
                pass
    finally:
        del os.environ["SLURM_JOB_ID"]
    for n, step in enumerate((19, 39, 59)):  # rewrite the times: 20 steps of step_s apart
        marker = ckpt / f"step-{step:09d}" / "COMPLETE"
        record = json.loads(marker.read_text())
        record["time"] = 1000.0 + n * 20 * step_s
        marker.write_text(json.dumps(record))
    spec = {"nodes": 2, "gpus_per_node": 4, "checkpoint_dir": str(ckpt), "env": env,
            "output_dir": str(tmp_path)}  # fmt: skip
    record_path = write_record(tmp_path / "record.json", {"spec": spec, "job_ids": [job_id]})
    remember([job_id], record_path, output_dir=str(tmp_path))


def test_from_run_uses_the_measured_step_time(tmp_path: Path) -> None:
    args = ("--layers", "24", "--hidden", "2048", "--heads", "16", "--vocab", "50000",
            "--seq-len", "2048", "--tokens", "10B", "--global-batch", "64")  # fmt: skip
    env = {"HPCJOBS_PLAN_GLOBAL_BATCH": "64", "HPCJOBS_PLAN_RECOMPUTE": "none"}
    _finished_run(tmp_path, "4242", 0.5, env)
    data = plan_json(*args, "--from-run", "4242", "--gpus", "12", site="sandbox")
    run = data["from_run"]
    assert run["step_s"] == pytest.approx(0.5) and run["gpus"] == 8
    from hpcjobs.plan.model import ModelShape

    flops = ModelShape(24, 2048, 16, 50000, 2048).flops(64, "none")
    assert run["achieved_flops_per_gpu"] == pytest.approx(flops / (0.5 * 8))
    assert data["flops_per_gpu"] == pytest.approx(flops / (0.5 * 8))


def test_from_run_without_timing_exits_2(tmp_path: Path) -> None:
    spec = {"nodes": 1, "checkpoint_dir": str(tmp_path / "none"), "env": {}}
    remember(["77"], write_record(tmp_path / "record.json", {"spec": spec}))
    result = plan("--params", "1B", "--seq-len", "1024", "--tokens", "1B", "--global-batch",
                  "16", "--gpus", "4", "--from-run", "77", site="sandbox")  # fmt: skip
    assert result.exit_code == 2
    assert "nothing to time its steps by" in result.output


@pytest.mark.parametrize(("checkpoint", "steps"), [(-1, 10), (4, 5), (None, None)])
def test_from_run_counts_progress_from_the_checkpoint_resumed(
    tmp_path: Path, checkpoint: int | None, steps: int | None
) -> None:
    """Progress to step 9: from scratch (-1) 10 steps, from checkpoint 4 five; from a
    checkpoint whose step is unknown (null) no count, rather than one from step 0."""
    from hpcjobs.plan.fromrun import _from_progress
    from tests.eventlines import line

    (tmp_path / "PROGRESS").write_text("9\n")
    os.utime(tmp_path / "PROGRESS", (1010.0, 1010.0))
    (tmp_path / "chain-8.jsonl").write_text(line("8", "start", at=1000.0, checkpoint=checkpoint))
    timed = _from_progress(tmp_path, "8", {"spec": {"output_dir": str(tmp_path)}})
    assert (None if timed is None else timed[1]) == steps
    if timed is not None:
        assert timed[0] == pytest.approx(10.0 / timed[1])


def test_plan_env_names_are_the_ones_jobs_may_set() -> None:
    from hpcjobs.plan.jobfile import plan_env
    from hpcjobs.plan.memory import Layout
    from hpcjobs.script.jobspec import PLAN_ENV

    env = plan_env(
        Layout(2, 1, 4, 1, 1, "none", False), global_batch=8, seq_len=16, precision="bf16"
    )
    assert set(env) == PLAN_ENV
