"""The public Python API: the names a training script imports from ``hpcjobs``, pinned here;
the paths of 0.1.0's modules before they moved are gone (0.1.0 was never published)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import hpcjobs

DOCS = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"

#: Adding a name is a feature; removing or renaming one breaks users (CHANGELOG, a release).
PUBLIC = [
    "Checkpoint",
    "CheckpointDir",
    "Interrupted",
    "ProgressWriter",
    "Resumable",
    "StopFlag",
    "__version__",
    "accumulation_scale",
    "executor",
    "init_process_group",
    "leave_process_group",
    "micro_batches",
    "report_step",
]


def test_the_public_names_are_pinned_and_resolve() -> None:
    assert sorted(hpcjobs.__all__) == PUBLIC
    assert sorted([*hpcjobs.PUBLIC, "__version__", "executor"]) == PUBLIC
    for name in PUBLIC:
        value = getattr(hpcjobs, name)
        assert value is not None, name
        if name in hpcjobs.PUBLIC:
            module = importlib.import_module(hpcjobs.PUBLIC[name])
            assert getattr(module, name) is value, name


def test_every_public_name_is_documented() -> None:
    text = DOCS.read_text()
    missing = [name for name in PUBLIC if name != "__version__" and f"`{name}" not in text]
    assert missing == []


def test_a_training_script_imports_no_third_party_library() -> None:
    """A rank imports ``hpcjobs`` where only the standard library may be (the job's
    Python): the public runtime names pull in nothing else."""
    names = [n for n in PUBLIC if n in hpcjobs.PUBLIC]
    code = (
        "import sys, hpcjobs\n"
        f"for name in {names!r}: getattr(hpcjobs, name)\n"
        "bad = sorted(m for m in ('pydantic', 'click', 'yaml', 'jinja2', 'submitit', "
        "'paramiko', 'tenacity', 'torch') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


@pytest.mark.parametrize(
    "old",
    [
        "hpcjobs.checkpoint",
        "hpcjobs.config.slurmtime",
        "hpcjobs.distributed",
        "hpcjobs.resumable",
        "hpcjobs.stopflag",
        "hpcjobs.submitit.jobs",
        "hpcjobs._moved",
    ],
)
def test_no_pre_release_import_path_is_left(old: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hpcjobs.nope  # noqa: B018


def test_the_output_folder_has_one_variable() -> None:
    from hpcjobs.contract import names

    assert names.output_dir({"HPCJOBS_RUN_DIR": "/old"}) == ""
    assert names.output_dir({"HPCJOBS_JOB_OUTPUT_DIR": "/new"}) == "/new"
    assert names.output_dir({}) == ""
