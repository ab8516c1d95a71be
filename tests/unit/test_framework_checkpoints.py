"""Checkpoints in the frameworks' own layouts (hpcjobs.runtime.supervisor.frameworks)."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from hpcjobs.runtime.supervisor import frameworks


def _lightning_file(path: Path, global_step: int) -> None:
    """A torch.save-like zip (its pickle and one storage)."""
    data = {"global_step": global_step, "epoch": 0, "state_dict": {}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(data))
        archive.writestr("archive/data/0", b"\0" * 16)


def test_lightning_step_is_read_without_torch(tmp_path: Path) -> None:
    path = tmp_path / "hpc_ckpt_2.ckpt"
    _lightning_file(path, 233)
    assert frameworks.lightning_step(str(path)) == 232
    (tmp_path / "bad.ckpt").write_bytes(b"not a zip")
    assert frameworks.lightning_step(str(tmp_path / "bad.ckpt")) is None


def test_newest_across_layouts_and_one_level_down(tmp_path: Path) -> None:
    assert frameworks.newest([str(tmp_path)]) is None
    hf = tmp_path / "out" / "checkpoint-20"
    hf.mkdir(parents=True)
    (hf / "trainer_state.json").write_text("{}")
    (tmp_path / "out" / "checkpoint-30").mkdir()  # incomplete: no trainer_state.json
    found = frameworks.newest([str(tmp_path)])
    assert found is not None and (found.kind, found.step) == (frameworks.HF_TRAINER, 19)
    os.utime(hf, (1, 1))
    dcp = tmp_path / "step_40"
    dcp.mkdir()
    (dcp / ".metadata").write_bytes(b"x")
    found = frameworks.newest([str(tmp_path)])
    assert found is not None and (found.kind, found.step) == (frameworks.DCP, 40)
    os.utime(dcp, (2, 2))
    _lightning_file(tmp_path / "hpc_ckpt_1.ckpt", 50)
    found = frameworks.newest([str(tmp_path), ""])
    assert found is not None and (found.kind, found.step) == (frameworks.LIGHTNING, 49)
    said = found.describe()
    assert "PyTorch Lightning checkpoint" in said and "50 steps done" in said
