"""The job's supervisor on faults without a warning (crashes, exclusions, stalls, standbys), with
stand-ins for Slurm's commands, and the infrastructure signatures it searches for."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hpcjobs.config.models import Faults
from hpcjobs.config.signatures import DEFAULT_SIGNATURES, all_patterns, check_ere
from hpcjobs.jobs.chain import parse_chain
from hpcjobs.runtime.supervisor.supervise import Supervisor
from tests.eventlines import events_in, line
from tests.unit.test_requeue import SCRIPT, _begin, _calls, _job_env, _policy, _supervisor

# ---- the signatures: real lines from NCCL, PyTorch, CUDA and the driver ------------------------

INFRASTRUCTURE = {
    "nccl-ib-completion": "gpu017:2291:2374 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
    "completion from peer 10.10.1.18<52433> with status=12 opcode=0 len=0 vendor err 129 (Send)",
    "nccl-ib-completion-2.14": "node3:91:120 [0] NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.4<34567> with error 12, opcode 0, len 0, vendor err 129",
    "nccl-ib-completion-2.29": "h1:5:9 [3] NCCL WARN NET/IB: Got completion from peer 10.0.0.2<1> "
    "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_0",
    "nccl-ib-async-event": "h1:5:9 [0] NCCL WARN NET/IB : mlx5_2:1 Got async event : port error",
    "nccl-system-error": "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/"
    "distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
    "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
    "nccl-remote-error": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
    "2027, remote process exited or there was a network error, NCCL version 2.21.5",
    "torch-collective-timeout": "[rank1]:[E1201 10:11:12.123456 ProcessGroupNCCL.cpp:616] [Rank 1]"
    " Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4021, OpType=ALLREDUCE, "
    "NumelIn=26214400, NumelOut=26214400, Timeout(ms)=600000) ran for 600009 milliseconds before "
    "timing out.",
    "torch-watchdog-hang": "[rank0]:[E1201 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID "
    "0(default_pg) Rank 0] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
    "progress",
    "cuda-ecc": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "cuda-unavailable": "torch.AcceleratorError: CUDA error: CUDA-capable device(s) is/are busy "
    "or unavailable",
    "xid-79": "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
    "off the bus.",
    "gpu-lost": "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot "
    "the system to recover this GPU",
}

APPLICATION = {
    "value-error": "ValueError: rank 1: a bug in the training loop at step 12",
    "assertion": "AssertionError: loss is nan",
    "cuda-oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "illegal-access": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "nccl-invalid-usage": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:"
    "1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5",
    "gloo-peer-closed": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
    "Connection closed by peer [10.0.0.2]:6000",
}


def _grep(line: str) -> bool:
    args = [arg for pattern in all_patterns() for arg in ("-e", pattern)]
    proc = subprocess.run(["grep", "-E", "-q", *args], input=line + "\n", text=True, check=False)
    assert proc.returncode in (0, 1), proc
    return proc.returncode == 0


@pytest.mark.parametrize("line", INFRASTRUCTURE.values(), ids=INFRASTRUCTURE.keys())
def test_infrastructure_lines_match_a_signature(line: str) -> None:
    assert _grep(line)


@pytest.mark.parametrize("line", APPLICATION.values(), ids=APPLICATION.keys())
def test_application_errors_match_none(line: str) -> None:
    assert not _grep(line)


def test_every_default_is_valid_ere_and_has_a_source() -> None:
    for sig in DEFAULT_SIGNATURES:
        assert check_ere(sig.pattern) == sig.pattern
        assert sig.source
    assert len({sig.name for sig in DEFAULT_SIGNATURES}) == len(DEFAULT_SIGNATURES)


@pytest.mark.parametrize("pattern", [r"\d+ errors", r"(?i)nccl", r"a.*?b", r"\bword"])
def test_site_signatures_outside_ere_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="grep -E"):
        Faults(signatures=[pattern])


def test_site_signatures_come_after_the_defaults() -> None:
    patterns = all_patterns(["mlx5_core .* link down"])
    assert patterns[-1] == "mlx5_core .* link down"
    assert patterns[:-1] == [sig.pattern for sig in DEFAULT_SIGNATURES]


# ---- classifying a crash: the first failing task, its node's copies of output ------------------

#: The job's stderr before this run began: another run's failure there is not this run's.
EARLIER = "earlier run\nsrun: error: n9: task 0: Exited with exit code 9\n"


def _crash(
    tmp_path: Path, stderr: str, captures: dict[str, str], site: tuple[str, ...] = ()
) -> tuple[str, str, str]:
    """(cause, suspect, evidence) of a run whose part of the job's stderr is ``stderr``, with
    ``captures`` (file name: text) in its rank output copies; ``site``: the site's own
    signatures (the policy's; the supervisor searches hpcjobs' defaults first)."""
    env = _job_env(tmp_path, HPCJOBS_CHAIN_ROOT="300")
    err = tmp_path / "job.err"
    err.write_text(EARLIER + stderr)
    capture = Path(env["HPCJOBS_JOB_OUTPUT_DIR"]) / "capture-300"
    capture.mkdir(parents=True)
    for name, text in captures.items():
        (capture / name).write_text(text)
    sup = _supervisor(env, patterns=list(site))
    sup.ctx.err_file, sup.ctx.err_offset, sup.ctx.capture_dir = str(err), len(EARLIER), str(capture)
    return sup.ending.crash()


def test_signature_in_the_failing_ranks_output_is_infrastructure(tmp_path: Path) -> None:
    cause, suspect, evidence = _crash(
        tmp_path,
        "srun: error: n2: task 1: Exited with exit code 1\nsrun: error: n1: task 0: Terminated\n",
        {
            "n2.rank-1": "step 20\n" + INFRASTRUCTURE["nccl-ib-completion"] + "\nTraceback ...\n",
            "n1.rank-0": "step 20\n",
        },
    )
    assert (cause, suspect) == ("infrastructure", "n2")
    assert "NET/IB : Got completion from peer" in evidence


def test_a_signature_wins_inside_a_traceback(tmp_path: Path) -> None:
    trace = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        + INFRASTRUCTURE["nccl-system-error"]
        + "\n"
    )
    got = _crash(
        tmp_path, "srun: error: n3: task 5: Exited with exit code 1\n", {"n3.rank-5": trace}
    )
    assert got[:2] == ("infrastructure", "n3")


def test_plain_exception_is_application_and_blames_nobody(tmp_path: Path) -> None:
    cause, suspect, evidence = _crash(
        tmp_path,
        "srun: error: n2: task 1: Exited with exit code 1\n",
        {
            "n2.rank-1": "Traceback ...\n" + APPLICATION["value-error"] + "\n",
            # Another node's rank saw its peer go away: that node is not the one that failed.
            "n1.rank-0": INFRASTRUCTURE["nccl-remote-error"] + "\n",
        },
    )
    assert (cause, suspect) == ("application", "")
    assert evidence == "srun: n2: task 1: Exited with exit code 1"


@pytest.mark.parametrize(
    ("what", "cause"),
    [
        ("Bus error", "infrastructure"),
        ("Killed", "infrastructure"),
        ("Segmentation fault (core dumped)", "application"),
    ],
)
def test_signals_from_outside(tmp_path: Path, what: str, cause: str) -> None:
    got = _crash(tmp_path, f"srun: error: n2: task 1: {what}\n", {"n2.rank-1": "ok\n"})
    assert got[0] == cause


def test_a_node_that_did_not_take_the_tasks_is_infrastructure(tmp_path: Path) -> None:
    # Seen at 128 nodes on a loaded host: one slurmd too slow to answer; srun then aborts the
    # step, and the tasks it killed elsewhere are not the fault.
    stderr = (
        "srun: error: Task launch for StepId=1.0 failed on node n32: Socket timed out on "
        "send/recv operation\nsrun: error: Application launch failed: Socket timed out on "
        "send/recv operation\nsrun: Job step aborted\nsrun: error: n5: tasks 40-47: Killed\n"
    )
    cause, suspect, evidence = _crash(tmp_path, stderr, {"n5.rank-40": "step 3\n"})
    assert (cause, suspect) == ("infrastructure", "n32")
    assert evidence == (
        "srun: Task launch for StepId=1.0 failed on node n32: Socket timed out on send/recv "
        "operation"
    )


def test_no_srun_report_is_application(tmp_path: Path) -> None:
    assert _crash(tmp_path, "python: error\n", {}) == ("application", "", "")


def test_a_sites_own_signature_counts_too(tmp_path: Path) -> None:
    line = "mlx5_core 0000:3b:00.0: port 1 link down"
    stderr = "srun: error: n4: task 2: Exited with exit code 1\n"
    assert _crash(tmp_path, stderr, {"n4.rank-2": line + "\n"})[0] == "application"
    (tmp_path / "site").mkdir()
    got = _crash(tmp_path / "site", stderr, {"n4.rank-2": line + "\n"}, ("mlx5_core .* link down",))
    assert got == ("infrastructure", "n4", line)


def _capture_function() -> tuple[str, str]:
    """(name, text) of the shell function that copies a rank's output (it sends its stdout
    and stderr through hpcjobs_tee), with the functions it calls, as a rendered script
    defines them (plain bash, run in each rank)."""
    from hpcjobs.config.loader import load_site
    from hpcjobs.script.jobspec import parse_spec
    from hpcjobs.script.render import render_job

    script = render_job(parse_spec({"command": ["true"]}), load_site("sandbox")).script

    def body(name: str) -> str:
        start = script.index(f"{name}() {{")
        return script[start : script.index("\n}\n", start) + 3]

    (found,) = re.findall(r"(?ms)^(hpcjobs_\w+)\(\) \{\n(?:(?!^\}$).)*?exec 2> >\(.*?^\}$", script)
    called = sorted(set(re.findall(r"\b(hpcjobs_\w+) ", body(found))) - {found})
    assert "hpcjobs_tee" in called
    # Each rank is a `bash -c` of its own: it sees only the functions the script exports.
    exported = {
        name for names in re.findall(r"(?m)^export -f (.*)$", script) for name in names.split()
    }
    assert {found, *called} <= exported
    return found, "".join(body(name) for name in [*called, found])


def test_a_rank_copies_its_output_unchanged(tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "HPCJOBS_CAPTURE_DIR": str(tmp_path),
        "SLURMD_NODENAME": "n7",
        "RANK": "3",
    }
    name, function = _capture_function()
    script = (
        function + f"( {name}; echo out-line; echo err-line >&2; printf 'no newline' )\n"
        'sleep 0.3; cat "$HPCJOBS_CAPTURE_DIR/n7.rank-3"\n'
    )
    proc = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert "out-line" in proc.stdout and "err-line" in proc.stderr
    copy = (tmp_path / "n7.rank-3").read_text()
    # Both streams go to one copy; lines of the two may interleave, none is cut.
    assert "out-line\n" in copy and "err-line\n" in copy and "no newline" in copy
    assert (tmp_path / "n7.rank-3").stat().st_mode & 0o077 == 0


# ---- exclusions -------------------------------------------------------------------------------


def _exclude(tmp_path: Path, *batches: str, total: str, mx: int = 8) -> list[str]:
    env = _job_env(
        tmp_path,
        HPCJOBS_CHAIN_ROOT="300",
        SLURM_JOB_PARTITION="batch",
        SLURM_JOB_NUM_NODES="2",
    )
    stub = Path(env["PATH"].split(":")[0]) / "scontrol"
    stub.write_text(f"#!/bin/bash\necho 'PartitionName=batch TotalNodes={total} State=UP'\n")
    sup = _supervisor(env, max_excluded=mx)
    for batch in batches:
        sup.nodes.exclude("node_failure", batch.split())
    return sup.ctx.chain.excluded()


def test_exclusions_accumulate(tmp_path: Path) -> None:
    assert _exclude(tmp_path, "n2", "n5 n6", "n2", total="16") == ["n5", "n6", "n2"]


def test_exclusions_never_leave_too_few_nodes(tmp_path: Path) -> None:
    # 3 nodes, a 2-node job: one node may be excluded; the oldest exclusion is lifted first.
    assert _exclude(tmp_path, "n2", "n1", total="3") == ["n1"]
    last = events_in(tmp_path / "run" / "chain-300.jsonl")[-1]
    assert (last.names("released"), last.number("limit")) == (["n2"], 1)
    assert "released=n2 (at most 1 excluded)" in last.detail


def test_exclusions_are_bounded_by_the_site(tmp_path: Path) -> None:
    assert _exclude(tmp_path, "n1 n2 n3", total="64", mx=2) == ["n2", "n3"]


# ---- stalls -----------------------------------------------------------------------------------

#: Writes a node agent's summary (hpcjobs.runtime.supervisor.agent), as the agent does:
#: ``summary NODE RANK STEP`` replaces ``$P/node-NODE`` with one rank at STEP since now.
SUMMARY = (
    'summary() { printf "%s %s 300\\n%s %s 0\\n" "$(date +%s.%N)" "$1" "$2" "$3" '
    '>"$P/node-$1.tmp" && mv -f "$P/node-$1.tmp" "$P/node-$1"; }\n'
)


def _summary(node: str, ranks: dict[int, int], job: str = "300", age: float = 0.0) -> str:
    """A node summary, written ``age`` s ago, of ``ranks`` (rank: step) at their step since."""
    lines = [f"{time.time() - age:.3f} {node} {job}"] + [f"{r} {s} 0" for r, s in ranks.items()]
    return "\n".join(lines) + "\n"


def _stall(
    tmp_path: Path, launch: list[str], *, grace: int = 0, summaries: dict[str, str] | None = None
) -> tuple[Supervisor, int]:
    """Run ``launch`` as the run's step under the stall watch (timeout 2 s, the warning signal
    SIGUSR2, ``grace`` s to checkpoint); ``summaries`` are node summaries already there. The
    step's environment has the progress folder in $P."""
    env = _job_env(tmp_path, HPCJOBS_CHAIN_ROOT="300")
    progress = tmp_path / "run" / "progress-300"
    progress.mkdir()
    for name, text in (summaries or {}).items():
        (progress / name).write_text(text)
    env["P"] = str(progress)
    policy = _policy(stall_timeout=2, stall_grace=grace, signal="USR2")
    sup = Supervisor(policy, SCRIPT, launch, env=env)
    sup.ctx.progress_dir = str(progress)
    started = time.monotonic()
    sup.program.launch()
    rc = sup.program.wait()
    assert sup.program.watch is not None
    sup.program.watch.close()
    assert time.monotonic() - started < 25
    return sup, rc


def _events(tmp_path: Path) -> list[list[str]]:
    return [[e.event, e.cause, e.detail] for e in events_in(tmp_path / "run" / "chain-300.jsonl")]


def test_a_rank_behind_the_others_is_the_suspect(tmp_path: Path) -> None:
    # The step ignores the warning signal: after the grace time it is killed.
    writers = "summary n2 1 5; for i in $(seq 6 40); do summary n1 0 $i; sleep 0.3; done"
    sup, rc = _stall(tmp_path, ["bash", "-c", f"trap '' USR2; {SUMMARY}{writers}"])
    assert rc == 128 + signal.SIGKILL
    assert sup.program.watch is not None and sup.program.watch.found is not None
    node, found = sup.program.watch.found
    assert (node, found.rank, found.step, found.tied) == ("n2", 1, 5, 0)
    assert found.idle >= 2
    # The run ends as a stall on n2: logged, n2 excluded, the chain goes on.
    assert sup.finish(rc) == 0
    events = _events(tmp_path)
    assert events[0][:2] == ["fault", "stall"]
    assert events[0][2].startswith("node=n2 evidence=rank 1 at step 5 for ")
    assert events[1] == ["exclude", "stall", "nodes=n2"]
    assert events[2][:2] == ["requeue", "stall"]


def test_tied_ranks_blame_nobody(tmp_path: Path) -> None:
    summaries = {"node-n1": _summary("n1", {0: 5}), "node-n2": _summary("n2", {1: 5})}
    sup, rc = _stall(tmp_path, ["sleep", "30"], grace=5, summaries=summaries)
    # sleep listens for no warning: it gets none, and is killed once the grace time is over.
    assert rc == 128 + signal.SIGKILL
    assert sup.program.watch is not None and sup.program.watch.found is not None
    node, found = sup.program.watch.found
    assert (node, found.step, found.tied) == ("", 5, 1)
    assert sup.finish(rc) == 0
    fault = _events(tmp_path)[0]
    assert fault[:2] == ["fault", "stall"]
    assert fault[2].startswith("node=- evidence=rank ")
    assert fault[2].endswith("(1 other rank(s) tied with it: no node blamed)")
    assert "exclude" not in [e[0] for e in _events(tmp_path)]


def test_progressing_and_silent_ranks_never_stall(tmp_path: Path) -> None:
    # rank 0 advances every 0.5 s; rank 7 never reports: nobody is judged, the step ends itself.
    writers = "for i in $(seq 1 12); do summary n1 0 $i; sleep 0.5; done"
    sup, rc = _stall(tmp_path, ["bash", "-c", SUMMARY + writers])
    assert rc == 0
    assert sup.program.watch is not None and sup.program.watch.found is None


def test_reports_from_an_earlier_run_are_not_judged(tmp_path: Path) -> None:
    # Summaries left by the run before: one of another job, one no agent has renewed for long.
    summaries = {
        "node-n1": _summary("n1", {0: 40}, job="299"),
        "node-n2": _summary("n2", {1: 39}, age=3600),
    }
    sup, rc = _stall(tmp_path, ["sleep", "5"], summaries=summaries)
    assert rc == 0
    assert sup.program.watch is not None and sup.program.watch.found is None


# ---- the event log: faults, exclusions, standbys ------------------------------------------------


def test_history_reads_suspect_evidence_and_exclusions() -> None:
    chain = parse_chain(
        line("100", "start", "-", "checkpoint=-1 nodes=n[1-2] batch=n1", at=1.0, checkpoint=-1,
             nodelist="n[1-2]", batch="n1")
        + line("100", "standby", "-", "standby job 101 for job 100", at=1.1, standby="101",
               standby_for="100")
        + line("100", "fault", "infrastructure", "node=n2 evidence=NCCL WARN NET/IB : Got x",
               at=5.0, node="n2", evidence="NCCL WARN NET/IB : Got x")
        + line("100", "exclude", "infrastructure", "nodes=n2", at=5.1, nodes=["n2"], released=[])
        + line("100", "requeue", "infrastructure", "continued as job 101 (the standby)", at=5.2,
               checkpoint=19, progress=25, how="continued", next="101")
        + line("101", "start", "-", "checkpoint=19 nodes=n[1,3] batch=n1", at=6.0, checkpoint=19,
               nodelist="n[1,3]", batch="n1")
        + line("101", "standby", "-", "standby job 102 for job 101", at=6.1, standby="102",
               standby_for="101")
        + line("102", "fault", "node_failure",
               "node=n1 job=101 evidence=job 101 ended NODE_FAIL without a word (batch host n1)",
               at=9.0, node="n1", evidence="job 101 ended NODE_FAIL without a word (batch host n1)",
               stopped_job="101")
        + line("102", "exclude", "node_failure", "nodes=n1 released=n2 (at most 1 excluded)",
               at=9.0, nodes=["n1"], released=["n2"])
        + line("102", "requeue", "node_failure",
               "standby job 102 took over from job 101 (NODE_FAIL)", at=9.0, checkpoint=29,
               progress=29, how="took_over", next="102", stopped_job="101",
               slurm_state="NODE_FAIL")
        + line("102", "start", "-", "checkpoint=29 nodes=n[2-3] batch=n2", at=9.8, checkpoint=29,
               nodelist="n[2-3]", batch="n2")
        + line("102", "end", "finish", "completed", at=20.0)
    )  # fmt: skip
    first, second = chain.interruptions()
    assert (first.cause, first.suspect, first.excluded) == ("infrastructure", "n2", ["n2"])
    assert first.evidence == "NCCL WARN NET/IB : Got x"
    assert (first.job_id, first.resumed_job_id, first.resumed_from) == ("100", "101", 19)
    assert (second.job_id, second.resumed_job_id) == ("101", "102")
    assert (second.suspect, second.excluded) == ("n1", ["n1"])
    assert second.resume_latency == pytest.approx(0.8)
    assert chain.job_ids == ["100", "101", "102"]
    assert chain.standby_ids == ["101", "102"]
    assert chain.standby_for("101") == "102"


# ---- the site's health check on a suspect ----------------------------------------------------


@pytest.mark.parametrize(("code", "excluded"), [(0, []), (3, ["n2"])])
def test_health_check_clears_or_excludes_the_suspect(
    tmp_path: Path, code: int, excluded: list[str]
) -> None:
    env = _job_env(tmp_path, HPCJOBS_CHAIN_ROOT="300", CODE=str(code))
    srun = Path(env["PATH"].split(":")[0]) / "srun"
    # Runs the command given after the options, as srun would on the node.
    srun.write_text('#!/bin/bash\necho "srun $*" >> "$STUB_LOG"\nshift 6\nexec "$@"\n')
    srun.chmod(0o755)
    sup = _supervisor(env, health_check="echo checking; exit $CODE")
    sup.nodes.fault_exclude("infrastructure", "n2")
    assert sup.ctx.chain.excluded() == excluded
    assert "srun --overlap --nodes=1 --ntasks=1 --nodelist=n2" in _calls(tmp_path)
    (health,) = [e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "health"]
    assert health.cause == ("pass" if code == 0 else "fail")
    assert (health.text("node"), health.number("exit"), health.text("output")) == (
        "n2",
        code,
        "checking",
    )


def test_every_rank_reports_progress_for_the_stall_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcjobs.runtime.checkpoint import report_step

    monkeypatch.setenv("HPCJOBS_PROGRESS_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    report_step(5)
    report_step(6)
    assert (tmp_path / "rank-2").read_text() == "6 n7\n"
    monkeypatch.delenv("HPCJOBS_PROGRESS_DIR")
    report_step(7)  # outside a job: nothing, no error
    assert (tmp_path / "rank-2").read_text() == "6 n7\n"


# ---- cancel means stop: the standby of a cancelled run never runs the program -----------------


def _standby_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = _job_env(tmp_path, SLURM_JOB_ID="301", HPCJOBS_CHAIN_ROOT="300", **extra)
    env["HPCJOBS_STANDBY_FOR"] = "300"
    (tmp_path / "run" / "chain-300.jsonl").write_text(
        line("300", "start", checkpoint=-1)
        + line(
            "300", "standby", detail="standby job 301 for job 300", standby="301", standby_for="300"
        )
    )
    return env


def test_standby_of_a_run_cancelled_while_completing_does_not_run(tmp_path: Path) -> None:
    """Slurm releases an afternotok standby while its cancelled predecessor still shows
    COMPLETING; accounting already says CANCELLED: the standby ends and says why."""
    env = _standby_env(tmp_path, STUB_JOB_STATE="COMPLETING", STUB_SACCT_RUNS="CANCELLED")
    assert _begin(_supervisor(env)) == 0
    chain = parse_chain((tmp_path / "run" / "chain-300.jsonl").read_text())
    assert chain.final is not None
    assert (chain.final.event, chain.final.cause) == ("end", "fail")
    assert chain.final.detail == "cancelled: job 300 was cancelled"
    assert "sbatch" not in _calls(tmp_path)


def test_standby_of_a_run_lost_with_its_node_takes_over(tmp_path: Path) -> None:
    env = _standby_env(tmp_path, STUB_JOB_STATE="COMPLETING", STUB_SACCT_RUNS="NODE_FAIL")
    assert _begin(_supervisor(env)) is None
    (took,) = [e for e in events_in(tmp_path / "run" / "chain-300.jsonl") if e.event == "requeue"]
    assert "took over from job 300 (NODE_FAIL)" in took.detail
    assert (took.text("how"), took.stopped_job, took.text("slurm_state")) == (
        "took_over",
        "300",
        "NODE_FAIL",
    )


@pytest.mark.parametrize(
    "when",
    ["signal before sbatch", "state before sbatch", "cancelled during sbatch"],
)
def test_a_run_being_cancelled_keeps_no_standby(tmp_path: Path, when: str) -> None:
    state_file = tmp_path / "state"
    env = _job_env(tmp_path, STUB_STATE_FILE=str(state_file))
    if when == "state before sbatch":
        state_file.write_text("CANCELLED\n")
    elif when == "cancelled during sbatch":
        env["STUB_STATE_AFTER_SBATCH"] = "COMPLETING"
        env["STUB_SACCT_RUNS"] = "CANCELLED"
    sup = _supervisor(env)
    if when == "signal before sbatch":
        sup.state.signal = "term"
    assert _begin(sup) is None
    sup.standby.submit()  # right after the program starts
    assert sup.standby.job == ""
    calls = _calls(tmp_path)
    if when == "cancelled during sbatch":
        assert "scancel --quiet 4242" in calls
    else:
        assert "sbatch" not in calls


@pytest.mark.parametrize(
    ("stderr", "expected"),
    [
        ("/o/slurm-300.err", "/o/slurm-300.err"),
        ("/o/slurm-300.out", "/o/slurm-300.out"),
        ("", "/o/slurm-300.out"),
    ],
    ids=["own-file", "22.05-24.11-merged", "26.05-merged"],
)
def test_the_jobs_stderr_file_is_found_on_every_release(
    tmp_path: Path, stderr: str, expected: str
) -> None:
    """srun reports its tasks' ends on the job's stderr: without --error that is the stdout
    file, which Slurm 26.05 shows as an empty ``StdErr=``."""
    env = _job_env(tmp_path, STUB_STDOUT="/o/slurm-300.out", STUB_STDERR=stderr)
    sup = _supervisor(env)
    sup.start.private_logs()
    assert sup.ctx.err_file == expected


@pytest.mark.parametrize(
    ("info", "acct", "signal", "cancelled"),
    [
        ("CANCELLED", "", "", True),
        ("COMPLETING", "CANCELLED", "", True),
        ("COMPLETING", "NODE_FAIL", "", False),  # any ending job shows COMPLETING
        ("COMPLETING", "PREEMPTED", "", False),
        ("RUNNING", "", "term", True),  # scancel's SIGTERM before Slurm shows it
        ("RUNNING", "", "warning", False),
    ],
)
def test_only_a_cancel_counts_as_one(
    tmp_path: Path, info: str, acct: str, signal: str, cancelled: bool
) -> None:
    sup = _supervisor(_job_env(tmp_path, STUB_JOB_STATE=info, STUB_SACCT_RUNS=acct))
    sup.state.signal = signal
    assert sup.ending.being_cancelled() is cancelled


def test_a_term_from_a_requeue_by_slurm_is_no_cancel(tmp_path: Path) -> None:
    """``scontrol requeue`` (the program's own, or an admin's) sends SIGTERM too; it may come
    while the standby is being submitted, right after the program starts."""
    sup = _supervisor(_job_env(tmp_path, STUB_RESTARTS="1"))
    sup.state.signal = "term"
    assert not sup.ending.being_cancelled()


def test_a_term_during_a_preemption_is_no_cancel(tmp_path: Path) -> None:
    """Without send_user_signal a preemption sends SIGTERM: the run keeps its standby."""
    sup = _supervisor(_job_env(tmp_path, STUB_PREEMPT_TIME="2026-01-01T00:00:00"))
    sup.state.signal = "term"
    assert not sup.ending.being_cancelled()


def test_standby_waits_for_the_final_state_without_accounting(tmp_path: Path) -> None:
    """No accounting, and the controller shows COMPLETING until the wait is over: the standby
    takes over as before (it cannot tell), after HPCJOBS_FINAL_STATE_WAIT seconds."""
    env = _standby_env(tmp_path, STUB_JOB_STATE="COMPLETING", HPCJOBS_FINAL_STATE_WAIT="1")
    assert _begin(_supervisor(env)) is None
    assert "took over from job 300 (?)" in (tmp_path / "run" / "chain-300.jsonl").read_text()
