"""What each rank runs: ``python -u -m hpcjobs.submitit.task FOLDER`` loads the pickled call,
runs it and stores its result, as submitit's own runner does, with hpcjobs' signals,
continuations and done marker."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType

from hpcjobs.atomicfile import PRIVATE
from hpcjobs.contract import names
from hpcjobs.contract.jobenv import ENV_CHAIN_ROOT
from hpcjobs.jobs.chain import chain_file, read_chain
from hpcjobs.runtime.resumable import Interrupted, Resumable
from hpcjobs.runtime.stopflag import signal_from_env
from hpcjobs.runtime.supervisor.sigsafe import to_stderr
from hpcjobs.submitit.compat import slurm as submitit_slurm
from hpcjobs.submitit.compat import utils
from hpcjobs.submitit.pickles import link_pickle, load_submission, write_pickle

log = logging.getLogger(__name__)

#: The module every rank runs: ``python -u -m hpcjobs.submitit.task FOLDER``.
TASK_MODULE = "hpcjobs.submitit.task"


def run_task(folder: str | os.PathLike[str]) -> None:
    """Run this rank's share of a job: load the pickled call, run it, store its result.

    Like submitit's own runner, except that: the rank's output goes to
    ``<folder>/<job id>_<rank>_log.out/.err``; a continuation first links its pickle to the
    previous run's; signals are left to hpcjobs (a :class:`Resumable` gets its stop flag, a
    submitit ``Checkpointable`` is checkpointed by rank 0, anything else keeps the warning
    signal ignored); a run that stops with :class:`~hpcjobs.runtime.resumable.Interrupted` stores no
    result; and once every rank has a result the chain's done marker is written, so a run
    requeued during the grace window does not start over.
    """
    base = Path(folder)
    os.environ["SUBMITIT_FOLDER"] = str(base)
    os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")
    env = submitit_slurm.SlurmJobEnvironment()
    job_id, rank = str(env.job_id), int(env.global_rank)
    paths = utils.JobPaths(base, job_id=job_id, task_id=rank)
    redirect_output(paths.stdout, paths.stderr)
    _setup_logging(rank)
    root = os.environ.get(ENV_CHAIN_ROOT) or job_id
    if root != job_id:
        previous = previous_run(base, root, job_id)
        link_pickle(paths.submitted_pickle, base / f"{previous}_submitted.pkl")
    log.info(
        "job %s (chain %s), rank %d of %d on %s",
        job_id,
        root,
        rank,
        env.num_tasks,
        socket.gethostname(),
    )
    # An earlier run under this id (Slurm requeued it) may have left a result: it is stale.
    paths.result_pickle.unlink(missing_ok=True)
    delayed = load_submission(paths.submitted_pickle)
    _prepare(delayed, paths.submitted_pickle, rank)
    try:
        result = delayed.result()
        write_pickle(paths.result_pickle, ("success", result))
    except Exception:
        write_pickle(paths.result_pickle, ("error", traceback.format_exc()))
        log.error("the job's function raised an exception", exc_info=True)
        raise
    log.info("finished; result stored in %s", paths.result_pickle)
    mark_done_when_complete(base, job_id, int(env.num_tasks), root)


def previous_run(folder: Path, root: str, job_id: str) -> str:
    """The run that submitted ``job_id`` as its continuation (the chain's root if unknown)."""
    return read_chain(chain_file(folder, root)).predecessor(job_id) or root


def mark_done_when_complete(folder: Path, job_id: str, num_tasks: int, root: str) -> bool:
    """Write the chain's done marker once every task of this run has stored a result."""
    results = (
        utils.JobPaths(folder, job_id=job_id, task_id=t).result_pickle for t in range(num_tasks)
    )
    if not all(path.exists() for path in results):
        return False
    output_dir = Path(names.output_dir(os.environ) or folder)
    marker = output_dir / names.done_marker(root)
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT, PRIVATE)
    os.close(fd)
    return True


def redirect_output(stdout: Path, stderr: Path) -> None:
    """Send this process's stdout and stderr to files (appended: reruns keep older output)."""
    for stream, fd, path in ((sys.stdout, 1, stdout), (sys.stderr, 2, stderr)):
        stream.flush()
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE)
        os.dup2(target, fd)
        os.close(target)


def _prepare(delayed: utils.DelayedSubmission, pickle_path: Path, rank: int) -> None:
    """Signals and state for the callable, before it runs."""
    function = delayed.function
    if isinstance(function, Resumable):
        function.prepare()
    elif hasattr(function, "__submitit_checkpoint__") or hasattr(function, "checkpoint"):
        install_checkpoint_handler(delayed, pickle_path, rank)


def install_checkpoint_handler(
    delayed: utils.DelayedSubmission, pickle_path: Path, rank: int
) -> Callable[[int, FrameType | None], None]:
    """submitit's ``checkpoint()`` protocol on the warning signal and SIGTERM.

    Global rank 0 calls the callable's checkpoint method and pickles the call it returns for
    the next run, then exits without a result; the batch script decides whether a next run
    comes. Other ranks ignore the signals and are stopped when rank 0 exits.
    """
    handling = False

    def handle(signum: int, _frame: FrameType | None) -> None:
        nonlocal handling
        # Not through logging: its stream may be in the middle of a write (sigsafe).
        name = signal.Signals(signum).name
        if rank != 0 or handling:
            to_stderr(f"hpcjobs[rank {rank}]: {name} received; rank 0 checkpoints\n")
            return
        handling = True
        to_stderr(f"hpcjobs[rank {rank}]: {name} received: checkpointing\n")
        new = delayed._checkpoint_function()
        if new is None:
            to_stderr(
                f"hpcjobs[rank {rank}]: checkpoint() returned None: a next run starts from the "
                "submitted call\n"
            )
        else:
            new.set_timeout(delayed._timeout_min, delayed._timeout_countdown)
            write_pickle(pickle_path, new)
        raise Interrupted(f"checkpointed on {name}")

    for sig in {signal_from_env(), signal.SIGTERM}:
        signal.signal(sig, handle)
    return handle


def _setup_logging(rank: int) -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s %(name)s[rank {rank}]: %(message)s",
    )


def main(argv: Iterable[str] | None = None) -> None:
    """``python -m hpcjobs.submitit.task FOLDER``: run one rank of an executor job."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        sys.stderr.write("usage: python -m hpcjobs.submitit.task FOLDER\n")
        raise SystemExit(2)
    run_task(args[0])


if __name__ == "__main__":
    # Run under the module's own name, so that pickles and isinstance checks see one module.
    from hpcjobs.submitit.task import main as _main

    _main()
