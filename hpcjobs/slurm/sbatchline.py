"""The ``sbatch`` command line hpcjobs runs, and the comment that marks its submissions.

Kept apart from :mod:`hpcjobs.slurm.client` so that a dry run can show the exact command line
without loading the client, its parsers and its retry policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: Prefix of the comment that carries a submission token.
TOKEN_PREFIX = "hpcjobs:"

#: Slurm's ``MaxArraySize`` when the cluster does not set it (or cannot be asked).
DEFAULT_MAX_ARRAY_SIZE = 1001


def comment_for(token: str) -> str:
    """The ``--comment`` value that marks a submission with ``token``."""
    return f"{TOKEN_PREFIX}{token}"


def sbatch_argv(
    script: str | Path, sbatch_args: Sequence[str], *, token: str, comment: str | None = None
) -> list[str]:
    """The exact ``sbatch`` command line :meth:`SlurmClient.submit` runs for one job."""
    marker = comment_for(token) + (f" {comment}" if comment else "")
    return ["sbatch", "--parsable", *sbatch_args, f"--comment={marker}", str(script)]


def comment_has_token(comment: str, token: str) -> bool:
    """True if a job's comment carries exactly ``token``."""
    marker = comment_for(token)
    return comment == marker or comment.startswith(marker + " ")
