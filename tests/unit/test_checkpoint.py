"""Atomic checkpoints: publish, retention, skipping partial or corrupt ones, done marker."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from hpcjobs.errors import BadInputError
from hpcjobs.runtime.checkpoint import COMPLETE, STALE_TMP_SECONDS, CheckpointDir


def _save(ckpt: CheckpointDir, step: int, payload: str = "x") -> None:
    with ckpt.save(step, {"loss": step / 10}) as folder:
        (folder / "state.bin").write_text(payload * 100)
        (folder / "sub").mkdir()
        (folder / "sub" / "opt.bin").write_text("o")


def test_save_and_latest(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path / "ck")
    assert ckpt.latest() is None
    _save(ckpt, 5)
    _save(ckpt, 10)
    last = ckpt.latest()
    assert last is not None
    assert last.step == 10
    assert last.meta == {"loss": 1.0}
    assert (last.path / "sub" / "opt.bin").read_text() == "o"
    assert oct((tmp_path / "ck").stat().st_mode & 0o777) == "0o700"


def test_keep_last_n_never_deletes_newest(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep=2)
    for step in range(1, 6):
        _save(ckpt, step)
    assert [c.step for c in ckpt.checkpoints()] == [4, 5]


def test_keep_must_be_two_or_more(tmp_path: Path) -> None:
    with pytest.raises(BadInputError):
        CheckpointDir(tmp_path, keep=1)


def test_partial_checkpoint_is_skipped(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    _save(ckpt, 1)
    # A folder that looks published but lacks its marker (e.g. copied by hand, half-written).
    bad = tmp_path / "step-000000002"
    bad.mkdir()
    (bad / "state.bin").write_text("partial")
    last = ckpt.latest()
    assert last is not None and last.step == 1


def test_corrupt_marker_or_truncated_file_is_skipped(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path, keep=5)
    _save(ckpt, 1)
    _save(ckpt, 2)
    _save(ckpt, 3)
    (tmp_path / "step-000000003" / "state.bin").write_text("truncated")
    marker = tmp_path / "step-000000002" / COMPLETE
    data = json.loads(marker.read_text())
    data["step"] = 99
    marker.write_text(json.dumps(data))
    last = ckpt.latest()
    assert last is not None and last.step == 1


def test_failed_save_publishes_nothing(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    _save(ckpt, 1)
    with pytest.raises(RuntimeError), ckpt.save(2) as folder:
        (folder / "state.bin").write_text("half")
        raise RuntimeError("disk full")
    assert [p.name for p in tmp_path.iterdir()] == ["step-000000001"]
    assert ckpt.latest().step == 1  # type: ignore[union-attr]


def _slow_writer(root: str, started: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    ckpt = CheckpointDir(root)
    with ckpt.save(2) as folder, open(folder / "state.bin", "w") as handle:
        handle.write("partial")
        handle.flush()
        started.set()
        time.sleep(60)


def test_killed_mid_write_keeps_previous(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    _save(ckpt, 1)
    started = multiprocessing.Event()
    proc = multiprocessing.Process(target=_slow_writer, args=(str(tmp_path), started))
    proc.start()
    assert started.wait(30)
    os.kill(proc.pid or 0, signal.SIGKILL)
    proc.join(10)
    assert any(".tmp-" in p.name for p in tmp_path.iterdir())
    last = ckpt.latest()
    assert last is not None and last.step == 1


def test_stale_tmp_folders_are_pruned(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    stale = tmp_path / "step-000000007.tmp-host-1-2"
    fresh = tmp_path / "step-000000008.tmp-host-1-3"
    stale.mkdir()
    fresh.mkdir()
    old = time.time() - STALE_TMP_SECONDS - 5
    os.utime(stale, (old, old))
    ckpt.prune()
    assert not stale.exists()
    assert fresh.exists()  # may belong to a save still in progress


def test_resave_same_step_replaces(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path)
    _save(ckpt, 3, "a")
    _save(ckpt, 3, "b")
    last = ckpt.latest()
    assert last is not None
    assert (last.path / "state.bin").read_text() == "b" * 100


def test_done_marker(tmp_path: Path) -> None:
    ckpt = CheckpointDir(tmp_path / "c")
    assert not ckpt.is_done()
    ckpt.mark_done({"digest": "abc"})
    assert ckpt.is_done()
    assert ckpt.done_result() == {"digest": "abc"}


def test_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="HPCJOBS_CHECKPOINT_DIR"):
        CheckpointDir.from_env()
    monkeypatch.setenv("HPCJOBS_CHECKPOINT_DIR", str(tmp_path))
    assert CheckpointDir.from_env().root == tmp_path
