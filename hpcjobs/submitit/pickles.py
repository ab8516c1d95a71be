"""The pickle files between the submitter and the ranks: written atomically and privately,
linked from a continuation to the run it continues, and waited for when a rank starts."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from hpcjobs.atomicfile import PRIVATE
from hpcjobs.submitit.compat import utils

#: How long a task waits for its pickle (the job may start before submission has moved it).
PICKLE_WAIT_S = 60.0


def write_pickle(path: Path, value: Any) -> None:
    """Pickle ``value`` to ``path`` atomically, readable by the owner only.

    A symlink at ``path`` is replaced, never written through: a continuation's pickle is a
    link to an earlier run's, which must keep its content.
    """
    tmp = path.with_name(f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE))  # private from birth
    try:
        utils.cloudpickle_dump(value, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def link_pickle(link: Path, target: Path) -> None:
    """Make ``link`` a relative symlink to ``target`` (atomically; kept if it exists)."""
    if link.is_symlink() or link.exists():
        return
    relative = os.path.relpath(target, link.parent)
    tmp = link.with_name(f".{link.name}.tmp-{socket.gethostname()}-{os.getpid()}")
    os.symlink(relative, tmp)
    os.replace(tmp, link)


def load_submission(path: Path) -> utils.DelayedSubmission:
    """The pickled call at ``path``, waiting up to :data:`PICKLE_WAIT_S` for it to appear."""
    deadline = time.monotonic() + PICKLE_WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {PICKLE_WAIT_S:g} s for {path}, which never appeared")
        time.sleep(0.5)
    delayed: utils.DelayedSubmission = utils.DelayedSubmission.load(path)
    return delayed
