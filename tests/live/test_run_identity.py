"""A new submission is never taken for an old one, on the sandbox, through ``hpcjobs submit``.

Every job here uses the defaults a new user gets: the job is named after the program
(``python``), so without a ``RUN`` file all of them would share
``~/hpcjobs/runs/python/checkpoints`` and a later job would be skipped because an earlier one
left its done marker there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcjobs.jobs.chain import read_chain

BIN = Path(sys.executable).absolute().parent
PYTHON = str(BIN / "python")
HPCJOBS = str(BIN / "hpcjobs")

#: Appends one line to the file named by argv[1] and marks the run done.
HELLO = (
    "import sys\n"
    "from hpcjobs.runtime.checkpoint import CheckpointDir\n"
    "with open(sys.argv[1], 'a') as out:\n"
    "    out.write('hello\\n')\n"
    "CheckpointDir.from_env().mark_done()\n"
)

pytestmark = pytest.mark.slurm


class User:
    """A new user on the login node: own HOME, the sandbox's Slurm, hpcjobs defaults."""

    def __init__(self, env: dict[str, str], home: Path) -> None:
        self.env = {**os.environ, **env, "HOME": str(home)}
        self.home = home
        self.jobs: list[str] = []

    def hpcjobs(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [HPCJOBS, "--site", "sandbox", *argv],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    def submit(self, *argv: str, wait: bool = True) -> subprocess.CompletedProcess[str]:
        options = ["--launcher", "none", "--gpus-per-node", "0"]
        proc = self.hpcjobs("submit", *(["--wait"] if wait else []), *options, *argv)
        if proc.returncode in (0, 1):
            self.jobs.append(proc.stdout.split()[0])
        return proc

    def slurm(self, *argv: str) -> str:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=True
        ).stdout

    def queued(self) -> list[str]:
        return self.slurm("squeue", "-h", "-o", "%i").split()

    def wait_gone(self, job_id: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while job_id in self.queued():
            assert time.monotonic() < deadline, f"job {job_id} still queued"
            time.sleep(0.5)


@pytest.fixture
def user(slurm_env: dict[str, str], shared_tmp: Path) -> object:
    home = shared_tmp / "home"
    home.mkdir(mode=0o755)
    (home / "hello.py").write_text(HELLO)
    person = User(slurm_env, home)
    yield person
    if person.jobs:
        subprocess.run(["scancel", *person.jobs], env=person.env, check=False, timeout=60)


def _events(chain: Path) -> list[tuple[str, str, str]]:
    return [(e.event, e.cause, e.detail) for e in read_chain(chain).events]


def test_a_different_run_is_refused_not_skipped(user: User) -> None:
    runs = user.home / "hpcjobs" / "runs" / "python"
    checkpoints = runs / "checkpoints"
    out_a, out_b = user.home / "a.txt", user.home / "b.txt"

    first = user.submit("--", PYTHON, "hello.py", str(out_a))
    assert first.returncode == 0, first.stderr
    assert out_a.read_text() == "hello\n"
    assert (checkpoints / "DONE").is_file()

    # Another program under the same default name: refused before anything reaches Slurm.
    before = user.queued()
    refused = user.submit("--", PYTHON, "hello.py", str(out_b))
    assert refused.returncode == 2, refused.stderr
    assert f"checkpoint folder {checkpoints} belongs to another run" in refused.stderr
    assert "Hint:" in refused.stderr and "--fresh" in refused.stderr
    assert refused.stdout == "" and user.queued() == before
    assert not out_b.exists()

    # --fresh: the old folder is kept under a new name; the new run really runs.
    fresh = user.submit("--fresh", "--", PYTHON, "hello.py", str(out_b))
    assert fresh.returncode == 0, fresh.stderr
    assert out_b.read_text() == "hello\n"
    (old,) = runs.glob("checkpoints.old-*")
    assert (old / "DONE").is_file()
    assert json.loads((old / "RUN").read_text())["command"][-1] == str(out_a)

    # The same run again: idempotent, said out loud, and the program does not run twice.
    again = user.submit("--", PYTHON, "hello.py", str(out_b))
    assert again.returncode == 0, again.stderr
    assert "this run already finished" in again.stderr
    assert out_b.read_text() == "hello\n"


def test_a_pending_job_whose_folder_was_taken_over_does_not_run(user: User) -> None:
    out_a, out_b = user.home / "a.txt", user.home / "b.txt"
    held = user.submit(
        "-J", "shared", "--sbatch=--hold", "--", PYTHON, "hello.py", str(out_a), wait=False
    )
    assert held.returncode == 0, held.stderr
    held_id = held.stdout.split()[0]
    # The pending run has claimed the folder: another run needs --fresh to take it.
    refused = user.submit("-J", "shared", "--", PYTHON, "hello.py", str(out_b))
    assert refused.returncode == 2 and "claimed by another run" in refused.stderr
    taker = user.submit("-J", "shared", "--fresh", "--", PYTHON, "hello.py", str(out_b))
    assert taker.returncode == 0, taker.stderr
    user.slurm("scontrol", "release", held_id)
    user.wait_gone(held_id)
    assert not out_a.exists()
    chain = user.home / "hpcjobs" / "runs" / "shared" / f"chain-{held_id}.jsonl"
    event, cause, detail = _events(chain)[-1]
    assert (event, cause) == ("end", "fail")
    assert detail.startswith("checkpoint folder owned by another run")
    history = user.hpcjobs("history", held_id)
    assert "Result: fail (checkpoint folder owned by another run" in history.stdout


def test_checkpoint_folder_problems_are_not_blamed_on_the_application(user: User) -> None:
    bad = user.submit("--checkpoint-dir", "/proc/x", "--", PYTHON, "hello.py", "x")
    assert bad.returncode == 2
    assert "cannot use checkpoint folder /proc/x" in bad.stderr and "Hint:" in bad.stderr

    # The folder breaks after submission: the job ends with its own cause; nothing ran.
    folder = user.home / "ck"
    out = user.home / "c.txt"
    held = user.submit(
        "-J", "broken", "--checkpoint-dir", str(folder), "--sbatch=--hold",
        "--", PYTHON, "hello.py", str(out), wait=False,
    )  # fmt: skip
    assert held.returncode == 0, held.stderr
    job_id = held.stdout.split()[0]
    (folder / "RUN").unlink()
    folder.rmdir()
    folder.write_text("in the way\n")
    user.slurm("scontrol", "release", job_id)
    user.wait_gone(job_id)
    assert not out.exists()
    history = user.hpcjobs("history", job_id)
    assert f"Result: fail (checkpoint folder unusable: {folder}: mkdir:" in history.stdout


def test_job_file_times_are_slurm_times(user: User) -> None:
    job = user.home / "job.yaml"
    job.write_text(
        f"time: 5:00\nlauncher: none\ngpus_per_node: 0\ncommand: [{PYTHON}, -c, pass]\n"
        "sbatch_options: [--hold]\n"
    )
    proc = user.hpcjobs("submit", "-f", str(job))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[0]
    user.jobs.append(job_id)
    info = user.slurm("scontrol", "show", "job", job_id)
    assert "TimeLimit=00:05:00" in info
