"""Programs that know nothing of hpcjobs keep their work (docs/frameworks.md): real PyTorch
Lightning with Trainer defaults, the real Hugging Face Trainer, and a plain program, each
submitted as the docs say and preempted on the sandbox.

Each example appends ``<pid> <step>`` for every step it trains to a trace file: the steps a
later run trains again are the work a stop cost, measured here from the program's side, not
from what hpcjobs says (``history`` must say "unknown" where it cannot know).

They need torch and the frameworks in the test's Python (scripts/bootstrap.sh installs them);
the other Slurm releases' roots run Pythons for which no CPU torch is at hand there, and
deselect this file (scripts/test-other-release.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from hpcjobs.jobs.chain import Chain
from tests.live.cluster import HPCJOBS, PYTHON, Cluster, Job
from tests.live.test_faults import node_down, nodes_of
from tests.live.waiting import wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit_program(cluster: Cluster, name: str, command: list[str], *options: str) -> Job:
    """``hpcjobs submit`` ``command`` as a user would, from its own folder (the working folder
    a framework saves into by default)."""
    wait_for("earlier preemptors to leave the queue", cluster._no_preemptor, 120)
    out = cluster.folder / name
    out.mkdir(mode=0o755)
    argv = [HPCJOBS, "--site", "sandbox", "submit", "-J", name, "--output-dir", str(out)]
    argv += ["-N", "1", "--gpus-per-node", "1", "-t", "5:00", *options, "--", *command]
    proc = subprocess.run(
        argv, env={**os.environ, **cluster.env}, cwd=out, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.split()[-1]
    cluster.jobs.append(job_id)
    return Job(cluster, job_id, out, 0)


def trace(job: Job) -> list[tuple[str, int]]:
    path = job.folder / "trace"
    if not path.exists():
        return []
    pairs = []
    for line in path.read_text().splitlines():
        words = line.split()
        if len(words) == 2:
            pairs.append((words[0], int(words[1])))
    return pairs


def trained(job: Job, at_least: int, timeout: float = 120) -> None:
    wait_for(f"{job.root} to train {at_least} steps", lambda: len(trace(job)) >= at_least, timeout)


def preempt_and_wait(cluster: Cluster) -> float:
    """Preempt the batch partition; the time the preemptor left the queue."""
    preemptor = cluster.preempt()
    wait_for("the preemptor to run", lambda: cluster.state(preemptor) != "", 60, every=0.1)
    wait_for("the preemptor to end", lambda: cluster.gone(preemptor), 120, every=0.1)
    return time.time()


def redone(pairs: list[tuple[str, int]]) -> list[int]:
    """Per run after the first: the steps it trained that an earlier run had trained."""
    runs: list[list[int]] = []
    previous = ""
    for pid, step in pairs:
        if pid != previous:
            runs.append([])
            previous = pid
        runs[-1].append(step)
    result = []
    for i in range(1, len(runs)):
        before = max(max(r) for r in runs[:i])
        result.append(sum(1 for step in runs[i] if step <= before))
    return result


def history_json(cluster: Cluster, job: Job) -> dict[str, object]:
    proc = subprocess.run(
        [HPCJOBS, "history", "--json", job.root],
        env={**os.environ, **cluster.env}, cwd=job.folder, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def interruptions(data: dict[str, object]) -> list[dict[str, object]]:
    found = data.get("interruptions")
    assert isinstance(found, list), data
    return found


def starts(chain: Chain) -> list[float]:
    return [event.time for event in chain.events if event.event == "start"]


def one_stop_then_finished(job: Job, chain: Chain, cause: str, steps: int, redo: int) -> str:
    """The chain stopped once for ``cause``, came back once and finished; the program trained
    all of its ``steps``, and at most ``redo`` of them twice. The chain's log."""
    log = job.log
    assert [s.cause for s in chain.interruptions()] == [cause], log
    assert chain.final is not None and chain.final.detail.startswith("completed"), log
    assert len(set(chain.job_ids)) == 2, log
    pairs = trace(job)
    assert max(step for _pid, step in pairs) == steps - 1, pairs[-5:]
    (lost,) = redone(pairs)
    print(f"{job.folder.name}: {cause}, {lost} step(s) trained again")  # the note's figures
    assert lost <= redo, lost
    return log


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.parametrize("callback", [False, True], ids=["defaults", "hpcjobs-callback"])
def test_lightning_with_trainer_defaults_resumes_after_preemption(
    cluster: Cluster, callback: bool
) -> None:
    command = [PYTHON, str(EXAMPLES / "lightning_train.py"), "--steps", "400"]
    command += ["--step-time", "0.05", "--trace", "trace"]
    command += ["--hpcjobs-callback"] if callback else []
    job = submit_program(cluster, f"lightning-{int(callback)}", command)
    trained(job, 60)
    ended = preempt_and_wait(cluster)
    chain = job.ended(timeout=180)

    log = one_stop_then_finished(job, chain, "preemption", 400, 3)
    # The warning went out as SIGUSR1 (Lightning's) without the callback, as the job's warning
    # signal with it; either way Lightning's checkpoint is what the next run resumed from.
    assert ("SIGUSR1 to 1 process(es)" in log) != callback, log
    assert "newest checkpoint: PyTorch Lightning checkpoint" in log, log
    assert "Restoring states from the checkpoint path at" in log, log
    # Running again within seconds of the preemptor's end (the standby, no requeue hold).
    print(f"{job.folder.name}: running again {starts(chain)[1] - ended:.1f} s after the preemptor")
    assert starts(chain)[1] - ended <= 5, (starts(chain), ended)
    # What history says: the step resumed from is read from Lightning's checkpoint; the step
    # reached is known only where the program reports it (the callback).
    stop = interruptions(history_json(cluster, job))[0]
    assert stop["resumed_from_step"] is not None, stop
    if callback:
        assert stop["steps_lost"] is not None and 0 <= stop["steps_lost"] <= 3, stop
    else:
        assert stop["steps_lost"] is None and stop["progress_at_stop"] is None, stop


@pytest.mark.slurm
@pytest.mark.slow
def test_hf_trainer_resumes_from_its_newest_checkpoint(cluster: Cluster) -> None:
    # It listens for no warning: it trains on until Slurm's SIGTERM, 25 to 37 s after the
    # preemption on the sandbox (GraceTime 15), and must still be training then: 80 s are left.
    save_steps = 10
    command = [PYTHON, str(EXAMPLES / "hf_trainer.py"), "--steps", "800"]
    command += ["--save-steps", str(save_steps), "--step-time", "0.1", "--trace", "trace"]
    job = submit_program(cluster, "hf-trainer", command)
    trained(job, 40, timeout=180)
    preempt_and_wait(cluster)
    chain = job.ended(timeout=300)

    log = one_stop_then_finished(job, chain, "preemption", 800, save_steps + 2)
    # It catches no warning signal: it got none, and ran until Slurm's SIGTERM.
    assert "1 process(es) listen for none" in log, log
    assert "newest checkpoint: Hugging Face Trainer checkpoint" in log, log
    stop = interruptions(history_json(cluster, job))[0]
    # It reports no progress: the loss is unknown, not 0.
    assert stop["steps_lost"] is None and stop["progress_at_stop"] is None, stop
    assert stop["resumed_from_step"] is not None, stop


@pytest.mark.slurm
@pytest.mark.slow
def test_a_program_that_ends_inside_the_grace_time_is_not_run_again(cluster: Cluster) -> None:
    script = "import time; [print(i, flush=True) or time.sleep(0.25) for i in range(40)]"
    job = submit_program(cluster, "ends-in-grace", [PYTHON, "-c", script])
    wait_for("the program to print", lambda: "\n5\n" in job.log, 60)
    cluster.preempt()
    chain = job.ended(timeout=120)

    log = job.log
    assert chain.interruptions() == [], log
    assert chain.final is not None, log
    assert (chain.final.event, chain.final.cause) == ("end", "finish"), log
    assert "ended on its own" in chain.final.detail, chain.final.detail
    assert chain.final.text("rule") == "ended_on_its_own", chain.final
    assert len(set(chain.job_ids)) == 1, log
    assert "\n39\n" in log and log.count("hpcjobs: run ") == 1, log


@pytest.mark.slurm
@pytest.mark.slow
def test_lightning_on_two_nodes_resumes_from_its_newest_checkpoint_after_a_lost_node(
    cluster: Cluster,
) -> None:
    """No warning: Lightning saved no HPC checkpoint; its ModelCheckpoint saved at each epoch's
    end (32 steps at 2 ranks), and that is what the next run resumes from."""
    command = [PYTHON, str(EXAMPLES / "lightning_train.py"), "--steps", "200"]
    command += ["--step-time", "0.05", "--samples", "1024", "--trace", "trace"]
    job = submit_program(cluster, "lightning-node", command, "-N", "2")
    trained(job, 45, timeout=180)
    first = nodes_of(cluster, job.root)
    batch = next(e for e in job.chain.events if e.event == "start").text("batch")
    victim = next(n for n in first if n != batch)
    with node_down(cluster, victim):
        wait_for("the next run", lambda: len(starts(job.chain)) >= 2, 90)
    chain = job.ended(timeout=240)

    # Resumed from the newest epoch's end (every 32 steps), not from step 0.
    log = one_stop_then_finished(job, chain, "node_failure", 200, 32)
    assert "Lightning's newest ModelCheckpoint is newer than its HPC checkpoints" in log, log
    assert "Restoring states from the checkpoint path at" in log, log
    stops = chain.interruptions()
    assert stops[0].resumed_from is not None and stops[0].resumed_from >= 31, stops[0]


@pytest.mark.slurm
@pytest.mark.slow
def test_accelerate_loop_with_the_helper_saves_on_the_warning(cluster: Cluster) -> None:
    command = [PYTHON, str(EXAMPLES / "accelerate_train.py"), "--steps", "400"]
    command += ["--step-time", "0.05", "--save-every", "100", "--trace", "trace"]
    job = submit_program(cluster, "accelerate", command)
    trained(job, 40, timeout=180)
    ended = preempt_and_wait(cluster)
    chain = job.ended(timeout=180)

    log = one_stop_then_finished(job, chain, "preemption", 400, 3)
    assert "SIGUSR2 to 1 process(es)" in log, log
    assert starts(chain)[1] - ended <= 5, (starts(chain), ended)
    # It reports its steps: history knows what the stop cost.
    stop = interruptions(history_json(cluster, job))[0]
    assert stop["steps_lost"] is not None and 0 <= stop["steps_lost"] <= 3, stop
