"""Which run a checkpoint folder belongs to, so that a new submission is never taken for an old one.

A job resumes from whatever complete checkpoint its folder holds, and a done marker there makes
every later run exit at once. That is right for the *same* run submitted again (it continues, or
stops because it already finished), and wrong for a different one that happens to get the same
folder: by default the folder is ``<output dir>/checkpoints`` and the output dir is named after
the job, so every ``python X.py`` job, or every resubmission with the same ``-J`` and new
arguments, would share it.

So each checkpoint folder carries a ``RUN`` file naming the run that owns it: a fingerprint of
what makes a run that run (:func:`~hpcjobs.jobs.runidentity.run_identity`: the command with
its arguments, the job's own environment variables, the container, the working directory).
Resources are not part of it: the same run may continue on more or fewer nodes. At submit time
:func:`prepare_run_folder` compares the folder's owner with the new job:

* empty or missing folder: it is created (mode 0700) and claimed;
* the same fingerprint: the run continues from its newest checkpoint; if it already finished
  (a ``DONE`` marker), the job will exit at once, and the caller is told so;
* another fingerprint, or checkpoints of unknown origin: refused (exit 2) unless the user says
  ``fresh`` (the old folder is renamed aside, never deleted, and a new one is started) or
  ``resume`` (the new command takes over the folder and continues from its checkpoints; a done
  marker of the folder itself is set aside so that the run goes on).

The batch script checks the same file at the start of every run (``HPCJOBS_RUN_FINGERPRINT``
against ``HPCJOBS_RUN_FILE``), so a folder taken over while a job was pending stops that job
instead of letting two runs write into one folder.

Everything goes through the runner (``mkdir``, ``ls``, ``cat``, ``mv``) and the file store, so it
works the same on this machine and on a login node over SSH.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from hpcjobs.contract.jobenv import DONE, RUN_FILE
from hpcjobs.errors import BadInputError, CommandError, HpcJobsError
from hpcjobs.jobs.runidentity import fingerprint

if TYPE_CHECKING:  # a render needs no runner: it only fingerprints the run
    from hpcjobs.runner import Result, Runner

RUN_FORMAT = 1
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")

#: What to do with a checkpoint folder that belongs to another run.
Reuse = Literal["fresh", "resume"]

_FLAGS = (
    "--fresh (start over; the old folder is kept under a new name) "
    "or --resume (continue from its checkpoints)"
)


@dataclass(frozen=True)
class FolderState:
    """What a checkpoint folder holds, as seen from the submit host."""

    path: str
    exists: bool
    entries: tuple[str, ...] = ()
    owner: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return DONE in self.entries

    @property
    def has_work(self) -> bool:
        """Checkpoints, progress or a done marker: something a job would act on."""
        return any(name != RUN_FILE and not name.startswith(".") for name in self.entries)


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare_run_folder` decided (and did, unless it was a dry run)."""

    path: str
    action: Literal["new", "continue", "finished", "fresh", "resume"]
    set_aside: str | None = None
    record: dict[str, Any] | None = None

    def note(self) -> str | None:
        """A line for the user, when the decision is worth knowing about."""
        if self.action == "finished":
            return (
                f"this run already finished (done marker in {self.path}): the job will exit "
                "at once without running the command; pass --fresh to run it again from scratch"
            )
        if self.action == "continue":
            return f"continuing this run from its checkpoints in {self.path}"
        if self.action == "fresh":
            return f"started over: the old checkpoint folder is now {self.set_aside}"
        if self.action == "resume":
            aside = f" (its done marker is now {self.set_aside})" if self.set_aside else ""
            return f"this job takes over the checkpoint folder {self.path}{aside}"
        return None


def inspect_folder(runner: Runner, path: str) -> FolderState:
    """Read the folder's entries and its RUN file (through ``runner``).

    Raises:
        BadInputError: the path exists but is not a readable folder, or the file system does
            not answer (a hung mount is a problem with the folder, not with Slurm).
    """
    if not _ok(runner, path, ["test", "-d", path]):
        if not _ok(runner, path, ["test", "-e", path]):
            return FolderState(path, exists=False)
        raise _unusable(path, "it exists and is not a folder")
    listing = _run(runner, path, ["ls", "-A1", "--", path])
    if not listing.ok:
        raise _unusable(path, _first_line(listing.stderr))
    entries = tuple(line for line in listing.stdout.split("\n") if line)
    owner = None
    if RUN_FILE in entries:
        run_file = _join(path, RUN_FILE)
        text = None
        if _ok(runner, path, ["test", "-f", run_file]):
            text = _run(runner, path, ["head", "-c", str(MAX_RUN_BYTES), "--", run_file])
        owner = _parse_owner(text.stdout) if text is not None and text.ok else None
        if owner is None:
            owner = {}
    return FolderState(path, exists=True, entries=entries, owner=owner)


#: A RUN file is a few hundred bytes; more is not read.
MAX_RUN_BYTES = 1 << 16


def _run(runner: Runner, path: str, argv: list[str]) -> Result:
    try:
        return runner.run(argv, check=False, timeout=60)
    except CommandError as exc:  # a timeout: the file system hangs
        raise _unusable(path, exc.message) from None


def _ok(runner: Runner, path: str, argv: list[str]) -> bool:
    return _run(runner, path, argv).ok


def owner_jobs(state: FolderState) -> list[str]:
    """The job ids the owning run was submitted as (recorded by submit, or by a job itself)."""
    owner = state.owner or {}
    ids = owner.get("job_ids")
    found = [str(i) for i in ids] if isinstance(ids, list) else []
    if owner.get("claimed_by_job"):
        found.append(str(owner["claimed_by_job"]))
    return [i for i in found if _JOB_ID.fullmatch(i)]


def decide(
    state: FolderState, print_: str, reuse: Reuse | None, *, owner_active: bool | None = None
) -> Prepared:
    """The decision for a folder (pure logic; see the module docstring).

    ``owner_active`` says whether a job of the run that claimed the folder is still queued
    (None: unknown). A claimed folder without checkpoints is free once that run has left the
    queue; while it may still start, another run needs ``reuse``.

    Raises:
        BadInputError: the folder belongs to another run and ``reuse`` is not given.
    """
    path = state.path
    owner_print = (state.owner or {}).get("fingerprint")
    free = owner_print in (None, "", print_) or owner_active is False
    if not state.exists or (not state.has_work and free):
        return Prepared(path, "new")  # nothing to resume from, stop at, or take from anyone
    if reuse == "fresh":
        return Prepared(path, "fresh")
    if owner_print == print_:
        if reuse == "resume" and state.done:
            return Prepared(path, "resume")
        return Prepared(path, "finished" if state.done else "continue")
    if reuse == "resume":
        return Prepared(path, "resume")
    if owner_print and not state.has_work:
        raise BadInputError(
            f"checkpoint folder {path} is claimed by another run that has not checkpointed "
            f"yet (it may still be pending): {_describe(state.owner or {})}",
            hint=f"pass {_FLAGS} to take it anyway (a pending job of that run then stops when "
            "it starts), or give this run its own folder with -J NAME or --checkpoint-dir DIR",
        )
    if owner_print:
        raise BadInputError(
            f"checkpoint folder {path} belongs to another run: {_describe(state.owner or {})}",
            hint=f"this job would resume from (or stop at) that run's checkpoints; pass {_FLAGS}, "
            "or give this run its own folder with -J NAME or --checkpoint-dir DIR",
        )
    shown = [name for name in state.entries if name != RUN_FILE]
    raise BadInputError(
        f"checkpoint folder {path} holds checkpoints of an unknown earlier run "
        f"({', '.join(shown[:5])}{', ...' if len(shown) > 5 else ''})",
        hint=f"pass {_FLAGS}, or give this run its own folder with -J NAME or --checkpoint-dir DIR",
    )


def prepare_run_folder(
    runner: Runner,
    files: Any,
    path: str,
    identity: Mapping[str, Any],
    *,
    reuse: Reuse | None = None,
    dry_run: bool = False,
    job_name: str | None = None,
    now: datetime | None = None,
    queued: Callable[[list[str]], bool | None] | None = None,
) -> Prepared:
    """Check the checkpoint folder against this run and claim it (unless ``dry_run``).

    Args:
        runner: runs ``ls``/``cat``/``mkdir``/``mv`` where the job is submitted.
        files: a :class:`hpcjobs.jobs.records.FileStore` there, to write the RUN file.
        path: the checkpoint folder (absolute, as the job sees it).
        identity: :func:`~hpcjobs.jobs.runidentity.run_identity` of the new job.
        reuse: what to do with a folder of another run: ``fresh`` or ``resume``.
        dry_run: only decide; change nothing.
        queued: whether any of these job ids is still in Slurm's queue (one query); asked
            only for a folder that another run claimed and has not checkpointed into.

    Raises:
        BadInputError: the folder belongs to another run, or cannot be created or written.
    """
    print_ = fingerprint(identity)
    state = inspect_folder(runner, path)
    owner_active = None
    owner_print = (state.owner or {}).get("fingerprint")
    if queued is not None and not state.has_work and owner_print and owner_print != print_:
        ids = owner_jobs(state)
        owner_active = queued(ids) if ids else None
    decision = decide(state, print_, reuse, owner_active=owner_active)
    if dry_run:
        return decision
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    set_aside = None
    if decision.action == "fresh":
        set_aside = f"{path.rstrip('/')}.old-{stamp}"
        _move(runner, path, set_aside)
    elif decision.action == "resume":
        state = inspect_folder(runner, path)
        if state.done:
            set_aside = _join(path, f"{DONE}.old-{stamp}")
            _move(runner, _join(path, DONE), set_aside)
    _make_folder(runner, path)
    record = dict(state.owner or {})
    if decision.action != "continue" and decision.action != "finished":
        record = {
            "format": RUN_FORMAT,
            "fingerprint": print_,
            "job_name": job_name,
            "claimed": stamp,
            "job_ids": [],
            **identity,
        }
        _write_run(files, path, record)
    return Prepared(path, decision.action, set_aside, record)


def note_submitted(files: Any, prepared: Prepared, job_ids: Sequence[str]) -> None:
    """Add the new job ids to the RUN file, so a later submission can tell whether the run
    that claimed the folder may still start."""
    record = dict(prepared.record or {})
    if not record.get("fingerprint"):
        return
    known = record.get("job_ids")
    record["job_ids"] = [*(known if isinstance(known, list) else []), *job_ids]
    _write_run(files, prepared.path, record)


def _write_run(files: Any, path: str, record: Mapping[str, Any]) -> None:
    try:
        files.write_text(_join(path, RUN_FILE), json.dumps(record, sort_keys=True) + "\n")
    except OSError as exc:
        raise _unusable(path, exc.strerror or str(exc)) from exc


def _make_folder(runner: Runner, path: str) -> None:
    made = _run(runner, path, ["mkdir", "-p", "-m", "700", "--", path])
    if not made.ok:
        raise _unusable(path, _first_line(made.stderr))
    if not _ok(runner, path, ["test", "-w", path]):
        raise _unusable(path, "not writable")


def _move(runner: Runner, source: str, target: str) -> None:
    moved = _run(runner, source, ["mv", "-n", "-T", "--", source, target])
    if moved.ok and _ok(runner, source, ["test", "-e", source]):
        moved = replace(moved, returncode=1, stderr=f"{target} exists already")
    if not moved.ok:
        raise BadInputError(
            f"cannot set {source} aside as {target}: {_first_line(moved.stderr)}",
            hint="move it yourself, or choose another --checkpoint-dir",
        )


def _unusable(path: str, reason: str) -> HpcJobsError:
    return BadInputError(
        f"cannot use checkpoint folder {path}: {reason}",
        hint="choose a --checkpoint-dir on a shared file system that you can write to",
    )


def _parse_owner(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _describe(owner: Mapping[str, Any]) -> str:
    command = owner.get("command")
    text = shlex.join(str(c) for c in command) if isinstance(command, list) else "?"
    if len(text) > 120:
        text = text[:117] + "..."
    parts = [f"'{text}'"]
    if owner.get("workdir"):
        parts.append(f"in {owner['workdir']}")
    if owner.get("claimed"):
        parts.append(f"since {owner['claimed']}")
    return " ".join(parts)


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name)


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().split("\n") if line.strip()]
    return lines[0].strip() if lines else "failed"


__all__ = [
    "FolderState",
    "Prepared",
    "Reuse",
    "decide",
    "inspect_folder",
    "prepare_run_folder",
]
