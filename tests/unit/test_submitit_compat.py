"""The submitit releases hpcjobs supports, and the private parts of submitit it builds on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from hpcjobs.submitit import compat

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_release_is_supported() -> None:
    assert compat.supported(), f"submitit {compat.version()} is not in {compat.SUPPORTED}"


def test_pyproject_asks_for_the_supported_range() -> None:
    deps = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if d.startswith("submitit")]
    low, high = compat.SUPPORTED
    bounds = re.findall(r"(>=|<)(\d+)\.(\d+)", spec)
    assert (">=", str(low[0]), str(low[1])) in bounds
    assert ("<", str(high[0]), str(high[1])) in bounds


@pytest.mark.parametrize(
    ("cls", "name"),
    [(cls, name) for cls, names in compat.OVERRIDDEN.items() for name in names],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_what_hpcjobs_overrides_still_exists(cls: type, name: str) -> None:
    assert hasattr(cls, name), f"submitit {compat.version()}: {cls.__name__}.{name} is gone"


@pytest.mark.parametrize(
    ("installed", "ok"), [((1, 5, 4), True), ((1, 5), True), ((1, 4, 9), False), ((1, 6, 0), False)]
)
def test_supported_range(installed: tuple[int, ...], ok: bool) -> None:
    assert compat.supported(installed) is ok
