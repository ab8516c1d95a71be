"""Job objects that follow their chain of runs: ``state``, ``done()``, ``result()``, logs and
``cancel()`` always speak for the newest run."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from hpcjobs.backoff import NO_RETRY
from hpcjobs.errors import HpcJobsError
from hpcjobs.jobs.chain import Chain, chain_file, read_chain
from hpcjobs.logger import logger
from hpcjobs.runner import LocalRunner
from hpcjobs.slurm.client import SlurmClient
from hpcjobs.slurm.statusquery import row_matches
from hpcjobs.submitit.compat import slurm as submitit_slurm
from hpcjobs.submitit.compat import utils
from hpcjobs.textlines import split_lines

log = logger(__name__)

R = TypeVar("R", covariant=True)

#: sacct states of a run that has not ended (submitit's list).
UNFINISHED = frozenset(
    {"READY", "PENDING", "RUNNING", "UNKNOWN", "REQUEUED", "COMPLETING", "PREEMPTED"}
)


class ChainWatcher(submitit_slurm.SlurmInfoWatcher):
    """submitit's sacct watcher, aware that hpcjobs jobs come back after some endings.

    ``NODE_FAIL`` counts as unfinished for :attr:`node_fail_grace_s` (Slurm requeues such a
    job under the same id), and runs that a continuation replaced can be retired so that they
    are no longer polled.
    """

    node_fail_grace_s = 120.0

    def __init__(self, delay_s: int = 60) -> None:
        super().__init__(delay_s=delay_s)
        self._node_fail_seen: dict[str, float] = {}

    def is_done(self, job_id: str, mode: str = "standard") -> bool:
        state = self.get_state(job_id, mode=mode).upper()
        if state.startswith("NODE_FAIL"):
            first = self._node_fail_seen.setdefault(job_id, time.monotonic())
            return time.monotonic() - first > self.node_fail_grace_s
        self._node_fail_seen.pop(job_id, None)
        return bool(super().is_done(job_id, mode="cache"))

    def retire(self, job_id: str) -> None:
        """Stop polling ``job_id`` (a run its continuation replaced)."""
        if job_id in self._registered:
            self._finished.add(job_id)


class HpcJob(submitit_slurm.SlurmJob[R]):
    """A submitit job that follows its continuations.

    ``job_id`` stays the first job's id; :attr:`job_ids` lists every run, and ``state``,
    ``done()``, ``result()``, ``results()``, ``exception()``, ``stdout()``, ``stderr()``,
    ``get_info()`` and ``cancel()`` speak for the newest one. For a job with several tasks
    (ranks), ``result()`` returns the result of global rank 0 and ``results()`` all of them.
    """

    watcher = ChainWatcher(delay_s=60)
    checkpoint_dir: Path | None = None

    def set_checkpoint_dir(self, path: Path) -> None:
        """Remember the job's checkpoint folder (known at submission)."""
        self.checkpoint_dir = path
        for sub in self._sub_jobs:
            assert isinstance(sub, HpcJob)
            sub.checkpoint_dir = path

    # ---- the chain -----------------------------------------------------------------------

    def chain(self) -> Chain:
        """The job's event log: every run, interruption and the final outcome."""
        return read_chain(chain_file(self.paths.folder, self.job_id))

    @property
    def job_ids(self) -> list[str]:
        """Every run's job id, the first one first (continuations have new ids)."""
        return self.chain().job_ids or [self.job_id]

    @property
    def current_job_id(self) -> str:
        """The newest run's job id (running, pending, or the last one to run)."""
        return self.job_ids[-1]

    def _current(self, chain: Chain) -> str:
        ids = chain.job_ids or [self.job_id]
        for old in ids[:-1]:
            self.watcher.retire(old)
        return ids[-1]

    # ---- state ---------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """The Slurm state of the newest run.

        It comes from accounting (submitit's sacct watcher). While accounting does not know the
        run yet (right after submission) the queue answers (one squeue, reused for
        :data:`QUEUE_STATE_TTL_S`): ``PENDING`` as a rule. A continuation that neither knows
        yet is ``PENDING`` too.
        """
        chain = self.chain()
        current = self._current(chain)
        state = str(self.watcher.get_state(current, mode="standard"))
        if chain.final is not None and state.upper() in UNFINISHED:
            # The chain has ended: what Slurm said before is out of date, ask once more.
            state = str(self.watcher.get_state(current, mode="force"))
        if state == "UNKNOWN":
            state = queue_state(current) or state
        if state == "UNKNOWN" and current != self.job_id:
            return "PENDING"
        return state

    def get_info(self, mode: str = "force") -> dict[str, str]:
        """sacct's information about the newest run."""
        info: dict[str, str] = self.watcher.get_info(self._current(self.chain()), mode=mode)
        return info

    def done(self, force_check: bool = False) -> bool:
        """Whether the job is over: its chain ended, or its newest run left Slurm for good."""
        if self._sub_jobs:
            return all(sub.done(force_check=force_check) for sub in self._sub_jobs)
        chain = self.chain()
        if chain.final is not None:
            return True
        current = self._current(chain)
        if not self.watcher.is_done(current, mode="force" if force_check else "standard"):
            return False
        # The run is over for Slurm; a continuation it submitted is in the log by now.
        return self._current(self.chain()) == current

    # ---- results and logs ----------------------------------------------------------------

    def result(self) -> R:
        """The result of the job's function (of global rank 0 for a multi-task job)."""
        if self._sub_jobs:
            return self.results()[0]
        return super().result()

    def _get_outcome_and_result(self) -> tuple[str, Any]:
        assert not self._sub_jobs, "this should not be called for a multi-task job"
        task = self.task_id or 0
        deadline = time.monotonic() + self._results_timeout_s
        while True:
            chain = self.chain()
            found = newest_result(self.paths.folder, chain.job_ids or [self.job_id], task)
            if found is not None:
                return found
            final = chain.final
            expected = final is None or final.cause == "finish"
            if not expected or time.monotonic() > deadline:
                raise utils.UncompletedJobError(self._missing_result_message(chain, task))
            time.sleep(1)  # a slow shared file system may not show the file yet

    def _missing_result_message(self, chain: Chain, task: int) -> str:
        final = chain.final
        how = f"the job ended: {final.cause}, {final.detail}" if final else "no end recorded"
        lines = [
            f"Job {self.job_id} (task {task}) produced no result ({how}; state {self.state}).",
            f"Runs: {', '.join(chain.job_ids or [self.job_id])}; logs in {self.paths.folder}.",
        ]
        tail = split_lines((self._get_logs_string("stderr") or "").strip())[-20:]
        if tail:
            lines += ["Last lines of the error stream:", *tail]
        return "\n".join(lines)

    def _get_logs_string(self, name: str) -> str | None:
        if name not in ("stdout", "stderr"):
            raise ValueError(f'unknown log "{name}", use "stdout" or "stderr"')
        texts = []
        for job_id in self.job_ids:
            paths = utils.JobPaths(self.paths.folder, job_id=job_id, task_id=self.task_id)
            path = paths.stdout if name == "stdout" else paths.stderr
            if path.exists():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
        return "".join(texts) if texts else None

    def cancel(self, check: bool = True) -> None:
        """Cancel the job: every run of its chain that is still queued or running."""
        try:
            SlurmClient(LocalRunner()).cancel(self.job_ids)
        except HpcJobsError:
            if check:
                raise
            log.warning("could not cancel job %s", self.job_id, exc_info=True)


#: Seconds an answer of the queue about one job is reused by :func:`queue_state`.
QUEUE_STATE_TTL_S = 2.0
_QUEUE_STATES: dict[str, tuple[float, str | None]] = {}


def queue_state(job_id: str, client: SlurmClient | None = None) -> str | None:
    """The state the queue (``squeue``) shows for ``job_id``; None if it does not show it.

    For a job that accounting does not know yet. One query, without retries (a state probe
    must not block), and reused for :data:`QUEUE_STATE_TTL_S` seconds so that polling
    ``job.state`` in a loop does not load the controller.
    """
    now = time.monotonic()
    seen = _QUEUE_STATES.get(job_id)
    if seen is not None and now - seen[0] < QUEUE_STATE_TTL_S:
        return seen[1]
    client = client or SlurmClient(LocalRunner(), policy=NO_RETRY, query_timeout_s=15.0)
    try:
        rows = client.queue([job_id])
    except HpcJobsError:
        log.debug("squeue for job %s failed", job_id, exc_info=True)
        return None
    state = next((r.state for r in rows if row_matches(job_id, r.job_id, r.raw_id)), None)
    for old in [k for k, (at, _) in _QUEUE_STATES.items() if now - at >= QUEUE_STATE_TTL_S]:
        del _QUEUE_STATES[old]
    _QUEUE_STATES[job_id] = (now, state)
    return state


def newest_result(folder: Path, job_ids: Sequence[str], task: int) -> tuple[str, Any] | None:
    """The result a chain of runs produced for ``task``, or None.

    A success is final whichever run wrote it (later runs find the done marker and stop at
    once). An error counts only from the newest run: an earlier run's error was followed by a
    continuation, which superseded it.
    """
    for position, job_id in enumerate(reversed(job_ids)):
        path = utils.JobPaths(folder, job_id=job_id, task_id=task).result_pickle
        if not path.exists():
            continue
        try:
            outcome, value = utils.pickle_load(path)
        except EOFError:  # being replaced right now; the caller polls again
            return None
        if outcome == "success" or position == 0:
            return str(outcome), value
    return None
