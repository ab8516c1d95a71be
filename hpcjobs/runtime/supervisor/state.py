"""What the supervisor knows of the run now: its phase and the signals that reached it, in
one small type changed through its methods (docs/index.md, "The supervisor").

Phases, in order, for each run of the job::

    BEGIN ──launch──▶ RUN ──step exited──▶ FINISH ──decided──▶ END
                                              │
                                              └──runs again inside the job──▶ RUN

The signal handler calls :meth:`RunState.record` and nothing else; the main thread acts on what
was recorded (:meth:`RunState.take_pending`). The watches' threads only mark a warning they
sent (:meth:`RunState.mark_warning`).
"""

from __future__ import annotations

import collections
import time

#: The phases of a run (:attr:`RunState.phase`).
BEGIN, RUN, FINISH, END = "begin", "run", "finish", "end"

#: What :attr:`RunState.signal` says of the run: no stop signal, the warning (Slurm's, a
#: watch's or a grower's), or Slurm's SIGTERM (the job is being ended).
NO_SIGNAL, WARNING, TERM = "", "warning", "term"


class RunState:
    """The run's phase and signals (one per supervisor; reset for each run by
    :meth:`new_run`)."""

    def __init__(self) -> None:
        self.phase = BEGIN
        self.signal = NO_SIGNAL
        #: When Slurm's SIGTERM came (monotonic; 0: not yet). Kept across runs in one job.
        self.term_at = 0.0
        #: Signals received and not yet acted on: (name without ``SIG``, epoch seconds).
        self.pending: collections.deque[tuple[str, float]] = collections.deque()
        #: The warning came and is still to be delivered to the program.
        self.warn_due = False
        #: SIGTERM was passed on to the program (its end, from Slurm, or a requeue request).
        self.term_sent = False
        #: The run's first signal is in the event log.
        self.signal_logged = False
        #: Why a run whose program exited 0 was taken as finished or not
        #: (:func:`.decide.exit_rule`).
        self.end_rule = ""
        #: Slurm was told not to requeue this job (Requeue=0).
        self.requeue_off = False

    def record(self, name: str, warning: str) -> None:
        """The signal handler's one call: SIG``name`` came (``warning``: the job's warning
        signal, without ``SIG``; a SIGTERM is the warning where it is TERM)."""
        if name == "TERM" and warning != "TERM":
            self.term_at = self.term_at or time.monotonic()
            self.signal = self.signal or TERM
        else:
            self.signal = WARNING
        self.pending.append((name, time.time()))

    def take_pending(self) -> list[tuple[str, float]]:
        """The signals recorded since the last call, oldest first."""
        taken = []
        while self.pending:
            taken.append(self.pending.popleft())
        return taken

    def mark_warning(self) -> None:
        """A watch warned the run (a SIGTERM seen before stays the run's signal)."""
        self.signal = self.signal or WARNING

    @property
    def ending(self) -> bool:
        """Whether the run is being ended: a stop signal came, or it is past its RUN phase."""
        return bool(self.signal) or self.phase in (FINISH, END)

    def new_run(self) -> None:
        """The next run inside this job begins. Slurm's SIGTERM, once it came, stays: the next
        run ends at once."""
        if not self.term_at:
            self.signal = NO_SIGNAL
            self.term_sent = False
        self.signal_logged = False
        self.phase = BEGIN
