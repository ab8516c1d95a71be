"""The names of what a chain keeps in its output folder, defined once (docs/requeue.md,
"Files"). The supervisor writes them; ``history``, ``report``, ``status``, the planner and the
executor find them here."""

from __future__ import annotations

from collections.abc import Mapping

#: The output folder, in the job's environment (the batch script exports it). Not
#: ``HPCJOBS_OUTPUT_DIR``: that one overrides the site's ``slurm.output_dir`` for any hpcjobs
#: command, a job's own included.
ENV_OUTPUT_DIR = "HPCJOBS_JOB_OUTPUT_DIR"


def output_dir(env: Mapping[str, str]) -> str:
    """The output folder ``env`` names ("" if it names none)."""
    return env.get(ENV_OUTPUT_DIR, "")


#: The folder, in the output folder, that holds the supervisor's zipapp.
SUPPORT_DIR = ".hpcjobs"


def chain_log(root: str) -> str:
    """The chain's event log (:mod:`.eventlog`)."""
    return f"chain-{root}.jsonl"


def progress_dir(root: str) -> str:
    """The node agents' progress summaries and histories."""
    return f"progress-{root}"


def gpu_dir(root: str) -> str:
    """The node agents' GPU samples."""
    return f"gpu-{root}"


def done_marker(root: str) -> str:
    """Written once the chain's program finished: no later run starts it again."""
    return f"DONE-{root}"


def capture_dir(root: str) -> str:
    """The ranks' captured output, read for fault signatures."""
    return f"capture-{root}"


def takeover_claim(job: str) -> str:
    """Made (one atomic mkdir) by whoever logs how the run before ``job`` ended, or, for a
    grower ``job``, by whoever settles the move to it: the run it grows or the grower itself."""
    return f".takeover-{job}"


def grow_ready(job: str) -> str:
    """Made by grower ``job`` once it holds more nodes than the run it grows and waits for
    it: that run's grow watch looks for it (:mod:`.grow`)."""
    return f".grow-ready-{job}"
