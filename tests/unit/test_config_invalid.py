"""The invalid-config corpus: each file must fail with the message fragments it declares.

Each file in ``tests/data/configs/invalid`` lists what its report must contain in leading
``# expect: FRAGMENT`` lines (a file that must stay truly empty uses ``NAME.expect`` instead).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.validate import validate_site_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "configs" / "invalid"
CASES = sorted(CORPUS.glob("*.yaml"))


def expectations(path: Path) -> list[str]:
    sidecar = path.with_suffix(".expect")
    lines = sidecar.read_text().splitlines() if sidecar.exists() else path.read_text().splitlines()
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect:")]
    if sidecar.exists():
        found += [line.strip() for line in lines if line.strip()]
    return found


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 20
    for path in CASES:
        assert expectations(path), f"{path.name} declares no expected fragment"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_invalid_config_is_reported(path: Path) -> None:
    report = validate_site_file(path, source=path.name)
    assert not report.ok
    assert report.config is None
    text = "\n".join(p.format() for p in report.errors)
    for fragment in expectations(path):
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert all(p.file == path.name for p in report.errors)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_cli_exits_2_without_traceback(path: Path) -> None:
    result = CliRunner().invoke(cli, ["site", "validate", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert path.name in result.output


def test_every_problem_is_reported_not_only_the_first() -> None:
    report = validate_site_file(CORPUS / "many-problems-at-once.yaml")
    assert len(report.errors) >= 4
    assert all(p.line is not None for p in report.errors)


def test_missing_file(tmp_path: Path) -> None:
    report = validate_site_file(tmp_path / "nope.yaml")
    assert [p.format() for p in report.errors] == [f"{tmp_path / 'nope.yaml'}: file not found"]


def test_directory_is_not_a_config(tmp_path: Path) -> None:
    report = validate_site_file(tmp_path)
    assert "is a directory" in report.errors[0].message


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("name: x\n")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads anything: simulate the permission error instead
        real_open = os.open

        def deny(name: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if str(name) == str(path):
                raise PermissionError(13, "Permission denied", str(name))
            return real_open(name, flags, *args, **kwargs)

        monkeypatch.setattr(os, "open", deny)
    report = validate_site_file(path)
    assert report.errors[0].format() == f"{path}: file is not readable (permission denied)"


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    assert "not UTF-8" in validate_site_file(path).errors[0].message


def test_validate_reports_missing_and_unreadable_in_one_run(tmp_path: Path) -> None:
    good = Path(__file__).resolve().parents[2] / "site-configs" / "sandbox.yaml"
    result = CliRunner().invoke(
        cli, ["site", "validate", str(good), str(tmp_path / "gone.yaml"), "no-such-site"]
    )
    assert result.exit_code == 2
    assert "sandbox.yaml: ok" in result.output
    assert "gone.yaml: file not found" in result.output
    assert "no-such-site: no site config named 'no-such-site'" in result.output
