"""The one atomic file writer: final mode from birth, no partial file, nothing left on failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpcjobs.atomicfile import write_atomic


def test_a_new_file_is_private_and_complete(tmp_path: Path) -> None:
    target = write_atomic(tmp_path / "a.json", '{"x": 1}\n')
    assert target.read_text() == '{"x": 1}\n'
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_the_mode_holds_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        target = write_atomic(tmp_path / "slurm.conf", b"ClusterName=x\n", mode=0o644)
    finally:
        os.umask(old)
    assert target.stat().st_mode & 0o777 == 0o644


def test_replacing_keeps_no_trace_of_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old and longer\n")
    os.chmod(target, 0o666)
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link").symlink_to(victim)
    write_atomic(tmp_path / "link", "mine\n")
    assert victim.read_text() == "keep\n"
    assert not (tmp_path / "link").is_symlink()


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_atomic(tmp_path / "f", 42)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
