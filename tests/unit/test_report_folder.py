"""Reading a job's report folder: directly here, with one find/grep over any other runner."""

from __future__ import annotations

from pathlib import Path

from hpcjobs.report.folder import read_files
from hpcjobs.runner import LocalRunner
from tests.fakes import FakeRunner, fail, ok


def test_local_folder_by_glob(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_text("1 a\n2 a\n")
    (tmp_path / "rank-1.log").write_bytes(b"3 \xff\n")
    (tmp_path / ".rank-0.log.tmp-7").write_text("half")
    (tmp_path / "n1.csv").write_text("x\n")
    texts = read_files(LocalRunner(), str(tmp_path), "rank-*.log")
    assert texts == {"rank-0.log": "1 a\n2 a\n", "rank-1.log": "3 \ufffd\n"}
    assert read_files(LocalRunner(), str(tmp_path / "missing"), "*.csv") is None


def test_remote_folder_in_one_command_even_with_a_colon_in_its_path() -> None:
    folder = "/scratch/run:1/progress-7"
    out = f"{folder}/rank-0.log:1 1712 n1\n{folder}/rank-0.log:2 1713 n1\n"
    out += f"{folder}/rank-1.log:1 1712 n2\nfind: warning\n"
    runner = FakeRunner().add("find", ok(out))
    texts = read_files(runner, folder, "rank-*.log")
    assert texts == {"rank-0.log": "1 1712 n1\n2 1713 n1\n", "rank-1.log": "1 1712 n2\n"}
    find = ["find", folder, "-maxdepth", "1", "-name", "rank-*.log"]
    assert runner.calls == [[*find, "-exec", "grep", "-H", "", "{}", "+"]]


def test_remote_folder_that_find_cannot_read_is_empty() -> None:
    runner = FakeRunner().add("find", fail("find: '/x': No such file or directory"))
    assert read_files(runner, "/x/", "*.csv") == {}


def test_user_output_file_device_and_unwritable_folder(tmp_path: Path) -> None:
    import pytest

    from hpcjobs.cli.common import write_output
    from hpcjobs.errors import BadInputError

    target = tmp_path / "draft.yaml"
    write_output(target, "name: x\n", hint="h")
    assert target.read_text() == "name: x\n" and oct(target.stat().st_mode & 0o777) == "0o600"
    write_output(Path("/dev/null"), "name: x\n", hint="h")  # not a regular file: written through
    with pytest.raises(BadInputError) as info:
        write_output(tmp_path / "no" / "such" / "draft.yaml", "name: x\n", hint="h")
    assert "cannot write" in info.value.message and info.value.hint == "h"
