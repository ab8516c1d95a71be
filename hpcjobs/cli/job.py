"""``hpcjobs job``: what a job file may hold."""

from __future__ import annotations

import json

import click

from hpcjobs.config.fields import file_schema
from hpcjobs.script.jobspec import JobSpec


@click.group("job")
def job() -> None:
    """Job files (what 'hpcjobs submit -f job.yaml' reads)."""


@job.command("schema", short_help="Print the JSON Schema of job files.")
def schema_cmd() -> None:
    """Print the JSON Schema of a job file: every field 'submit -f' reads, its type, bounds
    and default (the same model 'submit' validates with).

    \b
    For completion and checks in an editor with a YAML language server:
      hpcjobs job schema > ~/.config/hpcjobs/job.schema.json
    and, as the first line of a job file:
      # yaml-language-server: $schema=/home/me/.config/hpcjobs/job.schema.json

    'hpcjobs render -f job.yaml' remains the whole check: the site's limits and the rules
    between fields are not in the schema.
    """
    click.echo(json.dumps(file_schema(JobSpec, "hpcjobs job file"), indent=2))
