"""What makes a training the same training: its identity, and the fingerprint of it that the
batch script carries and a checkpoint folder's ``RUN`` file names
(:mod:`hpcjobs.jobs.checkpointclaim` compares them). A module of its own, so that rendering a
script does not load the folder-claiming code."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def run_identity(
    command: Sequence[str],
    env: Mapping[str, str],
    container: Mapping[str, Any] | None,
    workdir: str,
) -> dict[str, Any]:
    """What makes a run the same run: command, job variables, container, working directory."""
    return {
        "command": list(command),
        "env": dict(sorted(env.items())),
        "container": dict(container) if container else None,
        "workdir": workdir,
    }


def fingerprint(identity: Mapping[str, Any]) -> str:
    """A short, stable digest of :func:`run_identity`."""
    body = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:20]
