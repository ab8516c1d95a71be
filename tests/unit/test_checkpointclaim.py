"""Which run owns a checkpoint folder: fingerprints, the submit-time decision, and the job's own
check at the start of every run (the job's supervisor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcjobs.config.loader import load_site
from hpcjobs.contract.jobenv import RUN_FILE
from hpcjobs.errors import BadInputError
from hpcjobs.jobs.checkpointclaim import (
    FolderState,
    decide,
    inspect_folder,
    prepare_run_folder,
)
from hpcjobs.jobs.records import LocalFiles
from hpcjobs.jobs.runidentity import fingerprint, run_identity
from hpcjobs.runner import LocalRunner
from hpcjobs.script.jobspec import Where, parse_spec
from hpcjobs.script.render import render_job
from tests.eventlines import events_in
from tests.unit.test_requeue import _begin, _job_env, _supervisor


def _identity(*command: str, env: dict[str, str] | None = None, workdir: str = "/w") -> dict:
    return run_identity(list(command), env or {}, None, workdir)


# ---- fingerprints ---------------------------------------------------------------------------


def test_fingerprint_is_stable_and_tells_runs_apart() -> None:
    base = fingerprint(_identity("python", "train.py", "--lr", "1e-3"))
    assert base == fingerprint(_identity("python", "train.py", "--lr", "1e-3"))
    assert base != fingerprint(_identity("python", "train.py", "--lr", "3e-4"))
    assert base != fingerprint(_identity("python", "hello.py"))
    assert base != fingerprint(_identity("python", "train.py", "--lr", "1e-3", env={"SEED": "2"}))
    assert base != fingerprint(_identity("python", "train.py", "--lr", "1e-3", workdir="/other"))
    # Argument boundaries count: ["a b"] is not ["a", "b"].
    assert fingerprint(_identity("echo", "a b")) != fingerprint(_identity("echo", "a", "b"))


def _render(tmp_path: Path, *command: str, **fields: object):  # type: ignore[no-untyped-def]
    spec = parse_spec({"command": list(command), "output_dir": str(tmp_path / "out"), **fields})
    return render_job(spec, load_site("sandbox"), where=Where(cwd=tmp_path))


def test_rendered_script_carries_the_run_and_its_folder(tmp_path: Path) -> None:
    one = _render(tmp_path, "python", "train.py")
    assert one.identity["command"] == ["python", "train.py"]
    assert one.identity["workdir"] == str(tmp_path)
    assert f"export HPCJOBS_RUN_FINGERPRINT={fingerprint(one.identity)}\n" in one.script
    assert f"export HPCJOBS_RUN_FILE={tmp_path}/out/checkpoints/RUN\n" in one.script
    # Resources are not part of the run: the same run may continue on more nodes.
    bigger = _render(tmp_path, "python", "train.py", nodes=2, time="30")
    assert fingerprint(bigger.identity) == fingerprint(one.identity)
    other = _render(tmp_path, "python", "train.py", "--epochs", "2")
    assert fingerprint(other.identity) != fingerprint(one.identity)


# ---- the decision, from what the folder holds -------------------------------------------------


MINE = fingerprint(_identity("python", "hello.py"))
THEIRS = fingerprint(_identity("python", "train.py"))


def _state(*entries: str, owner: str | None = None, exists: bool = True) -> FolderState:
    record = None if owner is None else {"fingerprint": owner, "command": ["python", "x.py"]}
    if owner is not None:
        entries = (*entries, RUN_FILE)
    return FolderState("/ck", exists=exists, entries=entries, owner=record)


@pytest.mark.parametrize(
    ("state", "reuse", "action"),
    [
        (_state(exists=False), None, "new"),
        (_state(), None, "new"),
        (_state(owner=MINE), None, "new"),  # claimed by this run, nothing to resume from yet
        (_state(owner=THEIRS), "fresh", "fresh"),
        (_state("step-000000004", owner=MINE), None, "continue"),
        (_state("step-000000004", "DONE", owner=MINE), None, "finished"),
        (_state("step-000000004", "DONE", owner=MINE), "resume", "resume"),
        (_state("step-000000004", "DONE", owner=MINE), "fresh", "fresh"),
        (_state("DONE", owner=THEIRS), "fresh", "fresh"),
        (_state("DONE", owner=THEIRS), "resume", "resume"),
        (_state("step-000000001"), "resume", "resume"),
        (_state("model.pt"), "fresh", "fresh"),
    ],
)
def test_decide(state: FolderState, reuse: str | None, action: str) -> None:
    assert decide(state, MINE, reuse).action == action  # type: ignore[arg-type]


def test_decide_refuses_another_runs_folder_naming_it() -> None:
    with pytest.raises(BadInputError) as info:
        decide(_state("DONE", owner=THEIRS), MINE, None)
    assert "/ck belongs to another run: 'python x.py'" in info.value.message
    assert "--fresh" in (info.value.hint or "") and "--resume" in (info.value.hint or "")
    assert info.value.exit_code == 2


def test_decide_refuses_a_folder_claimed_by_a_pending_run() -> None:
    with pytest.raises(BadInputError, match="claimed by another run that has not checkpointed"):
        decide(_state(owner=THEIRS), MINE, None)


def test_a_job_whose_folder_was_taken_over_writes_nothing_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpcjobs.runtime.checkpoint import CheckpointDir, CheckpointFolderTaken

    folder = tmp_path / "checkpoints"
    _prepare(folder, "python", "train.py")
    monkeypatch.setenv("HPCJOBS_RUN_FINGERPRINT", THEIRS)
    monkeypatch.setenv("HPCJOBS_RUN_FILE", str(folder / RUN_FILE))
    ckpt = CheckpointDir(folder)
    with ckpt.save(1) as tmp:
        (tmp / "state").write_text("1")
    # Another run takes the folder over while this job still runs.
    _prepare(folder, "python", "hello.py", reuse="fresh")
    with (
        pytest.raises(CheckpointFolderTaken, match="now belongs to another run"),
        ckpt.save(2) as tmp,
    ):
        (tmp / "state").write_text("2")
    with pytest.raises(CheckpointFolderTaken):
        ckpt.mark_done()
    assert sorted(p.name for p in folder.iterdir()) == [RUN_FILE]
    (old,) = tmp_path.glob("checkpoints.old-*")
    assert (old / "step-000000001").is_dir()


def test_decide_refuses_checkpoints_of_unknown_origin() -> None:
    with pytest.raises(BadInputError, match=r"unknown earlier run \(step-000000003"):
        decide(_state("step-000000003", "PROGRESS"), MINE, None)


# ---- preparing a real folder -------------------------------------------------------------------


def _prepare(folder: Path, *command: str, reuse: str | None = None, dry_run: bool = False):  # type: ignore[no-untyped-def]
    return prepare_run_folder(
        LocalRunner(),
        LocalFiles(),
        str(folder),
        _identity(*command),
        reuse=reuse,  # type: ignore[arg-type]
        dry_run=dry_run,
    )


def test_prepare_claims_a_new_folder_privately(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "checkpoints"
    assert _prepare(folder, "python", "hello.py", dry_run=True).action == "new"
    assert not folder.exists()
    prepared = _prepare(folder, "python", "hello.py")
    assert prepared.action == "new" and prepared.note() is None
    record = json.loads((folder / RUN_FILE).read_text())
    assert record["fingerprint"] == MINE and record["command"] == ["python", "hello.py"]
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / RUN_FILE).stat().st_mode & 0o777 == 0o600


def test_prepare_same_run_continues_or_is_finished(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    _prepare(folder, "python", "hello.py")
    (folder / "step-000000002").mkdir()
    assert _prepare(folder, "python", "hello.py").action == "continue"
    (folder / "DONE").write_text("{}")
    finished = _prepare(folder, "python", "hello.py")
    assert finished.action == "finished"
    assert "already finished" in (finished.note() or "")
    assert (folder / "DONE").exists()


def test_prepare_fresh_sets_the_old_folder_aside_and_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    _prepare(folder, "python", "train.py")
    (folder / "step-000000002").mkdir()
    (folder / "DONE").write_text("{}")
    with pytest.raises(BadInputError, match=r"belongs to another run: 'python train\.py'"):
        _prepare(folder, "python", "hello.py")
    prepared = _prepare(folder, "python", "hello.py", reuse="fresh")
    assert prepared.action == "fresh" and prepared.set_aside is not None
    old = Path(prepared.set_aside)
    assert (old / "DONE").exists() and (old / "step-000000002").is_dir()
    assert sorted(p.name for p in folder.iterdir()) == [RUN_FILE]
    assert json.loads((folder / RUN_FILE).read_text())["fingerprint"] == MINE


def test_prepare_resume_takes_over_and_sets_the_done_marker_aside(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "step-000000007").mkdir()
    (folder / "DONE").write_text("{}")
    prepared = _prepare(folder, "python", "finetune.py", reuse="resume")
    assert prepared.action == "resume"
    assert not (folder / "DONE").exists() and Path(str(prepared.set_aside)).exists()
    assert (folder / "step-000000007").is_dir()
    assert inspect_folder(LocalRunner(), str(folder)).owner["command"] == [  # type: ignore[index]
        "python",
        "finetune.py",
    ]


def test_prepare_refuses_a_folder_that_cannot_be_created(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot use checkpoint folder /proc/x/ck") as info:
        _prepare(Path("/proc/x/ck"), "true")
    assert info.value.exit_code == 2 and "--checkpoint-dir" in (info.value.hint or "")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BadInputError, match="cannot use checkpoint folder"):
        _prepare(blocker / "ck", "true")


def test_prepare_refuses_a_path_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "ck"
    path.write_text("")
    with pytest.raises(BadInputError, match="exists and is not a folder"):
        _prepare(path, "true")


# ---- the job's own check at the start of a run (the supervisor) -------------------------------


def _start(tmp_path: Path, ckpt: Path, print_: str) -> int | None:
    """The start of a run of job 41 that is run ``print_``: None when the program starts, else
    the job's exit code."""
    env = _job_env(
        tmp_path,
        SLURM_JOB_ID="41",
        HPCJOBS_CHECKPOINT_DIR=str(ckpt),
        HPCJOBS_RUN_FINGERPRINT=print_,
        HPCJOBS_RUN_FILE=str(ckpt / RUN_FILE),
    )
    return _begin(_supervisor(env))


def _events(tmp_path: Path) -> list[list[str]]:
    return [[e.event, e.cause, e.detail] for e in events_in(tmp_path / "run" / "chain-41.jsonl")]


def test_job_claims_an_unclaimed_folder_and_runs(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    assert _start(tmp_path, ckpt, MINE) is None
    assert json.loads((ckpt / RUN_FILE).read_text())["fingerprint"] == MINE
    assert ckpt.stat().st_mode & 0o777 == 0o700


def test_job_runs_in_its_own_folder(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    _prepare(ckpt, "python", "hello.py")
    assert _start(tmp_path, ckpt, MINE) is None


def test_job_stops_when_another_run_took_its_folder(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "ck"
    _prepare(ckpt, "python", "train.py")
    assert _start(tmp_path, ckpt, MINE) == 1
    assert "belongs to another run" in capfd.readouterr().err
    event, cause, detail = _events(tmp_path)[-1]
    assert (event, cause) == ("end", "fail")
    assert detail.startswith("checkpoint folder owned by another run")


def test_job_with_an_unusable_folder_fails_with_its_own_cause(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert _start(tmp_path, blocker / "ck", MINE) == 1
    assert "cannot use the checkpoint folder" in capfd.readouterr().err
    event, cause, detail = _events(tmp_path)[-1]
    assert (event, cause) == ("end", "fail")
    assert detail == (
        f"checkpoint folder unusable: {blocker}/ck: mkdir: cannot create directory "
        f"'{blocker}/ck': Not a directory"
    )


# ---- the CLI: --dry-run makes the same decision; --fresh and --resume exclude each other ------


def _cli(tmp_path: Path, *argv: str):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from hpcjobs.cli import cli

    out = str(tmp_path / "out")
    return CliRunner().invoke(
        cli, ["--site", "sandbox", "submit", "--output-dir", out, *argv], catch_exceptions=False
    )


def test_dry_run_refuses_another_runs_folder_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "out" / "checkpoints"
    prepare_run_folder(
        LocalRunner(),
        LocalFiles(),
        str(folder),
        run_identity(["python", "train.py"], {}, None, str(tmp_path)),
    )
    (folder / "DONE").write_text("{}")
    result = _cli(tmp_path, "--dry-run", "--", "python", "hello.py")
    assert result.exit_code == 2
    assert "belongs to another run: 'python train.py'" in result.output
    assert "Hint:" in result.output
    same = _cli(tmp_path, "--dry-run", "--", "python", "train.py")
    assert same.exit_code == 0 and "this run already finished" in same.output
    fresh = _cli(tmp_path, "--dry-run", "--fresh", "--", "python", "hello.py")
    assert fresh.exit_code == 0 and "#!/bin/bash" in fresh.output
    assert sorted(p.name for p in folder.iterdir()) == ["DONE", RUN_FILE]


def test_fresh_and_resume_exclude_each_other(tmp_path: Path) -> None:
    result = _cli(tmp_path, "--dry-run", "--fresh", "--resume", "--", "true")
    assert result.exit_code == 2 and "contradict" in result.output


def test_fresh_never_merges_into_a_folder_set_aside_in_the_same_second(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    folder = tmp_path / "checkpoints"
    when = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
    for name in ("a.py", "b.py"):
        prepare_run_folder(
            LocalRunner(),
            LocalFiles(),
            str(folder),
            _identity("python", name),
            reuse="fresh",
            now=when,
        )
        (folder / "step-000000001").mkdir()
    with pytest.raises(BadInputError, match="exists already"):
        prepare_run_folder(
            LocalRunner(),
            LocalFiles(),
            str(folder),
            _identity("python", "c.py"),
            reuse="fresh",
            now=when,
        )
    assert (folder / "step-000000001").is_dir()


def test_a_claimed_folder_is_free_once_the_claiming_run_left_the_queue(tmp_path: Path) -> None:
    from hpcjobs.jobs.checkpointclaim import note_submitted

    folder = tmp_path / "checkpoints"
    first = _prepare(folder, "python", "train.py")
    note_submitted(LocalFiles(), first, ["41"])
    assert json.loads((folder / RUN_FILE).read_text())["job_ids"] == ["41"]
    asked: list[list[str]] = []

    def queued(ids: list[str]) -> bool:
        asked.append(ids)
        return still_queued

    def again() -> str:
        return prepare_run_folder(
            LocalRunner(), LocalFiles(), str(folder), _identity("python", "hello.py"), queued=queued
        ).action

    still_queued = True
    with pytest.raises(BadInputError, match="claimed by another run"):
        again()
    still_queued = False
    assert again() == "new" and asked == [["41"], ["41"]]
    assert json.loads((folder / RUN_FILE).read_text())["command"] == ["python", "hello.py"]


def test_decide_takes_a_claimed_folder_only_when_its_run_is_gone() -> None:
    state = _state(owner=THEIRS)
    assert decide(state, MINE, None, owner_active=False).action == "new"
    for unknown_or_active in (None, True):
        with pytest.raises(BadInputError):
            decide(state, MINE, None, owner_active=unknown_or_active)
