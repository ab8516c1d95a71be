"""``hpcjobs report``: accounting parsing, the goodput breakdown, progress files, telemetry,
the page and the command, on recorded sandbox output and fakes (no Slurm)."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.jobs.chain import Chain, ChainRef, parse_chain
from hpcjobs.report.build import GPUS_FROM_REQUEST, NO_PROGRESS, chain_report, collect
from hpcjobs.report.compare import compare_reports, compare_text, tuning_vars
from hpcjobs.report.goodput import PARTS, RunWindow, shrunk_share, spare_share, split_run
from hpcjobs.report.gpu import parse_samples, summarize
from hpcjobs.report.html import report_page
from hpcjobs.runner import Result
from hpcjobs.runtime.checkpoint import CheckpointDir
from hpcjobs.runtime.progress import ProgressWriter, Report, node_name, parse_log
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.usage import RunUsage, parse_bytes, parse_cpu_time, parse_usage, sacct_argv
from tests.eventlines import line
from tests.unit.test_slurm_client import FakeRunner, ok

DATA = Path(__file__).resolve().parents[1] / "data" / "report"


@pytest.fixture(autouse=True)
def _utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The recorded sacct times are the sandbox's local time, UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def recorded() -> tuple[list[RunUsage], Chain, dict[int, list[Report]]]:
    usage = parse_usage((DATA / "sacct-preempted.txt").read_text())
    chain = parse_chain((DATA / "chain-10.jsonl").read_text())
    progress = {rank: parse_log((DATA / f"rank-{rank}.log").read_text()) for rank in (0, 1)}
    return usage, chain, progress


# ---- accounting -------------------------------------------------------------------------------


def test_recorded_sacct_gives_runs_with_gpus_and_steps() -> None:
    usage = parse_usage((DATA / "sacct-preempted.txt").read_text())
    assert [(u.job_id, u.elapsed_s, u.gpus, u.alloc_cpus) for u in usage] == [
        ("10", 8, 2, 4),
        ("12", 5, 2, 4),
    ]
    assert [s.name for s in usage[0].steps] == ["batch", "0"]
    # The sandbox gathers no CPU time or memory: not measured, not zero.
    assert usage[0].cpu_efficiency is None and usage[0].peak_memory is None


def test_sacct_figures_as_seff_reads_them() -> None:
    assert parse_cpu_time("1-02:03:04.500") == 93784.5
    assert parse_cpu_time("03:04.250") == 184.25
    assert parse_cpu_time("") is None
    assert parse_bytes("2048K") == 2 * 1024 * 1024
    assert parse_bytes("1.5G") == int(1.5 * 2**30)
    assert parse_bytes("") is None
    line = (
        "7|7|COMPLETED|2026-12-01T10:00:00|2026-12-01T10:00:10|2026-12-01T10:01:50|100|"
        "cpu=8,node=1|cpu=8,gres/gpu:h100=4,node=1|8|00:00:00|||1|n1|ann|proj|gpu|train\n"
        "7.0|7.0|COMPLETED|2026-12-01T10:00:10|2026-12-01T10:00:10|2026-12-01T10:01:50|100|"
        "cpu=8,node=1||8|06:40.000|2G|n1|1|n1||||python\n"
    )
    (run,) = parse_usage(line)
    assert run.gpus is None and run.requested_gpus == 4
    assert run.cpu_efficiency == pytest.approx(400 / 800)
    assert run.peak_memory == (2 * 2**30, "n1")


def test_one_sacct_for_ids_or_a_window() -> None:
    argv = sacct_argv(["12", "13_2"])
    assert argv[:5] == ["sacct", "-D", "-P", "-n", "-o"] and argv[-2:] == ["-j", "12,13_2"]
    window = sacct_argv(None, user="ann", since="now-1days", account="proj")
    assert window[-6:] == ["-u", "ann", "-S", "now-1days", "-A", "proj"]


# ---- the breakdown ----------------------------------------------------------------------------


def test_recorded_chain_parts_add_up_and_redone_matches_the_event_log() -> None:
    usage, chain, progress = recorded()
    report = chain_report("10", usage, chain, progress)
    assert report.allocated_s == (8 + 5) * 2
    assert report.allocated_gpu_hours == pytest.approx(26 / 3600)
    for run in report.runs:
        assert run.parts is not None
        assert sum(run.parts.seconds.values()) == pytest.approx(run.elapsed_s)
    assert sum(report.part_s(p) or 0 for p in PARTS) == pytest.approx(report.allocated_s)
    assert report.redone_steps == report.steps_lost_event_log == 2
    assert report.runs[0].cause == "preemption" and report.runs[0].signal_at is not None
    assert report.queue_wait_s == 1.0 and report.gaps_s == [9.0]
    stats = report.step_stats()
    assert stats["ranks"] == 2 and stats["median_s"] == pytest.approx(0.101, abs=0.005)
    assert report.summary_line().startswith("Report: goodput ")


def test_startup_redone_checkpoint_stall_warning_and_tail() -> None:
    reports = [Report(105.0, 10)]
    reports += [Report(105.0 + i, 10 + i) for i in range(1, 11)]  # steps 11-20, 1 s each
    reports += [Report(117.0, None, save_s=1.0), Report(117.0, 21)]  # a 1 s save before 21
    reports += [Report(130.0, 22)]  # a 13 s gap: a stall of 12 s
    run = RunWindow("5", 1, 100.0, 140.0, 4, signal_at=135.0)
    parts = split_run(run, reports, 15, chain_has_progress=True)
    assert parts is not None
    s = parts.seconds
    assert s["startup"] == 5.0
    assert s["redone"] == pytest.approx(5.0)  # steps 11-15 were reached before
    assert s["checkpoint"] == pytest.approx(1.0)
    assert s["stall"] == pytest.approx(12.0)
    assert s["goodput"] == pytest.approx(5.0 + 1.0 + 1.0)  # 16-20, 21, 22's share
    assert s["warning"] == pytest.approx(5.0) and s["tail"] == pytest.approx(5.0)
    assert sum(s.values()) == pytest.approx(run.elapsed)
    assert parts.redone_steps == 6 and parts.steps == 13  # steps 10-15


def test_a_run_that_starts_again_inside_its_allocation_redoes_steps() -> None:
    """Spare nodes: steps 1-10 (1 s each), a fault at 12, the program again at 13 from its
    checkpoint at step 6: its first step (7) at 15, then 8-12 (1 s each)."""
    reports = [Report(100.0 + i, i) for i in range(1, 11)]
    reports += [Report(115.0, 7)] + [Report(115.0 + i, 7 + i) for i in range(1, 6)]
    run = RunWindow("5", 0, 100.0, 121.0, 4)
    parts = split_run(run, reports, None, chain_has_progress=True, restarts=[113.0])
    assert parts is not None
    s = parts.seconds
    assert s["startup"] == pytest.approx(1.0 + 2.0)  # to step 1, and from 113 to step 7
    assert s["tail"] == pytest.approx(3.0 + 1.0)  # 110 to the restart at 113, 120 to 121
    assert s["redone"] == pytest.approx(3.0)  # steps 8-10 again
    assert s["goodput"] == pytest.approx(9.0 + 2.0)  # 2-10, then 11-12
    assert sum(s.values()) == pytest.approx(run.elapsed)
    assert parts.redone_steps == 4 and parts.steps == 12  # 7-10 again
    # The page draws the steps redone where they were: after the restart, not from the start.
    assert (parts.redone_from, parts.redone_until) == (115.0, 118.0)


def test_idle_spare_nodes_are_their_own_badput() -> None:
    # 3 nodes held, 2 running, for 60 s; then a node left the job: 2 held, 2 running, 40 s.
    share = spare_share([(0.0, 3, 2), (60.0, 2, 2)], 100.0)
    assert share == pytest.approx(60 / (180 + 80))
    assert spare_share([(0.0, 2, 2)], 100.0) == 0.0 and spare_share([], 100.0) == 0.0
    run = RunWindow("5", 0, 100.0, 110.0, 12)
    reports = [Report(100.0 + i, i) for i in range(1, 11)]
    parts = split_run(run, reports, None, chain_has_progress=True, spare=0.25)
    assert parts is not None
    assert parts.seconds["spare"] == pytest.approx(2.5)
    assert parts.seconds["goodput"] == pytest.approx(9.0 * 0.75)
    assert sum(parts.seconds.values()) == pytest.approx(run.elapsed)


def test_a_run_below_its_full_size_is_its_own_badput() -> None:
    # -N 2-3: 3 of 3 nodes for 60 s, then 2 of 3 for 40 s.
    share = shrunk_share([(0.0, 3, 3), (60.0, 3, 2)], 100.0)
    assert share == pytest.approx(40 * (1 / 3) / 100)
    assert shrunk_share([(0.0, 3, 3)], 100.0) == 0.0 and shrunk_share([], 100.0) == 0.0
    run = RunWindow("5", 0, 100.0, 110.0, 12)
    reports = [Report(100.0 + i, i) for i in range(1, 11)]
    parts = split_run(run, reports, None, chain_has_progress=True, spare=0.1, shrunk=0.2)
    assert parts is not None
    assert (parts.seconds["spare"], parts.seconds["shrunk"]) == pytest.approx((1.0, 2.0))
    assert parts.seconds["goodput"] == pytest.approx(9.0 * 0.7)
    assert sum(parts.seconds.values()) == pytest.approx(run.elapsed)


def test_a_run_without_progress_is_start_up_and_no_progress_means_no_goodput() -> None:
    run = RunWindow("5", 0, 0.0, 30.0, 1)
    parts = split_run(run, [], None, chain_has_progress=True)
    assert parts is not None and parts.seconds["startup"] == 30.0
    assert split_run(run, [], None, chain_has_progress=False) is None
    usage, chain, _ = recorded()
    report = chain_report("10", usage, chain, {})
    assert report.goodput is None and NO_PROGRESS in report.notes
    assert report.allocated_s == 26
    assert "goodput unknown" in report.summary_line()


def test_gpus_from_the_request_where_accounting_has_none() -> None:
    text = (DATA / "sacct-preempted.txt").read_text().replace("gres/gpu=2,", "")
    usage = parse_usage(text)
    _, chain, progress = recorded()
    report = chain_report("10", usage, chain, progress, requested_gpus=2)
    assert [r.gpus_source for r in report.runs] == ["request", "request"]
    assert report.allocated_s == 26 and GPUS_FROM_REQUEST in report.notes


# ---- progress files ---------------------------------------------------------------------------


def test_note_progress_writes_the_rank_files_privately(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCJOBS_PROGRESS_DIR", str(tmp_path / "progress"))
    monkeypatch.setenv("RANK", "3")
    ckpt = CheckpointDir(tmp_path / "ck")
    ckpt.note_progress(7)
    with ckpt.save(7) as folder:
        (folder / "x").write_text("x")
    ckpt.note_progress(8)
    folder = tmp_path / "progress"
    assert (folder / "rank-3").read_text().split() == ["8", node_name()]
    reports = parse_log((folder / "rank-3.log").read_text())
    assert [r.step for r in reports] == [7, None, 8] and reports[1].save_s is not None
    assert ckpt.progress() == 8  # the PROGRESS file history reads is still written
    for name in ("rank-3", "rank-3.log"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_long_log_is_thinned_but_keeps_its_span(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hpcjobs.runtime.progress

    monkeypatch.setattr(hpcjobs.runtime.progress, "LOG_LIMIT", 4096)
    writer = ProgressWriter(tmp_path, rank=0)
    log, step, biggest = tmp_path / "rank-0.log", 0, 0
    while True:
        writer.step(step, when=1000.0 + step)
        size = log.stat().st_size
        if size < biggest:
            break  # thinned
        biggest = size
        step += 1
    assert biggest > 4096 - 40
    size = (tmp_path / "rank-0.log").stat().st_size
    reports = parse_log((tmp_path / "rank-0.log").read_text())
    assert size <= 4096
    assert reports[0].step == 0 and reports[-1].step == step


def test_progress_lines_from_other_programs() -> None:
    text = "1700000000.5 12 n3\n1700000001 13\n1700000002 save 0.75\ngarbage\n17 x\n"
    assert parse_log(text) == [
        Report(1700000000.5, 12, "n3"),
        Report(1700000001.0, 13),
        Report(1700000002.0, None, save_s=0.75),
    ]


# ---- telemetry --------------------------------------------------------------------------------


def test_nvidia_smi_samples_and_idle_gpus() -> None:
    n1 = parse_samples((DATA / "nvidia-smi-query-gpu.csv").read_text())
    n2 = parse_samples((DATA / "nvidia-smi-query-gpu-n2.csv").read_text())
    assert len(n1) == 7  # the line cut short is skipped
    assert n1[4].util is None  # [N/A]
    summary = summarize({"n1": n1, "n2": n2})
    assert summary is not None
    by = {(g.host, g.index): g for g in summary.gpus}
    assert by[("n1", 0)].mean_util == pytest.approx((97 + 95 + 99) / 3)
    assert by[("n1", 0)].max_mem_used_mib == 62004
    assert [(g.host, g.index) for g in summary.idle] == [("n1", 1)]
    assert summarize({}) is None


def test_the_sampler_asks_for_the_fields_the_parser_reads(tmp_path: Path) -> None:
    import sys

    from hpcjobs.config.loader import load_site
    from hpcjobs.contract.jobenv import GPU_QUERY
    from hpcjobs.runtime.supervisor.policy import Policy
    from hpcjobs.runtime.supervisor.supervise import Supervisor
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    site = load_site("sandbox")
    script = render_job(parse_spec({"command": ["python", "t.py"]}), site).script
    assert f"HPCJOBS_GPU_QUERY={GPU_QUERY}" in script
    # The job's supervisor hands the fields to its node agent, which asks nvidia-smi for them
    # (here a stand-in that prints its arguments into the sample file).
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/bash\nprintf '%s\\n' \"$@\"\n")
    (bindir / "nvidia-smi").chmod(0o755)
    run_dir = tmp_path / "run"
    env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "10",
        "SLURMD_NODENAME": "n1",
        "HPCJOBS_JOB_OUTPUT_DIR": str(run_dir),
        "HPCJOBS_NODE_TMP": str(tmp_path / "node"),
        "HPCJOBS_GPU_MONITOR_INTERVAL": "30",
        "HPCJOBS_GPU_QUERY": GPU_QUERY,
    }
    program = [sys.executable, "-m", "hpcjobs.runtime.supervisor"]
    sup = Supervisor(Policy(), "job.sh", ["true"], env=env, program=program)
    sup.ctx.root, sup.ctx.progress_dir = "10", str(run_dir / "progress-10")
    (run_dir / "progress-10").mkdir(parents=True)
    sample = run_dir / "gpu-10" / "n1.csv"
    sup.agents.start()
    try:
        deadline = time.monotonic() + 30
        while not sample.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        sup.agents.stop()
    assert f"--query-gpu={GPU_QUERY}\n" in sample.read_text()


def test_gpu_sampler_interval_from_the_site_and_off_without_gpus() -> None:
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    site = load_site("sandbox")

    def script(**fields: object) -> str:
        spec = parse_spec({"nodes": 1, "command": ["python", "t.py"], **fields})
        return str(render_job(spec, site).script)

    assert "export HPCJOBS_GPU_MONITOR_INTERVAL=30\n" in script(gpus_per_node=1)
    assert "export HPCJOBS_GPU_MONITOR_INTERVAL=0\n" in script(gpus_per_node=1, gpu_monitor=False)
    assert "export HPCJOBS_GPU_MONITOR_INTERVAL=0\n" in script(gpus_per_node=0)


# ---- page, comparison, command ----------------------------------------------------------------


def test_page_escapes_names_and_is_self_contained() -> None:
    usage, chain, progress = recorded()
    for run in usage:
        run.name = '<script>alert("x")</script>'
    report = chain_report("10", usage, chain, progress)
    page = report_page([report])
    assert "<script" not in page and "&lt;script&gt;" in page
    assert 'data-run="0" data-job="10"' in page and 'data-run="1" data-job="12"' in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_compare_side_by_side() -> None:
    usage, chain, progress = recorded()
    a = chain_report("10", usage, chain, progress)
    b = chain_report("10", usage, chain, {})
    diffs = [{"what": "NCCL_IB_HCA", "a": "=mlx5_0 (topology x)", "b": "(unset)"}]
    data = compare_reports(a, b, diffs)
    rows = {r["what"]: r for r in data["rows"]}
    assert rows["goodput (%)"]["b"] == "-" and rows["runs"]["change"] == "+0"
    text = compare_text(data)
    assert "NCCL_IB_HCA" in text and "Before/after" in text
    script = "export NCCL_IB_HCA='=mlx5_0:1'  # topology sandbox-node\nexport FOO=1\n"
    assert tuning_vars(script) == {"NCCL_IB_HCA": "'=mlx5_0:1' (topology sandbox-node)"}


def test_collect_makes_one_sacct_for_every_chain(tmp_path: Path) -> None:
    text = (DATA / "sacct-preempted.txt").read_text()
    runner = FakeRunner().add("sacct", ok(text)).add("find", Result(("find",), 0, "", ""))
    chain = parse_chain((DATA / "chain-10.jsonl").read_text())
    refs = {"10": ChainRef("10", str(tmp_path), chain), "99": None}
    reports = collect(SlurmClient(runner), runner, refs)
    assert runner.count("sacct") == 1
    (sacct,) = [c for c in runner.calls if c[0] == "sacct"]
    assert sacct[-1] == "10,12,99"
    assert [len(r.runs) for r in reports] == [2, 0]


def test_report_needs_jobs_or_a_window() -> None:
    result = CliRunner().invoke(cli, ["report"])
    assert result.exit_code == 2 and "name the jobs" in result.output
    result = CliRunner().invoke(cli, ["report", "12", "--since", "now-1days"])
    assert result.exit_code == 2
    result = CliRunner().invoke(cli, ["report", "x1"])
    assert result.exit_code == 2 and "not a job id" in result.output


def _cat(argv: list[str]) -> Result:
    path = Path(argv[1])
    if not path.exists():
        return Result(tuple(argv), 1, "", f"cat: {path}: No such file or directory")
    return Result(tuple(argv), 0, path.read_text(), "")


def test_report_command_on_a_fake_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpcjobs.cli import report as report_cli
    from hpcjobs.jobs.records import remember, write_record

    (tmp_path / "chain-10.jsonl").write_text((DATA / "chain-10.jsonl").read_text())
    progress = tmp_path / "progress-10"
    progress.mkdir()
    for rank in (0, 1):
        (progress / f"rank-{rank}.log").write_text((DATA / f"rank-{rank}.log").read_text())
    record = tmp_path / "record.json"
    write_record(record, {"spec": {"nodes": 2, "gpus_per_node": 1}})
    remember(["10"], record, output_dir=str(tmp_path))
    runner = FakeRunner().add("sacct", ok((DATA / "sacct-preempted.txt").read_text()))
    runner.add("cat", _cat)
    client = SlurmClient(runner)
    monkeypatch.setattr(report_cli, "slurm_access", lambda ctx, host: (runner, client))
    runner.add("find", lambda argv: Result(tuple(argv), 0, _grep(Path(argv[1]), argv[5]), ""))
    page = tmp_path / "page.html"
    result = CliRunner().invoke(cli, ["report", "10", "--json", "--html", str(page)])
    assert result.exit_code == 0, result.output
    (data,) = json.loads(result.output)["chains"]
    assert data["job_ids"] == ["10", "12"] and data["redone_steps"] == 2
    assert stat.S_IMODE(os.stat(page).st_mode) == 0o600
    text = CliRunner().invoke(cli, ["report", "10"])
    assert "Steps: redone 2 (event log: 2)" in text.output
    line = CliRunner().invoke(cli, ["report", "--line", "10"])
    assert line.output.startswith("10: Report: goodput ")


def _grep(folder: Path, pattern: str) -> str:
    """What ``find FOLDER -name PATTERN -exec grep -H '' {} +`` prints."""
    if not folder.is_dir():
        return ""
    lines = []
    for path in sorted(folder.glob(pattern)):
        lines += [f"{path}:{line}" for line in path.read_text().splitlines()]
    return "".join(line + "\n" for line in lines)


def test_a_run_slurm_resized_is_one_run_over_its_sizes() -> None:
    """Spare nodes: Slurm writes a RESIZING record for each earlier size of a job (recorded:
    job 142 held 3 nodes for 3 s, lost one, ran on 2 for 14 s; job 148's batch host left)."""
    usage = parse_usage((DATA / "sacct-resized.txt").read_text())
    assert [(u.job_id, u.state, u.elapsed_s, u.nodes) for u in usage] == [
        ("142", "COMPLETED", 17, 2),
        ("149", "COMPLETED", 14, 2),
        ("148", "CANCELLED", 6, 1),
    ]
    run = usage[0]
    assert run.resized == [(3, 3, 6)] and run.gpus == 2 and run.gpu_seconds == 3 * 3 + 14 * 2
    assert run.cpu_seconds == 3 * 6 + 14 * 4
    assert run.start is not None and run.start.isoformat() == "2026-12-03T06:11:04"
    assert [s.name for s in run.steps] == ["batch", "0", "1", "2", "3"]
    assert usage[1].resized == [] and usage[1].gpu_seconds == 14 * 2
    chain = parse_chain(
        line("142", "start", at=1796278264.5, checkpoint=-1, nodelist="n1,n2", batch="n1", held=3)
        + line("142", "start", at=1796278267.2, checkpoint=9, nodelist="n1,n3", batch="n1", held=2)
    )
    report = chain_report("142", usage, chain, {})
    (one,) = report.runs
    assert one.index == 0 and one.elapsed_s == 17 and one.allocated_gpu_s == 37
    assert report.allocated_s == pytest.approx(37)
    assert report.allocated_cpu_hours == pytest.approx((3 * 6 + 14 * 4) / 3600)
    assert report.to_dict()["runs"][0]["gpu_seconds"] == 37
    # Its spare node sat idle for the 3.2 s before the node was lost: its own badput part.
    t0 = 1796278264.0
    progress = {0: [Report(t0 + 1.0, 1), Report(t0 + 2.0, 2), Report(t0 + 5.0, 2)]}
    progress[0] += [Report(t0 + 6.0 + i, 3 + i) for i in range(10)]
    (spared,) = chain_report("142", usage, chain, progress).runs
    assert spared.parts is not None
    assert spared.parts.seconds["spare"] == pytest.approx(17 * 3.2 / (3.2 * 3 + 13.8 * 2))
    assert sum(spared.parts.seconds.values()) == pytest.approx(17)


def test_a_step_noted_twice_is_not_redone() -> None:
    """A program may note the same step more than once (per micro-batch, or note_progress and
    report_step both): no restart, nothing redone."""
    reports = [Report(100.0 + i + d, i) for i in range(1, 11) for d in (0.0, 0.5)]
    parts = split_run(RunWindow("5", 0, 100.0, 111.0, 1), reports, None, chain_has_progress=True)
    assert parts is not None and parts.redone_steps == 0 and parts.seconds["redone"] == 0.0
    assert parts.seconds["goodput"] == pytest.approx(9.5)


def test_slurm_24_11_counts_a_release_from_the_jobs_start() -> None:
    """Recorded on 24.11: job 112's node was released 4 s in (hpcjobs, scontrol), and the
    record after starts at the job's start with the job's whole 14 s; 110 lost a node (Slurm)
    after 2 s, the record after starts then. Each size is counted once."""
    usage = {u.job_id: u for u in parse_usage((DATA / "sacct-resized-24.11.txt").read_text())}
    released, lost = usage["112"], usage["110"]
    assert (released.elapsed_s, released.resized, released.gpu_seconds) == (
        14,
        [(4, 3, 6)],
        4 * 3 + 10 * 2,
    )
    assert (lost.elapsed_s, lost.resized, lost.gpu_seconds) == (16, [(2, 3, 6)], 2 * 3 + 14 * 2)
    assert [s.name for s in released.steps] == ["batch", "0", "1", "2", "3"]


# ---- steps lost that the event log does not know ------------------------------------------------


def _chain_without_progress_at_the_stop(*, known_stop: bool = False) -> Chain:
    """The recorded chain, its preemption logged with ``progress: -1`` (the supervisor saw no
    progress); ``known_stop``: and a restart inside job 12 whose loss is known (85 - 80)."""
    text = (DATA / "chain-10.jsonl").read_text().replace('"progress": 76', '"progress": -1')
    last = '{"v": 1, "time": 1796131161.126388'  # the chain's end
    head, end = text.rsplit(last, 1)
    if known_stop:
        head += line(
            "12",
            "requeue",
            "stall",
            "runs again inside job 12",
            at=1796131158.0,
            how="in_job",
            checkpoint=80,
            progress=85,
        )
        head += line("12", "start", at=1796131158.5, checkpoint=80)  # fmt: skip
    return parse_chain(head + last + end)


def test_a_stop_without_progress_is_unknown_loss_in_the_report_not_zero() -> None:
    from hpcjobs.report.text import report_text

    usage, _, progress = recorded()
    report = chain_report("10", usage, _chain_without_progress_at_the_stop(), progress)
    assert (report.steps_lost_event_log, report.stops_with_unknown_loss) == (None, 1)
    data = report.to_dict()
    assert (data["steps_lost_event_log"], data["stops_with_unknown_loss"]) == (None, 1)
    (stop,) = data["interruptions"]
    assert (stop["progress_at_stop"], stop["steps_lost"], stop["how_code"]) == (
        None,
        None,
        "continued",
    )
    assert f"Steps: redone {report.redone_steps} (event log: unknown at 1 stop)" in (
        report_text(report)
    )
    assert "preemption, steps lost unknown</title>" in report_page([report])


def test_known_losses_are_summed_and_the_unknown_stops_counted() -> None:
    from hpcjobs.report.text import report_text

    usage, _, progress = recorded()
    chain = _chain_without_progress_at_the_stop(known_stop=True)
    report = chain_report("10", usage, chain, progress)
    assert (report.steps_lost_event_log, report.stops_with_unknown_loss) == (5, 1)
    assert [s["steps_lost"] for s in report.interruptions] == [None, 5]
    assert [s["how_code"] for s in report.interruptions] == ["continued", "in_job"]
    assert "(event log: 5, 1 stop unknown)" in report_text(report)
    # Without progress reports there is no breakdown; the event log's count still shows.
    bare = chain_report("10", usage, chain, {})
    assert "Steps lost (event log): 5, 1 stop unknown" in report_text(bare)
    # Every loss known: the sum alone, as before.
    usage, chain, progress = recorded()
    known = chain_report("10", usage, chain, progress)
    assert (known.steps_lost_event_log, known.to_dict()["stops_with_unknown_loss"]) == (2, 0)
    assert "(event log: 2)" in report_text(known)
    assert "Steps lost (event log): 2" in report_text(chain_report("10", usage, chain, {}))


def test_report_help_names_the_costs_and_where_the_prices_come_from() -> None:
    result = CliRunner().invoke(cli, ["report", "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Cost:" in text and "partitions[].price" in text
    assert "per GPU-hour or per node-hour" in text and '--json "cost"' in text
    assert "--site" in text and "no cost is shown" in text
