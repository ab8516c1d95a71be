"""The user's repeat offenders on the submit side: read the suspects file
(:mod:`hpcjobs.contract.suspects`) where the jobs run, and leave its kept-out nodes out of a
new submission, never so many that the job could not start (docs/faults.md, "Repeat
offenders")."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import NamedTuple

from hpcjobs.config.models import Faults
from hpcjobs.contract import suspects
from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.submission import take_option
from hpcjobs.runner import LocalRunner, Runner
from hpcjobs.slurm.client import SlurmClient


def suspects_path(faults: Faults, runner: Runner) -> str:
    """Where the suspects file is, as ``runner`` reaches it: the site's, else the user's own
    (on a login node reached over SSH, relative to the home folder the command starts in)."""
    if faults.suspects_file:
        return faults.suspects_file
    if isinstance(runner, LocalRunner):
        return suspects.default_path(os.environ)
    return suspects.HOME_RELATIVE


def read_entries(runner: Runner, path: str) -> list[suspects.Entry]:
    """The file's entries ([] when there is none or it cannot be read)."""
    if isinstance(runner, LocalRunner):
        return suspects.read(path)
    argv = ["tail", "-c", str(suspects.READ_LIMIT), "--", path]
    try:
        result = runner.run(argv, check=False, timeout=60)
    except HpcJobsError:
        return []
    return suspects.parse(result.stdout) if result.ok else []


def kept_out(faults: Faults, runner: Runner, now: float | None = None) -> list[suspects.KeptOut]:
    """The nodes kept out of the user's jobs now, the most blamed first."""
    entries = read_entries(runner, suspects_path(faults, runner))
    when = time.time() if now is None else now
    return suspects.kept_out(entries, when, faults.keep_out_hours * 3600, faults.keep_out_faults)


class Exclusion(NamedTuple):
    """What a submission does with the kept-out nodes: leaves out ``nodes``; ``refused`` stay
    in, for the job would not fit without them (or it names its nodes)."""

    nodes: list[str]
    refused: list[str]
    why: str = ""


def plan_exclusion(
    offenders: Sequence[suspects.KeptOut],
    partition_nodes: Sequence[str],
    needed: int,
    sbatch_args: Sequence[str],
) -> Exclusion:
    """Which kept-out nodes of the job's partition (``partition_nodes``; [] unknown: all)
    a job of ``needed`` nodes leaves out, the most blamed first, while the rest of the
    partition still holds it. None of them when its options name its nodes (``--nodelist``)."""
    names = [k.node for k in offenders if not partition_nodes or k.node in partition_nodes]
    if not names:
        return Exclusion([], [])
    nodelist, _ = take_option(list(sbatch_args), "--nodelist", "-w")
    if nodelist:
        return Exclusion([], names, "the job names its nodes (--nodelist)")
    fit = len(names) if not partition_nodes else max(len(partition_nodes) - needed, 0)
    if fit >= len(names):
        return Exclusion(names, [])
    why = f"the partition has {len(partition_nodes)} node(s) and the job needs {needed}"
    return Exclusion(names[:fit], names[fit:], why)


def with_exclusion(sbatch_args: Sequence[str], nodes: Sequence[str]) -> list[str]:
    """``sbatch_args`` with ``nodes`` added to its ``--exclude`` (one option)."""
    if not nodes:
        return list(sbatch_args)
    existing, rest = take_option(list(sbatch_args), "--exclude", "-x")
    joined = ",".join([existing, *nodes] if existing else nodes)
    return [*rest, f"--exclude={joined}"]


def partition_nodes(client: SlurmClient, partition: str) -> list[str]:
    """The nodes of ``partition`` ([] when Slurm does not say)."""
    try:
        out = client.run(["sinfo", "-h", "-N", "-p", partition, "-o", "%N"]).stdout
    except HpcJobsError:
        return []
    return list(dict.fromkeys(out.split()))
