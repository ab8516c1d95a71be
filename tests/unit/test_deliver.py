"""The warning goes to the processes that listen for it (hpcjobs.runtime.supervisor.deliver)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hpcjobs.runtime.supervisor import deliver
from hpcjobs.runtime.supervisor.deliver import ENV_PROGRAM, Process, candidates, targets

USR1 = 1 << (signal.SIGUSR1 - 1)
USR2 = 1 << (signal.SIGUSR2 - 1)
TERM = 1 << (signal.SIGTERM - 1)


def test_candidates_put_the_jobs_signal_first_and_never_term() -> None:
    assert candidates("USR2") == ["USR2", "USR1"]
    assert candidates("USR1") == ["USR1", "USR2"]
    assert candidates("TERM") == ["USR1", "USR2"]
    assert candidates("HUP") == ["HUP", "USR1", "USR2"]


def test_caught_mask_reads_sigcgt() -> None:
    status = "Name:\tpython\nSigIgn:\t0000000000001000\nSigCgt:\t0000000180000202\n"
    mask = deliver.caught_mask(status)
    assert deliver.catches(mask, "USR1") and not deliver.catches(mask, "USR2")
    assert deliver.caught_mask("Name:\tx\n") == 0


def test_a_listening_rank_gets_its_signal_and_its_workers_nothing() -> None:
    # srun's tasks: two ranks (Lightning: SIGUSR1), each with a data loader worker.
    procs = {
        10: Process(1, USR1 | TERM),
        11: Process(10, USR1 | TERM),
        20: Process(1, USR1),
        21: Process(20, USR1),
    }
    assert targets(procs, ["USR2", "USR1"]) == ([(10, "USR1"), (20, "USR1")], 0)


def test_the_jobs_warning_wins_where_both_are_caught() -> None:
    assert targets({5: Process(1, USR1 | USR2)}, ["USR2", "USR1"]) == ([(5, "USR2")], 0)


def test_a_launcher_that_does_not_listen_is_passed_over_for_its_workers() -> None:
    # torchrun's agent catches SIGTERM only; its workers catch the warning.
    procs = {7: Process(1, TERM), 8: Process(7, USR2), 9: Process(7, USR2)}
    assert targets(procs, ["USR2", "USR1"]) == ([(8, "USR2"), (9, "USR2")], 0)


def test_a_program_that_listens_for_nothing_gets_nothing() -> None:
    procs = {7: Process(1, TERM), 8: Process(7, 0), 9: Process(1, 0)}
    assert targets(procs, ["USR2", "USR1"]) == ([], 2)


def test_a_process_that_got_the_warning_gets_nothing_more() -> None:
    # Rank 10 got it from an earlier call; rank 20 started listening since; 30 is a launcher
    # whose worker 31 got it: neither it nor its launcher is looked at again.
    procs = {
        10: Process(1, USR1),
        11: Process(10, USR1),
        20: Process(1, USR2),
        30: Process(1, TERM),
        31: Process(30, USR2),
    }
    assert targets(procs, ["USR2", "USR1"], warned={10, 31}) == ([(20, "USR2")], 0)


def test_deliver_signals_only_marked_processes_that_listen(tmp_path: Path) -> None:
    """Real processes: one marked and catching SIGUSR1, one marked and deaf, one unmarked."""
    ready = tmp_path / "ready"
    got = tmp_path / "got"
    listener = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path({str(got)!r}).touch())\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    job = f"t{os.getpid()}"
    env = {**os.environ, ENV_PROGRAM: job}
    procs = [
        subprocess.Popen([sys.executable, "-c", listener], env=env),
        subprocess.Popen(["sleep", "30"], env=env),
        subprocess.Popen(["sleep", "30"]),
        # Marked, listening, but on another Slurm node of this host (``slurmd -N``).
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                listener.replace("USR1", "USR2").replace(str(ready), str(ready) + "-other"),
            ],
            env={**env, deliver.ENV_NODE: "other-node"},
        ),
    ]
    try:
        deadline = time.monotonic() + 10
        while not (ready.exists() and Path(f"{ready}-other").exists()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        done = deliver.deliver(job, ["USR2", "USR1"], node="this-node")
        assert done.sent == [(procs[0].pid, "USR1")]
        assert done.deaf == 1
        assert done.summary() == "SIGUSR1 to 1 process(es), 1 process(es) listen for none"
        deadline = time.monotonic() + 10
        while not got.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert got.exists()
        # Asked again in the same run (a second warning): the listener is not signalled twice.
        again = deliver.deliver(job, ["USR2", "USR1"], node="this-node", warned=[procs[0].pid])
        assert again.sent == [] and again.deaf == 1
        # Nobody died of the warning.
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_deliver_starts_from_the_pids_the_ranks_left(tmp_path: Path) -> None:
    """With the node's progress folder: the processes the ranks left there (``program-<pid>``)
    and their descendants, no other; a marked listener elsewhere on the host is not this
    node's program. Without the files: every marked process of the host."""
    got = tmp_path / "got"
    child_ready = tmp_path / "child-ready"
    # A rank that listens for nothing, with a worker (its child) that listens for SIGUSR1.
    worker = (
        "import signal, time, pathlib\n"
        f"signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path({str(got)!r}).touch())\n"
        f"pathlib.Path({str(child_ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    rank = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {worker!r}])\n"
    job = f"t{os.getpid()}-roots"
    env = {**os.environ, ENV_PROGRAM: job}
    started = subprocess.Popen([sys.executable, "-c", rank], env=env)
    stray_ready = tmp_path / "stray-ready"
    stray = subprocess.Popen(
        [sys.executable, "-c", worker.replace(str(child_ready), str(stray_ready))], env=env
    )
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / f"{deliver.PROGRAM_FILE}{started.pid}").touch()
    (folder / "rank-0").write_text("3\n")
    try:
        deadline = time.monotonic() + 10
        while not (child_ready.exists() and stray_ready.exists()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert deliver.started_pids(str(folder)) == [started.pid]
        found = deliver.program_processes(job, roots=[started.pid])
        assert started.pid in found and stray.pid not in found and len(found) == 2
        everyone = deliver.program_processes(job)
        assert {started.pid, stray.pid} <= set(everyone)
        done = deliver.deliver(job, ["USR2", "USR1"], folder=str(folder))
        (target,) = done.sent
        assert target[1] == "USR1" and target[0] not in (started.pid, stray.pid)
        assert done.deaf == 0
    finally:
        for pid in deliver.program_processes(job):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for p in (started, stray):
            p.kill()
            p.wait()


def test_pids_that_lead_to_no_process_of_the_run_fall_back_to_every_process(
    tmp_path: Path,
) -> None:
    """A folder whose ``program-<pid>`` files name no process of this run (a run before left
    them; the pid is another process now): the whole host is looked at, and the marked
    listener gets the warning."""
    got, ready = tmp_path / "got", tmp_path / "ready"
    listener = (
        "import signal, time, pathlib\n"
        f"signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path({str(got)!r}).touch())\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    job = f"t{os.getpid()}-stale"
    marked = subprocess.Popen(
        [sys.executable, "-c", listener], env={**os.environ, ENV_PROGRAM: job}
    )
    unmarked = subprocess.Popen(["sleep", "30"])
    folder = tmp_path / "progress"
    folder.mkdir()
    (folder / f"{deliver.PROGRAM_FILE}{unmarked.pid}").touch()
    (folder / f"{deliver.PROGRAM_FILE}999999999").touch()
    try:
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        done = deliver.deliver(job, ["USR2", "USR1"], folder=str(folder))
        assert done.sent == [(marked.pid, "USR1")]
    finally:
        for p in (marked, unmarked):
            p.kill()
            p.wait()
