"""Sorting Slurm failures into transient, ambiguous and permanent, from real stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcjobs.errors import CommandError, CommandNotFoundError, CommandTimeoutError
from hpcjobs.slurm.classify import ErrorKind, classify_error, classify_text, slurm_message

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"

RECORDED = [
    ("22.05/sbatch-controller-down.stderr", ErrorKind.TRANSIENT),
    ("22.05/squeue-controller-down.stderr", ErrorKind.TRANSIENT),
    ("22.05/scontrol-controller-down.stderr", ErrorKind.TRANSIENT),
    ("22.05/sbatch-invalid-partition.stderr", ErrorKind.PERMANENT),
    ("22.05/squeue-unknown-id.stderr", ErrorKind.UNKNOWN_JOB),
    ("22.05/scancel-unknown.stderr", ErrorKind.UNKNOWN_JOB),
    ("24.11/sbatch-invalid-partition.stderr", ErrorKind.PERMANENT),
    ("24.11/sbatch-invalid-account.stderr", ErrorKind.PERMANENT),
    ("24.11/sbatch-qos-policy.stderr", ErrorKind.PERMANENT),
    ("24.11/sbatch-socket-timeout.stderr", ErrorKind.AMBIGUOUS),
    ("24.11/sbatch-receive-failure.stderr", ErrorKind.AMBIGUOUS),
    ("24.11/sbatch-busy.stderr", ErrorKind.TRANSIENT),
    ("24.11/squeue-rate-limited.stderr", ErrorKind.TRANSIENT),
    ("24.11/squeue-unknown-id.stderr", ErrorKind.UNKNOWN_JOB),
    ("24.11/sacct-disabled.stderr", ErrorKind.ACCOUNTING_DISABLED),
]


@pytest.mark.parametrize(("name", "kind"), RECORDED)
def test_recorded_stderr(name: str, kind: ErrorKind) -> None:
    assert classify_text((DATA / name).read_text()) is kind


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        (
            "sbatch: error: Batch job submission failed: Zero Bytes were transmitted or received",
            ErrorKind.AMBIGUOUS,
        ),
        ("sbatch: error: Slurm job queue full, sleeping and retrying", ErrorKind.TRANSIENT),
        (
            "sbatch: error: Batch job submission failed: Requested nodes are busy",
            ErrorKind.TRANSIENT,
        ),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
            "(send failure)",
            ErrorKind.TRANSIENT,
        ),
        (
            "sbatch: error: Batch job submission failed: Invalid qos specification",
            ErrorKind.PERMANENT,
        ),
        (
            "sbatch: error: Batch job submission failed: Requested time limit is invalid "
            "(missing or exceeds some limit)",
            ErrorKind.PERMANENT,
        ),
        ("sbatch: fatal: job.sh: line 2: Unmatched ' in [--job-name='x]", ErrorKind.PERMANENT),
        ("something nobody has seen", ErrorKind.PERMANENT),
    ],
)
def test_known_messages(stderr: str, kind: ErrorKind) -> None:
    assert classify_text(stderr) is kind


def test_command_errors() -> None:
    assert classify_error(CommandTimeoutError(["sbatch"], 5)) is ErrorKind.AMBIGUOUS
    assert classify_error(CommandNotFoundError(["sbatch"])) is ErrorKind.PERMANENT
    down = (DATA / "22.05/sbatch-controller-down.stderr").read_text()
    assert classify_error(CommandError(["sbatch"], 1, down)) is ErrorKind.TRANSIENT
    assert ErrorKind.AMBIGUOUS.retryable and not ErrorKind.PERMANENT.retryable


def test_slurm_message_keeps_slurms_words() -> None:
    text = (DATA / "22.05/sbatch-invalid-partition.stderr").read_text()
    assert slurm_message(text) == "Batch job submission failed: Invalid partition name specified"
    text = (DATA / "22.05/squeue-unknown-id.stderr").read_text()
    assert slurm_message(text) == "slurm_load_jobs error: Invalid job id specified"
    assert slurm_message("") == ""
