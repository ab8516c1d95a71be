"""Times in YAML files are Slurm text: ``5:00`` is five minutes, never YAML 1.1's base-60 300."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpcjobs.config.loader import load_site
from hpcjobs.config.yamlfile import parse_yaml_text
from hpcjobs.contract.slurmtime import parse_slurm_time
from hpcjobs.resources import site_configs_dir
from hpcjobs.script.jobspec import Where, load_job_file, parse_spec
from hpcjobs.script.render import render_job


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("5:00", "5:00"),
        ("1:30:00", "1:30:00"),
        ("190:20:30", "190:20:30"),
        ("-1:20", "-1:20"),
        ("1:30.5", "1:30.5"),
        ("90", 90),
        ("1.5", 1.5),
        ("0x10", 16),
        ("'5:00'", "5:00"),
    ],
)
def test_colon_numbers_stay_text(text: str, value: object) -> None:
    assert yaml.safe_load(f"a: {text}")["a"] is not None  # PyYAML itself is left alone
    assert parse_yaml_text(f"a: {text}\n", source="x").data == {"a": value}


@pytest.mark.parametrize(("text", "seconds"), [("5:00", 300), ("1:30:00", 5400), ("30", 1800)])
def test_job_file_time_means_what_slurm_means(tmp_path: Path, text: str, seconds: int) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"time: {text}\ncommand: [python, train.py]\n")
    spec = parse_spec(load_job_file(job), source=str(job))
    assert spec.time == text
    assert parse_slurm_time(spec.time) == seconds
    rendered = render_job(spec, load_site("sandbox"), where=Where(cwd=tmp_path))
    assert f"--time={text}" in rendered.sbatch_args


def test_site_config_times_are_text(tmp_path: Path) -> None:
    text = (site_configs_dir() / "sandbox.yaml").read_text()
    assert '  time: "00:10:00"\n' in text
    site_file = tmp_path / "site.yaml"
    site_file.write_text(text.replace('  time: "00:10:00"\n', "  time: 20:00\n", 1))
    site = load_site(site_file)
    assert site.slurm.time == "20:00"
    assert parse_slurm_time(site.slurm.time) == 1200
