"""``hpcjobs report`` on the sandbox: a chain preempted once, start-up badput, the HTML page.

The workload (``report_workload.py``) reports progress every step and checkpoints every 25
steps, but does not checkpoint on the warning signal: after the preemption the next run redoes
the steps since the last checkpoint, which the report must count exactly as the event log does.
The page is rendered by headless Chromium (Debian's ``chromium``, installed by
scripts/bootstrap.sh); without it the test skips, except with ``CI=true``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hpcjobs.jobs.chain import Chain, read_chain
from hpcjobs.runner import LocalRunner
from hpcjobs.runtime.checkpoint import CheckpointDir
from tests.conftest import IN_CI, SCRUB_PREFIXES
from tests.live.waiting import wait_for

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")
WORKLOAD = str(Path(__file__).with_name("report_workload.py"))
#: Where to keep the screenshot for a look by eye (read at import: tests scrub HPCJOBS_*).
KEEP_SCREENSHOT = os.environ.get("HPCJOBS_TEST_KEEP_SCREENSHOT")


@dataclass
class Site:
    """The sandbox seen from a login node, with its own job index (``XDG_STATE_HOME``)."""

    slurm_env: dict[str, str]
    folder: Path
    jobs: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB_PREFIXES)}
        state = str(self.folder / "xdg-state")
        return {**clean, **self.slurm_env, "XDG_STATE_HOME": state, "PYTHONUNBUFFERED": "1"}

    def slurm(self, *argv: str) -> str:
        return LocalRunner(env=self.slurm_env).run(list(argv), timeout=60).stdout

    def hpcjobs(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HPCJOBS, *argv], env=self.env, cwd=cwd or self.folder, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip

    def submit(self, name: str, *workload: str, wait: bool = False) -> tuple[str, Path, str]:
        """Submit the workload on 2 nodes x 1 GPU; (job id, output folder, stderr)."""
        out = self.folder / name
        out.mkdir(mode=0o755)
        argv = ["--site", "sandbox", "submit", "-J", name, "--output-dir", str(out), "-N", "2",
                "--gpus-per-node", "1", "-t", "5:00", *(["--wait"] if wait else []),
                "--", PYTHON, WORKLOAD, *workload]  # fmt: skip
        proc = self.hpcjobs(*argv, cwd=out)
        assert proc.returncode == 0, proc.stderr
        job_id = proc.stdout.split()[0]
        self.jobs.append(job_id)
        return job_id, out, proc.stderr

    def report(self, *argv: str) -> dict[str, Any]:
        proc = self.hpcjobs("report", "--json", *argv)
        assert proc.returncode == 0, proc.stderr
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def gone(self, job_id: str) -> bool:
        out = LocalRunner(env=self.slurm_env).run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], check=False, timeout=60
        )
        return out.stdout.strip() == ""

    def ended(self, chain_file: Path, timeout: float = 180) -> Chain:
        def probe() -> Chain | None:
            found = read_chain(chain_file)
            return found if found.final is not None else None

        chain = wait_for(f"{chain_file.name} to end", probe, timeout)
        for job_id in chain.job_ids:
            self.jobs.append(job_id)
            wait_for(f"job {job_id} to leave the queue", partial(self.gone, job_id), 60)
        return chain

    def elapsed_gpu_seconds(self, job_ids: list[str]) -> list[tuple[str, int, int]]:
        """(job id, ElapsedRaw, GPUs) of every run, straight from sacct, once it has settled."""

        def probe() -> list[tuple[str, int, int]] | None:
            text = self.slurm("sacct", "-X", "-D", "-P", "-n", "-j", ",".join(job_ids),
                              "-o", "JobID,State,ElapsedRaw,AllocTRES,End")  # fmt: skip
            rows = [line.split("|") for line in text.splitlines() if line]
            if not rows or any(r[4] in ("", "Unknown") for r in rows):
                return None
            out = []
            for job_id, _, elapsed, tres, _ in rows:
                gpus = dict(i.split("=", 1) for i in tres.split(",") if "=" in i)["gres/gpu"]
                out.append((job_id, int(elapsed), int(gpus)))
            return out

        return wait_for("sacct to record every run", probe, 60)


@pytest.fixture(scope="module")
def site(sandbox: Any) -> Iterator[Site]:
    folder = Path(tempfile.mkdtemp(prefix="hpcjobs-test-report-", dir="/tmp"))
    os.chmod(folder, 0o755)
    box = Site(dict(sandbox.layout.client_env()), folder)
    yield box
    if box.jobs:
        LocalRunner(env=box.slurm_env).run(["scancel", *set(box.jobs)], check=False, timeout=60)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def preempted(site: Site) -> tuple[str, Path, Chain]:
    """A chain preempted once, 36 or more steps in (its last checkpoint was step 24)."""
    job_id, out, _ = site.submit("report-preempt", "--steps", "120", "--step-time", "0.1")
    return job_id, out, preempt_past(site, job_id, out, 36)


def preempt_past(site: Site, job_id: str, out: Path, step: int) -> Chain:
    """Preempt the chain of ``job_id`` once it reported ``step``; the chain once it ended."""
    ckpt = CheckpointDir(out / "checkpoints")
    wait_for(f"step {step}", lambda: (ckpt.progress() or 0) >= step, 90, every=0.1)
    preemptor = site.slurm("sbatch", "--parsable", "-p", "urgent", "-N", "3", "--exclusive",
                           "-J", "preemptor", "-o", "/dev/null", "--wrap", "sleep 5")  # fmt: skip
    preemptor_id = preemptor.strip().split(";")[0]
    site.jobs.append(preemptor_id)
    chain = site.ended(out / f"chain-{job_id}.jsonl")
    # Gone before the next test's job, which it would preempt too.
    wait_for("the preemptor to leave the queue", partial(site.gone, preemptor_id), 120)
    return chain


def test_report_of_a_chain_preempted_once(site: Site, preempted: tuple[str, Path, Chain]) -> None:
    root, _, chain = preempted
    stops = chain.interruptions()
    # Preempted once by design; a second time when the scheduler started the continuation on
    # the freed nodes before the still-pending preemptor (a race of the loaded 2-core host).
    assert {s.cause for s in stops} == {"preemption"} and 1 <= len(stops) <= 2, chain.events
    assert chain.final is not None and chain.final.cause == "finish"
    runs = site.elapsed_gpu_seconds(chain.job_ids)
    assert len(runs) == len(stops) + 1, runs
    (report,) = site.report(root)["chains"]

    # Allocated time is accounting's: elapsed x GPUs of every run, within a second.
    expected = sum(elapsed * gpus for _, elapsed, gpus in runs)
    assert abs(report["allocated_s"] - expected) <= 1.0, (report["allocated_s"], runs)
    assert report["allocated_gpu_hours"] == pytest.approx(expected / 3600, abs=1 / 3600)
    assert [r["gpus"] for r in report["runs"]] == [2] * len(runs)
    assert all(r["gpus_source"] == "accounting" for r in report["runs"])
    # The parts add up to the allocated time, run by run and in total.
    for run, (_, elapsed, _) in zip(report["runs"], runs, strict=True):
        assert sum(run["parts_s"].values()) == pytest.approx(elapsed, abs=1e-6), run
    assert sum(report["parts_s"].values()) == pytest.approx(report["allocated_s"], abs=1e-6)
    assert sum(report["shares"].values()) == pytest.approx(1.0, abs=1e-9)
    # Redone steps: exactly what the event log says was lost (progress at the stop minus the
    # checkpoint resumed from), and more than none (the workload does not save on the signal).
    # (How many depends on when the signal lands between two checkpoints: at least one.)
    lost = sum(s.steps_lost or 0 for s in stops)
    assert lost >= 1 and all(s.steps_lost is not None for s in stops), stops
    assert report["redone_steps"] == lost == report["steps_lost_event_log"], report
    assert report["parts_s"]["redone"] > 0
    assert report["runs"][0]["signal_at"] is not None
    assert 0.3 < report["goodput"] < 1.0, report["shares"]
    assert report["step_time"]["median_s"] == pytest.approx(0.1, abs=0.05)
    assert len(report["gaps_s"]) == len(stops) and min(report["gaps_s"]) >= 0
    # The terminal table says the same.
    text = site.hpcjobs("report", root)
    assert text.returncode == 0, text.stderr
    assert f"Chain {root} (report-preempt): {len(runs)} runs" in text.stdout
    assert f"Steps: redone {lost} (event log: {lost})" in text.stdout


def test_sleep_before_the_first_step_is_start_up_badput(site: Site) -> None:
    root, out, stderr = site.submit(
        "report-startup", "--steps", "40", "--step-time", "0.05", "--sleep-first", "8", wait=True
    )
    chain = site.ended(out / f"chain-{root}.jsonl")
    assert len(chain.job_ids) == 1
    (report,) = site.report(root)["chains"]
    (run,) = report["runs"]
    # 8 s of sleep, plus Python's start, within accounting's 1 s resolution.
    # Upper bound with room for Python's start on a loaded machine.
    assert 8.0 <= run["parts_s"]["startup"] <= 20.0, run
    assert report["biggest_badput"] == "startup", report["shares"]
    assert sum(run["parts_s"].values()) == pytest.approx(run["elapsed_s"], abs=1e-6)
    # submit --wait ended with the one-line report.
    line = [x for x in stderr.splitlines() if "Report: goodput" in x]
    assert line and "GPU-hours allocated" in line[-1], stderr
    assert "biggest badput: start-up until the first step" in line[-1], stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_page_renders_in_chromium(site: Site, preempted: tuple[str, Path, Chain]) -> None:
    browser = _chromium()
    if browser is None:
        if IN_CI:
            pytest.fail("CI=true but chromium is missing (scripts/bootstrap.sh installs it)")
        pytest.skip("chromium is not installed")
    root, _, chain = preempted
    page = site.folder / f"report-{root}.html"
    proc = site.hpcjobs("report", root, "--html", str(page))
    assert proc.returncode == 0, proc.stderr
    assert oct(page.stat().st_mode & 0o777) == "0o600"
    text = page.read_text()
    assert "<script" not in text and "http://" not in text.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )
    flags = chromium_flags(site.folder)
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr
    # The timeline shows every run of the chain, and the interruption between them.
    for number, job_id in enumerate(chain.job_ids):
        assert f'data-run="{number}" data-job="{job_id}"' in dom.stdout, dom.stdout[:2000]
    assert 'class="interruption"' in dom.stdout
    shot = site.folder / f"report-{root}.png"
    width, height, pixels = screenshot(browser, page, shot, (1000, 900))
    assert (width, height) == (1000, 900)
    colours = set(pixels)
    non_white = sum(1 for p in pixels if p != (255, 255, 255))
    assert len(colours) > 20 and non_white > 0.02 * width * height, (len(colours), non_white)
    # Goodput green of the breakdown and the runs is on the screen.
    assert any(abs(r - 0x2E) < 8 and abs(g - 0x9D) < 8 and abs(b - 0x4F) < 8 for r, g, b in colours)
    if KEEP_SCREENSHOT:
        shutil.copy(shot, KEEP_SCREENSHOT)
        shutil.copy(page, Path(KEEP_SCREENSHOT).with_suffix(".html"))


def chromium_flags(folder: Path) -> list[str]:
    """Headless Chromium, with its profile in ``folder``."""
    return ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={folder / 'chromium-profile'}"]  # fmt: skip


def screenshot(
    browser: str, page: Path, shot: Path, size: tuple[int, int]
) -> tuple[int, int, list[tuple[int, int, int]]]:
    """``page`` drawn by Chromium into ``shot`` at ``size``: width, height and pixels."""
    subprocess.run(
        [browser, *chromium_flags(shot.parent), f"--window-size={size[0]},{size[1]}",
         f"--screenshot={shot}", page.as_uri()],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    return read_png(shot)


def read_png(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 255
        rows.append(line)
        prev = line
    pixels = [(row[i], row[i + 1], row[i + 2]) for row in rows for i in range(0, stride, bpp)]
    return width, height, pixels


#: A stand-in for nvidia-smi on the sandbox's nodes (it has no GPUs): answers the sampler's
#: query as the real one does (one line per GPU every -l seconds) with the Slurm node's name in
#: the UUID (the sandbox's nodes share one host name), so the test can tell where each ran.
FAKE_NVIDIA_SMI = r"""#!/bin/bash
# Like nvidia-smi --query-gpu: one sample, or one every N seconds with -l N.
every=0
while (($#)); do [[ $1 == -l ]] && every=$2; shift; done
while :; do
    now=$(date '+%Y/%m/%d %H:%M:%S.000')
    printf '%s, 0, GPU-%s-0, 80, 1000, 81559\n' "$now" "$SLURMD_NODENAME"
    ((every)) || exit 0
    sleep "$every"
done
"""


def test_gpu_samples_come_from_every_node(site: Site) -> None:
    """A 2-node job samples GPUs on both nodes (the batch node's sampler alone saw half)."""
    import yaml

    from hpcjobs.resources import site_configs_dir

    stub = site.folder / "fake-bin"
    stub.mkdir(mode=0o755)
    (stub / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    os.chmod(stub / "nvidia-smi", 0o755)
    config = yaml.safe_load((site_configs_dir() / "sandbox.yaml").read_text())
    config["monitoring"] = {"gpu_interval": 1}
    site_file = site.folder / "sandbox-sampled.yaml"
    site_file.write_text(yaml.safe_dump(config))
    out = site.folder / "gpu-sampled"
    out.mkdir(mode=0o755)
    env = {**site.env, "PATH": f"{stub}:{site.env['PATH']}"}
    argv = [HPCJOBS, "--site", str(site_file), "submit", "-J", "gpu-sampled", "--output-dir",
            str(out), "-N", "2", "--gpus-per-node", "1", "-t", "5:00", "--wait",
            "--", PYTHON, WORKLOAD, "--steps", "40", "--step-time", "0.1"]  # fmt: skip
    proc = subprocess.run(argv, env=env, cwd=out, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    root = proc.stdout.split()[0]
    site.jobs.append(root)
    site.ended(out / f"chain-{root}.jsonl")
    files = sorted(p.name for p in (out / f"gpu-{root}").iterdir())
    nodes = site.slurm("sacct", "-X", "-n", "-P", "-j", root, "-o", "NodeList").split()[0]
    expanded = site.slurm("scontrol", "show", "hostnames", nodes).split()
    assert files == sorted(f"{n}.csv" for n in expanded), (files, expanded)
    for name in files:
        assert (out / f"gpu-{root}" / name).stat().st_mode & 0o777 == 0o600
    (report,) = site.report(root)["chains"]
    print(json.dumps(report["gpu"], indent=1)[:1500])
    gpus = report["gpu"]["gpus"]
    assert {(gpu["host"], gpu["uuid"]) for gpu in gpus} == {(n, f"GPU-{n}-0") for n in expanded}
    assert all(gpu["samples"] >= 2 for gpu in gpus), gpus
    assert report["gpu"]["idle"] == 0


def test_before_after_of_two_real_chains(site: Site) -> None:
    """The same program twice, one change between them (no checkpoint in 120 steps, then one
    every 5 steps), each preempted once past step 36: ``report --compare`` gives the step-time,
    goodput and cost deltas with their direction in the terminal, in JSON and on a page that
    Chromium draws."""
    browser = _chromium()
    if browser is None:
        if IN_CI:
            pytest.fail("CI=true but chromium is missing (scripts/bootstrap.sh installs it)")
        pytest.skip("chromium is not installed")
    roots = []
    for name, every in (("before", "200"), ("after", "5")):
        job_id, out, _ = site.submit(name, "--steps", "120", "--step-time", "0.1",
                                     "--checkpoint-every", every)  # fmt: skip
        chain = preempt_past(site, job_id, out, 36)
        assert len(chain.job_ids) == 2, chain.job_ids
        site.elapsed_gpu_seconds(chain.job_ids)  # accounting has settled
        roots.append(job_id)
    before, after = roots
    proc = site.hpcjobs("--site", "sandbox", "report", "--compare", before, after, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = {row["what"]: row for row in data["rows"]}
    # Fewer steps redone after the preemption: every step reached (36 or more) before, at most
    # the 4 since the last checkpoint after.
    assert rows["badput: steps redone after an interruption (%)"]["direction"] == "better", rows
    for what in ("step time median (s)", "goodput (%)", "cost allocated (USD)",
                 "cost of badput (USD)"):  # fmt: skip
        assert rows[what]["direction"] in ("better", "worse", "same"), rows[what]
    assert [d["what"] for d in data["differences"]] == ["command"], data["differences"]
    assert "--checkpoint-every 200" in data["differences"][0]["a"]
    text = site.hpcjobs("--site", "sandbox", "report", "--compare", before, after)
    assert (
        text.returncode == 0
        and "DIRECTION" in text.stdout
        and "cost allocated (USD)" in (text.stdout)
    )
    page = site.folder / "before-after.html"
    proc = site.hpcjobs("--site", "sandbox", "report", "--compare", before, after, "--html",
                        str(page))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    dom = subprocess.run(
        [browser, *chromium_flags(site.folder), "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr
    assert f"Before/after: {before} vs {after}" in dom.stdout
    assert '<td class="better">' in dom.stdout and "cost: " in dom.stdout
    for root in roots:  # each chain's own timeline is the picture under the table
        assert f'id="chain-{root}"' in dom.stdout and 'class="interruption"' in dom.stdout
    shot = site.folder / "before-after.png"
    width, height, pixels = screenshot(browser, page, shot, (1000, 1400))
    assert (width, height) == (1000, 1400)
    colours = set(pixels)
    assert len(colours) > 20, len(colours)
    # The green of "better" (#1a7f37) and the goodput green of the timelines are on screen.
    assert any(
        abs(r - 0x1A) < 10 and abs(g - 0x7F) < 10 and abs(b - 0x37) < 10 for r, g, b in colours
    )
    if KEEP_SCREENSHOT:
        keep = Path(KEEP_SCREENSHOT)
        shutil.copy(shot, keep.with_name(keep.stem + "-compare.png"))
    # The plan measures its interruption rate from these chains (and the module's others).
    proc = site.hpcjobs("--site", "sandbox", "plan", "--params", "1B", "--seq-len", "2048",
                        "--tokens", "1B", "--global-batch", "48", "--nodes", "2",
                        "--history", "now-1hours", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    faults = json.loads(proc.stdout)["layouts"][0]["interruptions"]
    assert faults["source"].startswith("measured: "), faults
    assert faults["requeue_h"] > 0 and faults["mttf_h"] > 0
