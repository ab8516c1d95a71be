"""A program's own ``scontrol requeue`` of its job, made a request to its supervisor
(docs/requeue.md, "A framework's own requeue").

PyTorch Lightning (on SIGUSR1) and submitit (on its warning) save a checkpoint and then run
``scontrol requeue $SLURM_JOB_ID``. hpcjobs' jobs are not requeueable by Slurm (the chain goes
on in its standby, without Slurm's two-minute hold), so Slurm would refuse, and the framework's
request would be lost. The job's step therefore runs with a folder of the supervisor's first in
``PATH`` holding an ``scontrol`` of its own (:data:`SHIM`): ``scontrol requeue <this job>``
writes the request file the supervisor watches (:data:`ENV_REQUEST`) and waits, as the real
command's requeue would end the job, until the supervisor ends the step (at most
:data:`SHIM_WAIT_S`); it answers 0. Any other ``scontrol`` is the real one. The supervisor then
ends the step and the chain goes on: one continuation, never an error, never a second job.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

#: In the step's environment: the file ``scontrol requeue`` of the job itself writes.
ENV_REQUEST = "HPCJOBS_REQUEUE_REQUEST"
#: The folder, under the output folder's support folder, that holds the shim.
SHIM_DIR = "bin"
#: How long the shim waits for the supervisor to end the step.
SHIM_WAIT_S = 60

SHIM = f"""#!/bin/sh
# hpcjobs: 'scontrol requeue' of this job from inside it is a request to the job's
# supervisor, which continues the chain (docs/requeue.md); anything else is Slurm's scontrol.
me=$(cd "$(dirname "$0")" && pwd)
if [ "$#" = 2 ] && [ "$1" = requeue ] && [ -n "${{{ENV_REQUEST}:-}}" ] && {{
  [ "$2" = "${{SLURM_JOB_ID:-}}" ] ||
    [ "$2" = "${{SLURM_ARRAY_JOB_ID:-}}_${{SLURM_ARRAY_TASK_ID:-}}" ]; }}; then
  if (umask 077 && date +%s > "${{{ENV_REQUEST}}}") 2>/dev/null; then
    echo "hpcjobs: requeue of job $2 requested; its supervisor ends this run and continues it" >&2
    trap 'exit 0' TERM INT HUP
    i=0
    while [ "$i" -lt {SHIM_WAIT_S} ]; do sleep 1; i=$((i + 1)); done
    exit 0
  fi
fi
path=
rest=$PATH
while [ -n "$rest" ]; do
  dir=${{rest%%:*}}
  case $rest in *:*) rest=${{rest#*:}} ;; *) rest= ;; esac
  [ "$dir" = "$me" ] || path=${{path:+$path:}}$dir
done
PATH=$path exec scontrol "$@"
"""


def install(support: str) -> str:
    """Write :data:`SHIM` as ``<support>/bin/scontrol`` (mode 0700; replaced atomically when it
    differs) and return its folder."""
    folder = os.path.join(support, SHIM_DIR)
    path = os.path.join(folder, "scontrol")
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as handle:
        if handle.read() == SHIM:
            return folder
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".scontrol.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(SHIM)
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return folder


def request_continuation() -> bool:
    """Ask the job's supervisor to continue the run in a new job once this one ends: what
    ``scontrol requeue`` of the job does inside it, for Python code (the integrations,
    :class:`hpcjobs.runtime.resumable.Interrupted`). False outside an hpcjobs job."""
    path = os.environ.get(ENV_REQUEST, "")
    if not path:
        return False
    old = os.umask(0o077)
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(f"{int(time.time())}\n")
    except OSError:
        return False
    finally:
        os.umask(old)
    return True


def step_env(env: dict[str, str], folder: str, request: str) -> dict[str, str]:
    """The step's environment: ``folder`` first in ``PATH``, and the request file named."""
    path = env.get("PATH", "")
    return dict(env, PATH=f"{folder}:{path}" if path else folder, **{ENV_REQUEST: request})
