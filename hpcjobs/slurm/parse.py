"""Pure parsers for the output of Slurm's client commands.

They take text and return plain values, never run anything, and are tested on output recorded
from Slurm 22.05 and 24.11 (``tests/data/slurm``). The queries that produce this text are
built in :mod:`hpcjobs.slurm.client` from the field lists defined here, so both sides agree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from hpcjobs.contract import slurmstates
from hpcjobs.contract.causes import RESIZING
from hpcjobs.contract.slurmtext import UNSET
from hpcjobs.contract.slurmtime import format_slurm_time, parse_duration, parse_timestamp
from hpcjobs.textlines import split_lines

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_./:]*)=")
_RECORD_START = re.compile(r"^(NodeName|PartitionName)=", re.MULTILINE)

#: squeue ``--Format`` fields. ``Name`` comes last: it is free text and may contain ``|``.
SQUEUE_FIELDS = (
    "JobArrayID",
    "JobID",
    "ArrayJobID",
    "ArrayTaskID",
    "State",
    "Reason",
    "NodeList",
    "TimeUsed",
    "NumNodes",
    "RestartCnt",
    "Partition",
    "UserName",
    "Name",
)

#: sacct ``--format`` fields. ``JobName`` comes last for the same reason.
SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "State",
    "ExitCode",
    "DerivedExitCode",
    "Reason",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "Elapsed",
    "NNodes",
    "NodeList",
    "Partition",
    "User",
    "JobName",
)

#: squeue fields for finding a submission by its token (``Comment`` is free text: last).
TOKEN_FIELDS = ("ArrayJobID", "JobID", "Comment")


def squeue_format(fields: tuple[str, ...]) -> str:
    """The ``squeue -O`` argument: every field unpadded and followed by ``|``."""
    return ",".join(f"{name}:|" for name in fields)


@dataclass(frozen=True)
class QueueRow:
    """One line of ``squeue``: a job, an array task, or a still-pending block of array tasks."""

    job_id: str  # as users see it: "12", "12_3" or "12_[4-9%2]"
    raw_id: str  # Slurm's internal id of this record
    array_job_id: str
    array_tasks: str | None  # "3", "4-9%2", or None for a plain job
    state: str
    reason: str
    nodelist: str
    elapsed_s: int | None
    nodes: int | None
    restarts: int
    partition: str
    user: str
    name: str


@dataclass(frozen=True)
class AcctRow:
    """One line of ``sacct -X``: one run of a job (``-D`` lists every run of a requeued job)."""

    job_id: str  # "12" or "12_3"
    raw_id: str
    state: str  # base state: "CANCELLED by 0" becomes "CANCELLED"
    cancelled_by: str | None  # the uid after "CANCELLED by"
    exit_code: int | None
    exit_signal: int | None
    derived_exit_code: int | None
    reason: str
    submit: datetime | None
    eligible: datetime | None
    start: datetime | None
    end: datetime | None
    elapsed_s: int | None
    nodes: int | None
    nodelist: str
    partition: str
    user: str
    name: str

    @property
    def array_job_id(self) -> str:
        return self.job_id.split("_", 1)[0]


def _split(line: str, count: int, *, trailing: bool) -> list[str] | None:
    """Split ``line`` into ``count`` fields; the last one keeps any ``|`` it contains."""
    if trailing:
        if not line.endswith("|"):
            return None
        line = line[:-1]
    parts = line.split("|", count - 1)
    return parts if len(parts) == count else None


def _records(
    text: str, fields: tuple[str, ...], *, trailing: bool, what: str
) -> Iterator[dict[str, str]]:
    """One ``{field: value}`` per non-blank line of ``|``-separated output."""
    for line in split_lines(text):
        if not line.strip():
            continue
        parts = _split(line, len(fields), trailing=trailing)
        if parts is None:
            raise ValueError(f"unexpected {what} line: {line!r}")
        yield dict(zip(fields, parts, strict=True))


def parse_squeue(text: str) -> list[QueueRow]:
    """Parse ``squeue -h -O`` output made with :data:`SQUEUE_FIELDS`.

    Raises:
        ValueError: a line does not have the expected fields.
    """
    rows = []
    for f in _records(text, SQUEUE_FIELDS, trailing=True, what="squeue"):
        rows.append(
            QueueRow(
                job_id=f["JobArrayID"].strip(),
                raw_id=f["JobID"].strip(),
                array_job_id=f["ArrayJobID"].strip() or f["JobID"].strip(),
                array_tasks=_text_or_none(f["ArrayTaskID"]),
                state=base_state(f["State"])[0],
                reason=_text(f["Reason"]),
                nodelist=_text(f["NodeList"]),
                elapsed_s=parse_duration(f["TimeUsed"]),
                nodes=_int_or_none(f["NumNodes"]),
                restarts=_int_or_none(f["RestartCnt"]) or 0,
                partition=_text(f["Partition"]),
                user=_text(f["UserName"]),
                name=f["Name"],
            )
        )
    return rows


def parse_sacct(text: str) -> list[AcctRow]:
    """Parse ``sacct -X -P -n`` output made with :data:`SACCT_FIELDS`.

    Raises:
        ValueError: a line does not have the expected fields.
    """
    rows = []
    for f in _records(text, SACCT_FIELDS, trailing=False, what="sacct"):
        state, by = base_state(f["State"])
        code, sig = parse_exit_code(f["ExitCode"])
        derived, _ = parse_exit_code(f["DerivedExitCode"])
        rows.append(
            AcctRow(
                job_id=f["JobID"].strip(),
                raw_id=f["JobIDRaw"].strip(),
                state=state,
                cancelled_by=by,
                exit_code=code,
                exit_signal=sig,
                derived_exit_code=derived,
                reason=_text(f["Reason"]),
                submit=parse_timestamp(f["Submit"]),
                eligible=parse_timestamp(f["Eligible"]),
                start=parse_timestamp(f["Start"]),
                end=parse_timestamp(f["End"]),
                elapsed_s=parse_duration(f["Elapsed"]),
                nodes=_int_or_none(f["NNodes"]),
                nodelist=_text(f["NodeList"]),
                partition=_text(f["Partition"]),
                user=_text(f["User"]),
                name=f["JobName"],
            )
        )
    return rows


@dataclass(frozen=True)
class TokenRow:
    """A job that carries an hpcjobs submission token in its comment."""

    job_id: str
    comment: str


def parse_token_rows(text: str) -> list[TokenRow]:
    """Parse ``squeue -h -O`` output made with :data:`TOKEN_FIELDS`."""
    rows = []
    for line in split_lines(text):
        if not line.strip():
            continue
        parts = _split(line, len(TOKEN_FIELDS), trailing=True)
        if parts is None:
            raise ValueError(f"unexpected squeue line: {line!r}")
        array_id, raw_id, comment = parts
        rows.append(TokenRow(job_id=array_id.strip() or raw_id.strip(), comment=comment))
    return rows


_SBATCH_ID = re.compile(r"^(\d+)(?:;(\S+))?$")


def parse_sbatch_parsable(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (``"123"`` or ``"123;cluster"``).

    Raises:
        ValueError: no job id in the output.
    """
    for line in reversed(split_lines(text.strip())):
        match = _SBATCH_ID.match(line.strip())
        if match:
            return match.group(1)
    raise ValueError(f"no job id in sbatch output: {text.strip()!r}")


_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> str:
    """``"22.05.8"`` from ``sbatch --version`` (``"slurm 24.11.1"``, ``"slurm-wlm 22.05.8"``).

    Raises:
        ValueError: no version number in the text.
    """
    match = _VERSION.search(text)
    if not match:
        raise ValueError(f"no Slurm version in {text.strip()!r}")
    return match.group(0)


def version_tuple(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a Slurm or pyslurm version: ``"22.05.8"`` and ``"22.5.0"`` agree."""
    match = _VERSION.search(version)
    if not match:
        raise ValueError(f"not a version: {version!r}")
    return int(match.group(1)), int(match.group(2))


def parse_config(text: str) -> dict[str, str]:
    """``scontrol show config`` (``Key   = Value`` lines) as a dict; later sections ignored."""
    result: dict[str, str] = {}
    for line in split_lines(text):
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            result.setdefault(key, value.strip())
    return result


def parse_job_record(text: str) -> dict[str, str]:
    """``scontrol show job -o`` for one job (one line of ``Key=Value`` pairs).

    Slurm does not quote values, so a value with `` Key=`` inside (a job named
    ``x StdOut=/tmp/y``) looks like more pairs. A key seen twice keeps its last value. Slurm
    prints ``StdErr``, ``StdIn`` and ``StdOut`` after every field a submitter writes freely
    (``JobName``, ``Command``, ``WorkDir``, ``Comment``), so those come out right whatever the
    name or comment says, and ``hpcjobs logs`` cannot be pointed at another file. ``JobState``
    and ``Reason`` come before ``Command`` and ``Comment``, which could imitate them: they are
    shown to the user while waiting, and decide nothing.
    """
    line = next((ln for ln in split_lines(text) if ln.strip()), "")
    return parse_key_values(line)


def log_path(record: dict[str, str], *, stderr: bool = False) -> str:
    """Where a job's standard output (or, with ``stderr``, its standard error) goes, from its
    ``scontrol show job`` record; "" when Slurm does not say.

    Without ``--error``, stderr goes to the stdout file: Slurm 22.05 and 24.11 print that path
    as ``StdErr``, Slurm 26.05 prints an empty ``StdErr=`` (measured).
    """
    path = record.get("StdErr", "") if stderr else ""
    if not path or path == "(null)":
        path = record.get("StdOut", "")
    return "" if path == "(null)" else path


def parse_key_values(text: str) -> dict[str, str]:
    """Split ``Key=Value Key2=Value with spaces`` into a dict.

    A value runs until the next whitespace-separated ``Key=``, so values with spaces (``OS=``,
    ``Reason=``) and with ``=`` inside (``CfgTRES=cpu=8,mem=4000M``) survive.
    """
    matches = list(_KEY.finditer(text))
    result: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        result[match.group(1)] = text[match.end() : end].strip()
    return result


def parse_scontrol_records(text: str) -> list[dict[str, str]]:
    """Parse ``scontrol [-o] show node`` or ``show partition`` output into one dict per record.

    Works for the one-line (``-o``) form and the multi-line form alike.
    """
    starts = [m.start() for m in _RECORD_START.finditer(text)]
    records = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(text)
        chunk = " ".join(line.strip() for line in split_lines(text[start:end]))
        records.append(parse_key_values(chunk))
    return records


_Row = TypeVar("_Row")


def fold_resized(
    rows: Iterable[_Row],
    job_of: Callable[[_Row], str],
    state_of: Callable[[_Row], str],
    fold: Callable[[_Row, _Row], _Row],
) -> list[_Row]:
    """Accounting records with each :data:`RESIZING` record folded into the next record of its job
    (``fold(earlier, later)``): one run all the same, at several sizes. ``rows`` in the order
    Slurm ran them (a job's later record after its earlier); a job still resizing keeps its
    record, at the end."""
    out: list[_Row] = []
    pending: dict[str, _Row] = {}
    for row in rows:
        job = job_of(row)
        if job in pending:
            row = fold(pending.pop(job), row)
        if base_state(state_of(row))[0] == RESIZING:
            pending[job] = row
        else:
            out.append(row)
    return out + list(pending.values())


def resized_overlap(earlier_end: datetime | None, later_start: datetime | None) -> int:
    """Seconds the record after a resize claims of the time before it: Slurm 24.11 starts the
    record after ``scontrol update NodeList=`` at the job's start, its ElapsedRaw counting the
    whole job (measured; 22.05 and 26.05, and 24.11 after a node failure, start it at the
    resize). Those seconds belong to the earlier size."""
    if earlier_end is None or later_start is None:
        return 0
    return max(0, int((earlier_end - later_start).total_seconds()))


def base_state(state: str) -> tuple[str, str | None]:
    """``("CANCELLED", "0")`` from ``"CANCELLED by 0"``: the state word
    (:func:`hpcjobs.contract.slurmstates.base_state`) and who cancelled, if Slurm says."""
    _head, sep, by = state.strip().partition(" by ")
    return slurmstates.base_state(state), (by.strip() or None) if sep else None


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """``(code, signal)`` from ``"1:0"``; ``(None, None)`` when absent."""
    code, _, sig = text.strip().partition(":")
    return _int_or_none(code), _int_or_none(sig)


def format_duration(seconds: int | None) -> str:
    """Slurm-style ``[D-]HH:MM:SS`` for display; ``"-"`` when unknown."""
    return "-" if seconds is None else format_slurm_time(seconds)


def _text(value: str) -> str:
    value = value.strip()
    return "" if value in UNSET else value


def _text_or_none(value: str) -> str | None:
    return _text(value) or None


def _int_or_none(value: str) -> int | None:
    value = value.strip()
    return int(value) if value.isdigit() else None
