"""``hpcjobs site schema`` and ``hpcjobs job schema``: JSON Schemas from the models hpcjobs
validates with, that every shipped site config and example job file passes, and that refuse and
accept what the models do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from hpcjobs.cli import cli
from hpcjobs.config.models import SiteConfig
from hpcjobs.script.jobspec import JobSpec

REPO = Path(__file__).resolve().parents[2]
SITES = sorted((REPO / "site-configs").glob("*.yaml"))
JOB_FILES = sorted((REPO / "examples").glob("*.yaml"))


def printed(kind: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [kind, "schema"])
    assert result.exit_code == 0, result.output
    schema: dict[str, Any] = json.loads(result.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def problems(schema: dict[str, Any], data: object) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", SITES, ids=[p.stem for p in SITES])
def test_every_shipped_site_config_passes_the_printed_schema(path: Path) -> None:
    assert problems(printed("site"), yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("path", JOB_FILES, ids=[p.stem for p in JOB_FILES])
def test_every_example_job_file_passes_the_printed_schema(path: Path) -> None:
    assert problems(printed("job"), yaml.safe_load(path.read_text())) == []


def test_there_are_example_job_files_and_they_say_where_their_schema_is() -> None:
    assert JOB_FILES
    for path in JOB_FILES:
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../docs/schemas/job.schema.json"


@pytest.mark.parametrize("kind", ["site", "job"])
def test_the_schemas_in_docs_are_the_printed_ones(kind: str) -> None:
    """Editors point at docs/schemas/; regenerate with
    ``hpcjobs site schema > docs/schemas/site.schema.json`` (and ``job``)."""
    shipped = json.loads((REPO / "docs" / "schemas" / f"{kind}.schema.json").read_text())
    assert shipped == printed(kind)


@pytest.mark.parametrize(
    ("data", "valid"),
    [
        ({"nodes": 2, "command": "python train.py"}, True),
        ({"nodes": "2", "command": ["python", "train.py"], "time": 30}, True),
        ({"nodes": 2, "env": {"NCCL_IB_TIMEOUT": 22}, "nccl_debug": True}, True),
        ({"nodes": 0}, False),
        ({"nodes": -1}, False),
        ({"nodes": True}, False),
        ({"nodes": "two"}, False),
        ({"nccl_debug": "yes"}, False),
        ({"nodez": 2}, False),
        ({"requeue": {"lead_time": 60, "signal_name": "USR2"}}, False),
        ({"launcher": "mpirun"}, False),
    ],
)
def test_the_job_schema_refuses_and_accepts_what_the_model_does(
    data: dict[str, Any], valid: bool
) -> None:
    """(One difference cannot be said in JSON Schema, whose integers include 2.0: a float
    count passes the schema, and ``submit`` refuses it.)"""
    assert (problems(printed("job"), data) == []) is valid
    try:
        JobSpec.model_validate(data)
        model_valid = True
    except ValueError:
        model_valid = False
    assert model_valid is valid


def test_the_site_schema_refuses_an_unknown_section_and_a_bad_count() -> None:
    schema = printed("site")
    site = yaml.safe_load((REPO / "site-configs" / "sandbox.yaml").read_text())
    assert problems(schema, {**site, "partitons": {}})
    bad = json.loads(json.dumps(site))
    bad["partitions"][0]["gpus_per_node"] = -1
    assert problems(schema, bad)
    with pytest.raises(ValueError):
        SiteConfig.model_validate(bad)
