"""A base class for callables that survive preemption, time limits and node failures.

A :class:`Resumable` is what an executor job runs when it must be able to stop and come back.
It keeps no progress in itself: every run, the first one and each one after an interruption,
starts from the newest complete checkpoint in its checkpoint folder, never from state pickled
when the job was submitted. It gives the code inside ``__call__``:

* ``self.checkpoints``: the job's :class:`~hpcjobs.runtime.checkpoint.CheckpointDir`
  (``$HPCJOBS_CHECKPOINT_DIR``, one folder per job and per array task);
* ``self.stop``: a :class:`~hpcjobs.runtime.stopflag.StopFlag`, raised by the warning signal or
  SIGTERM; ``self.stop.should_stop()`` agrees across ``torch.distributed`` ranks;
* ``self.save(step, write)``: rank 0 writes a checkpoint of replicated state, every rank waits
  for it;
* ``self.interrupted()``: "checkpoint saved, stop here". The process exits at once without a
  result, so the job's continuation calls the callable again and it resumes from the folder.

Typical use::

    class Train(hpcjobs.Resumable):
        def __call__(self, steps: int) -> str:
            last = self.checkpoints.latest()
            start = 0 if last is None else last.step + 1
            for step in range(start, steps):
                ...
                self.note_progress(step)
                if self.stop.should_stop():          # every rank, same place in the loop
                    self.save(step, write_state)
                    self.interrupted()
            return digest

This module needs neither submitit nor torch; torch is used only when the program has
already imported it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from hpcjobs.contract.jobenv import ENV_CHECKPOINT_DIR, ENV_RESTART_COUNT
from hpcjobs.runtime.checkpoint import CheckpointDir, report_step
from hpcjobs.runtime.distributed import micro_batches
from hpcjobs.runtime.stopflag import StopFlag, initialised_dist
from hpcjobs.runtime.supervisor.requeuerequest import request_continuation

log = logging.getLogger(__name__)

#: Exit status of a run that stopped after saving its checkpoint: 0, so that srun reports no
#: failed task for a normal stop. The supervisor decides from the cause (preemption, time
#: limit) and from the request to continue that :class:`Interrupted` makes, not from this code.
EXIT_INTERRUPTED = 0

#: Instance attributes that only exist while the callable runs; never pickled.
_RUNTIME = ("_hpcjobs_checkpoints", "_hpcjobs_stop")


class Interrupted(SystemExit):
    """Raised by :meth:`Resumable.interrupted`: the run stops, its checkpoint is saved.

    It is a :class:`SystemExit`, so ``except Exception`` blocks do not swallow it, no result
    (success or failure) is recorded for the run, and the process exits with
    :data:`EXIT_INTERRUPTED`.
    """

    def __init__(self, message: str = "interrupted; checkpoint saved") -> None:
        super().__init__(EXIT_INTERRUPTED)
        self.message = message
        request_continuation()  # the run stops to go on: not a finished one

    def __str__(self) -> str:
        return self.message


class Resumable:
    """Base class for callables that resume from their checkpoint folder.

    Subclasses implement ``__call__``; their constructor takes whatever configuration the run
    needs (it is pickled with the job). Class attributes tune the behaviour:

    Attributes:
        keep_checkpoints: How many complete checkpoints to keep (at least 2).
        default_checkpoint_dir: The folder used when the job environment names none (a direct
            call outside a job).
    """

    keep_checkpoints: int = 3
    default_checkpoint_dir: str = "checkpoints"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")

    # ---- set up for a run ------------------------------------------------------------------

    def prepare(self) -> None:
        """Get ready to run: install the stop flag, open the checkpoint folder.

        The executor calls this before ``__call__``, as early as possible, so that a warning
        signal that arrives while the program is still importing is not lost. Calling it
        again does nothing.
        """
        if getattr(self, "_hpcjobs_stop", None) is None:
            self._hpcjobs_stop = _new_stop_flag()
        if getattr(self, "_hpcjobs_checkpoints", None) is None:
            self._hpcjobs_checkpoints = CheckpointDir(
                checkpoint_folder(self.default_checkpoint_dir), keep=self.keep_checkpoints
            )

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration only: the stop flag and folder belong to one run."""
        return {k: v for k, v in self.__dict__.items() if k not in _RUNTIME}

    # ---- what the run uses -----------------------------------------------------------------

    @property
    def checkpoints(self) -> CheckpointDir:
        """The job's checkpoint folder (``$HPCJOBS_CHECKPOINT_DIR`` inside a job)."""
        self.prepare()
        folder: CheckpointDir = self._hpcjobs_checkpoints
        return folder

    @property
    def stop(self) -> StopFlag:
        """The stop flag; ``stop.should_stop()`` is collective under ``torch.distributed``."""
        self.prepare()
        flag: StopFlag = self._hpcjobs_stop
        return flag

    @property
    def rank(self) -> int:
        """This process's global rank (0 outside distributed jobs)."""
        dist = initialised_dist()
        if dist is not None:
            return int(dist.get_rank())
        return _env_int("RANK", "SLURM_PROCID")

    @property
    def world_size(self) -> int:
        """How many ranks this run has (1 outside distributed jobs). An elastic job's runs may
        differ in it; :meth:`micro_batches` keeps the global batch the same."""
        dist = initialised_dist()
        if dist is not None:
            return int(dist.get_world_size())
        return _env_int("WORLD_SIZE", "SLURM_NTASKS") or 1

    def micro_batches(self, total: int) -> range:
        """This rank's share of a step of ``total`` micro-batches, the same global batch at any
        world size: sum the gradients over them, each loss times ``world_size / total``
        (:func:`hpcjobs.runtime.distributed.micro_batches`)."""
        return micro_batches(total, self.rank, self.world_size)

    @property
    def restart_count(self) -> int:
        """How many runs of this job came before this one (0 on the first run)."""
        return _env_int(ENV_RESTART_COUNT, "SLURM_RESTART_COUNT")

    def note_progress(self, step: int) -> None:
        """Record the last step reached (call it on every rank; cheap enough for every step).

        Rank 0 writes the checkpoint folder's ``PROGRESS``, which ``hpcjobs history`` uses for
        the work lost at each interruption; every rank writes its own progress report, which the
        batch script's stall watch and ``hpcjobs report`` read (docs/requeue.md, "Stalls").
        """
        if self.rank == 0:
            self.checkpoints.note_progress(step)
        else:
            report_step(step)

    def save(
        self,
        step: int,
        write: Callable[[Path], object],
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Save checkpoint ``step`` of replicated state: rank 0 writes, every rank waits.

        Call it on every rank at the same point. ``write(folder)`` writes the checkpoint's
        files into a temporary folder, which is published atomically once it returns.
        Under ``torch.distributed`` all ranks meet in a barrier afterwards, so none goes on
        (or exits) before the checkpoint is complete.
        """
        if self.rank == 0:
            with self.checkpoints.save(step, meta) as folder:
                write(folder)
        dist = initialised_dist()
        if dist is not None:
            dist.barrier()

    def interrupted(self, message: str = "stop signal: checkpoint saved") -> NoReturn:
        """Stop this run now, without a result; the next run resumes from the checkpoint.

        Save the checkpoint first (:meth:`save`). The process group, if any, is shut down.

        Raises:
            Interrupted: always (a :class:`SystemExit` with :data:`EXIT_INTERRUPTED`).
        """
        log.warning("%s; exiting so that the job continues from its checkpoint", message)
        dist = initialised_dist()
        if dist is not None:
            try:
                dist.destroy_process_group()
            except Exception as exc:  # a peer may already be gone; exiting matters more
                log.info("could not shut the process group down cleanly: %s", exc)
        raise Interrupted(message)


def checkpoint_folder(default: str = "checkpoints") -> Path:
    """Where a resumable run keeps its checkpoints.

    ``$HPCJOBS_CHECKPOINT_DIR`` inside hpcjobs jobs; ``<folder>/checkpoints/<job id>`` under
    plain submitit (``$SUBMITIT_FOLDER``); else ``default``.
    """
    value = os.environ.get(ENV_CHECKPOINT_DIR)
    if value:
        return Path(value)
    folder = os.environ.get("SUBMITIT_FOLDER")
    job_id = os.environ.get("SLURM_JOB_ID")
    if folder and job_id and "%" not in folder:
        array = os.environ.get("SLURM_ARRAY_JOB_ID")
        task = os.environ.get("SLURM_ARRAY_TASK_ID")
        name = f"{array}_{task}" if array and task else job_id
        return Path(folder) / "checkpoints" / name
    return Path(default)


def _new_stop_flag() -> StopFlag:
    """A stop flag, installed as the signal handler when that is possible (main thread)."""
    if threading.current_thread() is threading.main_thread():
        return StopFlag.install()
    log.warning("not in the main thread: the stop flag cannot catch signals here")
    return StopFlag()


def _env_int(*names: str) -> int:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


__all__ = [
    "EXIT_INTERRUPTED",
    "Interrupted",
    "Resumable",
    "checkpoint_folder",
]
