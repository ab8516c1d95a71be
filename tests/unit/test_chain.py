"""Reading a job's event log: job ids, interruptions, resume latency, steps lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.jobs.chain import (
    NO_CHECKPOINT,
    Interruption,
    checkpoint_step,
    parse_chain,
    progress_step,
    read_chain,
)
from hpcjobs.runtime.checkpoint import CheckpointDir
from tests.eventlines import line

LOG = "".join(
    [
        line("13", "start", "-", "checkpoint=-1", at=100.0, checkpoint=-1),
        line("13", "requeue", "preemption", "continued as job 15", at=107.0, checkpoint=10,
             progress=10, how="continued", next="15"),
        line("15", "start", "-", "checkpoint=10", at=115.5, checkpoint=10),
        line("15", "requeue", "node_failure", "requeued by Slurm (restart 1)", at=130.0,
             restart=1, checkpoint=20, progress=23, how="slurm", stopped_run=0),
        line("15", "start", "-", "checkpoint=20", at=130.2, restart=1, checkpoint=20),
        "garbage line from a crash\n",
        line("15", "end", "finish", "done marker present", at=160.0, restart=1),
    ]
)  # fmt: skip


def test_parse_chain() -> None:
    chain = parse_chain(LOG)
    assert chain.root == "13"
    assert chain.job_ids == ["13", "15"]
    assert chain.final is not None and chain.final.cause == "finish"
    first, second = chain.interruptions()
    assert first.cause == "preemption"
    assert first.resumed_job_id == "15"
    assert first.resume_latency == 8.5
    assert first.steps_lost == 0
    assert second.cause == "node_failure"
    assert second.resumed_from == 20
    assert second.steps_lost == 3


def test_pending_continuation_is_listed() -> None:
    chain = parse_chain(
        line("5", "start", "-", "checkpoint=-1", at=1.0, checkpoint=-1)
        + line("5", "requeue", "timeout", "continued as job 6", at=2.0, checkpoint=3,
               progress=3, how="continued", next="6")
    )  # fmt: skip
    assert chain.job_ids == ["5", "6"]
    (only,) = chain.interruptions()
    assert only.resume_latency is None


def test_missing_file(tmp_path: Path) -> None:
    assert read_chain(tmp_path / "none.jsonl").events == []


def test_note_progress(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    assert ckpt.progress() is None
    ckpt.note_progress(41)
    ckpt.note_progress(42)
    assert ckpt.progress() == 42
    assert (tmp_path / "PROGRESS").read_text() == "42\n"


def test_stopped_run_of_slurm_requeues() -> None:
    """Logged by the run Slurm restarted, or by the stopping run itself: same stopped run."""
    chain = parse_chain(
        line("9", "start", "-", "checkpoint=-1", at=1.0, checkpoint=-1)
        + line("9", "requeue", "node_failure", "requeued by Slurm (restart 1)", at=2.0,
               checkpoint=3, how="slurm", stopped_run=0)
        + line("9", "start", "-", "checkpoint=3", at=3.0, restart=1, checkpoint=3)
        + line("9", "requeue", "preemption", "requeued by Slurm (restart 2)", at=4.0,
               restart=2, checkpoint=5, how="slurm", stopped_run=1)
        + line("9", "requeue", "timeout", "continued as job 10", at=5.0, restart=2,
               checkpoint=8, how="continued", next="10")
    )  # fmt: skip
    assert [e.stopped_run for e in chain.events if e.event == "requeue"] == [0, 1, 2]


def test_an_interruption_has_one_json_view() -> None:
    """``history --json`` and ``report --json`` print the same fields, from one place."""
    from hpcjobs.jobs.chain import Interruption

    stop = Interruption(
        "stall", "7", 100.0, "runs again inside job 7", checkpoint_at_stop=40,
        progress_at_stop=45, resumed_job_id="7", resumed_at=103.25, resumed_from=40,
        suspect="n2", evidence="rank 9 at step 45 for 31 s", excluded=["n2"], how_code="in_job",
    )  # fmt: skip
    assert stop.to_dict() == {
        "cause": "stall", "how": "runs again inside job 7", "how_code": "in_job",
        "job_id": "7", "ended_at": 100.0,
        "resumed_job_id": "7", "resumed_at": 103.25, "resume_latency_s": 3.2,
        "checkpoint_at_stop": 40, "progress_at_stop": 45, "resumed_from_step": 40,
        "steps_lost": 5, "suspect": "n2", "evidence": "rank 9 at step 45 for 31 s",
        "excluded_nodes": ["n2"],
    }  # fmt: skip


# ---- unknown steps: null, never 0 ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "progress", "checkpoint"),
    [(None, None, None), (-2, None, None), (-1, None, NO_CHECKPOINT), (0, 0, 0), (7, 7, 7)],
)
def test_the_one_rule_for_unknown_steps(
    value: int | None, progress: int | None, checkpoint: int | None
) -> None:
    """``progress`` -1 (the program reported none) is unknown; ``checkpoint`` -1 is known: none,
    a start from scratch. Missing or null is unknown for both."""
    assert progress_step(value) == progress
    assert checkpoint_step(value) == checkpoint


def _stop(requeue: dict[str, object], start: dict[str, object]) -> Interruption:
    """The one interruption of a chain: job 5 stops (``requeue``'s fields), job 6 starts."""
    text = (
        line("5", "start", at=1.0, checkpoint=-1, nodelist="n1", batch="n1")
        + line("5", "requeue", "preemption", "continued as job 6", at=2.0, **requeue)
        + line("6", "start", at=3.0, nodelist="n1", batch="n1", **start)
    )
    (stop,) = parse_chain(text).interruptions()
    return stop


def test_a_program_that_reports_no_progress_has_unknown_loss_not_zero() -> None:
    stop = _stop({"how": "continued", "next": "6", "checkpoint": 4, "progress": -1},
                 {"checkpoint": 4})  # fmt: skip
    assert (stop.progress_at_stop, stop.steps_lost, stop.loss_unknown) == (None, None, True)
    data = stop.to_dict()
    assert (data["progress_at_stop"], data["steps_lost"]) == (None, None)
    assert (data["checkpoint_at_stop"], data["resumed_from_step"]) == (4, 4)
    # Missing is unknown too.
    stop = _stop({"how": "continued", "next": "6", "checkpoint": 4}, {"checkpoint": 4})
    assert stop.to_dict()["steps_lost"] is None and stop.loss_unknown


def test_a_start_from_scratch_loses_every_step_reached() -> None:
    """No checkpoint (-1) is known: steps 0..progress are redone, progress + 1 of them."""
    stop = _stop({"how": "continued", "next": "6", "checkpoint": -1, "progress": 9},
                 {"checkpoint": -1})  # fmt: skip
    assert (stop.steps_lost, stop.loss_unknown) == (10, False)
    data = stop.to_dict()
    assert (data["checkpoint_at_stop"], data["progress_at_stop"]) == (-1, 9)
    assert (data["resumed_from_step"], data["steps_lost"]) == (-1, 10)
    stop = _stop({"how": "continued", "next": "6", "checkpoint": -1, "progress": 0},
                 {"checkpoint": -1})  # fmt: skip
    assert stop.steps_lost == 1


@pytest.mark.parametrize("start", [{"checkpoint": None}, {}], ids=["null", "missing"])
def test_a_start_from_a_checkpoint_of_unknown_step_has_unknown_loss(
    start: dict[str, object],
) -> None:
    """The supervisor logs ``checkpoint: null`` for a framework checkpoint whose step it cannot
    read: the loss is unknown, however much progress the stop had."""
    stop = _stop({"how": "continued", "next": "6", "checkpoint": 8, "progress": 9}, start)
    assert stop.progress_at_stop == 9
    assert (stop.resumed_from, stop.steps_lost, stop.loss_unknown) == (None, None, True)
    assert stop.to_dict()["resumed_from_step"] is None


def test_a_stop_not_resumed_yet_is_pending_not_unknown() -> None:
    text = line("5", "start", checkpoint=-1) + line(
        "5", "requeue", "timeout", "continued as job 6", how="continued", next="6", progress=-1
    )
    (stop,) = parse_chain(text).interruptions()
    assert stop.steps_lost is None and not stop.loss_unknown


def test_an_interruption_made_directly_follows_the_same_rule() -> None:
    stop = Interruption("timeout", "5", 1.0, "x", progress_at_stop=-1, resumed_from=3,
                        resumed_at=2.0)  # fmt: skip
    assert stop.steps_lost is None and stop.to_dict()["progress_at_stop"] is None
    stop = Interruption("timeout", "5", 1.0, "x", progress_at_stop=3, resumed_from=-5,
                        resumed_at=2.0)  # fmt: skip
    assert stop.steps_lost is None and stop.to_dict()["resumed_from_step"] is None


# ---- how: the prose, and a code for programs -----------------------------------------------------


@pytest.mark.parametrize(
    ("requeue", "code"),
    [
        ({"how": "continued", "next": "6"}, "continued"),
        ({"how": "took_over", "next": "6", "stopped_job": "5", "slurm_state": "NODE_FAIL"},
         "took_over"),
        ({"how": "slurm", "stopped_run": 0}, "slurm"),
        ({"how": "slurm_fallback"}, "slurm_fallback"),
        ({"how": "in_job"}, "in_job"),
        ({}, None),
    ],
)  # fmt: skip
def test_how_code_is_the_requeue_events_how(requeue: dict[str, object], code: str | None) -> None:
    stop = _stop({**requeue, "checkpoint": 3, "progress": 4}, {"checkpoint": 3})
    data = stop.to_dict()
    assert (data["how_code"], data["how"]) == (code, "continued as job 6")


def test_how_code_of_a_growth_and_of_a_requeue() -> None:
    text = (
        line("300", "start", at=1.0, checkpoint=-1, nodelist="n1", batch="n1")
        + line("300", "handoff", "grow", "continued as job 310", at=10.0, next="310",
               nodes=[], checkpoint=66, progress=67)
        + line("310", "start", at=11.5, checkpoint=66, nodelist="n1,n2", batch="n1")
    )  # fmt: skip
    (growth,) = parse_chain(text).interruptions()
    assert (growth.how_code, growth.to_dict()["how_code"], growth.steps_lost) == ("grow", "grow", 1)
    first, second = parse_chain(LOG).interruptions()
    assert (first.how_code, second.how_code) == ("continued", "slurm")
