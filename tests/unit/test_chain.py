"""Reading a job's event log: job ids, interruptions, resume latency, steps lost."""

from __future__ import annotations

from pathlib import Path

from hpcjobs.jobs.chain import parse_chain, read_chain
from hpcjobs.runtime.checkpoint import CheckpointDir

LOG = "\n".join(
    [
        "100.0\t13\t0\tstart\t-\tcheckpoint=-1",
        "107.0\t13\t0\trequeue\tpreemption\tcontinued as job 15 checkpoint=10 progress=10",
        "115.5\t15\t0\tstart\t-\tcheckpoint=10",
        "130.0\t15\t1\trequeue\tnode_failure\trequeued by Slurm (restart 1) "
        "checkpoint=20 progress=23",
        "130.2\t15\t1\tstart\t-\tcheckpoint=20",
        "garbage line from a crash",
        "160.0\t15\t1\tend\tfinish\tdone marker present",
    ]
)


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
        "1.0\t5\t0\tstart\t-\tcheckpoint=-1\n"
        "2.0\t5\t0\trequeue\ttimeout\tcontinued as job 6 checkpoint=3 progress=3\n"
    )
    assert chain.job_ids == ["5", "6"]
    (only,) = chain.interruptions()
    assert only.resume_latency is None


def test_missing_file(tmp_path: Path) -> None:
    assert read_chain(tmp_path / "none.tsv").events == []


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
        "1.0\t9\t0\tstart\t-\tcheckpoint=-1\n"
        "2.0\t9\t0\trequeue\tnode_failure\trequeued by Slurm (restart 1) checkpoint=3\n"
        "3.0\t9\t1\tstart\t-\tcheckpoint=3\n"
        "4.0\t9\t2\trequeue\tpreemption\trequeued by Slurm (restart 2) checkpoint=5\n"
        "5.0\t9\t2\trequeue\ttimeout\tcontinued as job 10 checkpoint=8\n"
    )
    assert [e.stopped_run for e in chain.events if e.event == "requeue"] == [0, 1, 2]


def test_an_interruption_has_one_json_view() -> None:
    """``history --json`` and ``report --json`` print the same fields, from one place."""
    from hpcjobs.jobs.chain import Interruption

    stop = Interruption(
        "stall", "7", 100.0, "in_job", checkpoint_at_stop=40, progress_at_stop=45,
        resumed_job_id="7", resumed_at=103.25, resumed_from=40, suspect="n2",
        evidence="rank 9 at step 45 for 31 s", excluded=["n2"],
    )  # fmt: skip
    assert stop.to_dict() == {
        "cause": "stall", "how": "in_job", "job_id": "7", "ended_at": 100.0,
        "resumed_job_id": "7", "resumed_at": 103.25, "resume_latency_s": 3.2,
        "checkpoint_at_stop": 40, "progress_at_stop": 45, "resumed_from_step": 40,
        "steps_lost": 5, "suspect": "n2", "evidence": "rank 9 at step 45 for 31 s",
        "excluded_nodes": ["n2"],
    }  # fmt: skip
