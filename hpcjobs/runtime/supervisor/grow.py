"""Growing back: an elastic job running below its full size keeps a **grower**, a pending job of
the chain that asks for more nodes than the run has (docs/requeue.md, "Growing back").

Slurm cannot add nodes to a running job that holds GPUs (job expansion refuses a job with
allocated GRES, measured on 22.05), so such a chain grows by moving: when Slurm starts the
grower and it holds more usable nodes than the run, it says so (a marker in the output folder,
:func:`.names.grow_ready`); the run claims the move (one atomic mkdir, which a grower that gives
up claims instead), gets the warning signal (the program checkpoints and exits, as before a
time limit), hands over, and the grower runs from that checkpoint. A job that can grow in place
(:mod:`.expansion`) makes way the same way once its helper allocation is granted.

:class:`GrowWatch` looks for the marker (or the grant) once every :data:`POLL_S` seconds (one
stat on the shared file system), and once a minute asks Slurm whether the grower is still
there, from a thread, while the run goes on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import NamedTuple

from .windup import StepControl, end_step

#: How often a run below its full size looks for its grower's marker.
POLL_S = 5.0
#: Every this many looks, the watch also asks Slurm whether the grower is still there (one
#: squeue of one job a minute): a grower that ended without taking over is replaced.
CHECK_EVERY = 12
#: Slurm states of a grower that may still take over.
WAITING = ("PENDING", "CONFIGURING", "RUNNING")


class GrowerLink(NamedTuple):
    """What the watch asks of the run about its grower: whether the grower is ready (its
    marker), the run's claim on the move (false when the grower gave up first, or the run is
    being ended), the grower's state in Slurm, and what to do when the run makes way (``warn``)
    or the grower is gone (``replace``, from a thread of its own)."""

    ready: Callable[[], bool]
    claim: Callable[[], bool]
    state: Callable[[], str]
    warn: Callable[[], None]
    replace: Callable[[], None]


class GrowWatch:
    """Watches the grower of one run (``step``). Once the grower is ready and this run claims
    the move, the run is warned, signalled to checkpoint and exit, and its steps are killed
    ``step.grace`` seconds later. A grower that left the queue without taking over is
    replaced."""

    def __init__(
        self, step: StepControl, grower: str, link: GrowerLink, every: float | None = None
    ) -> None:
        self.step = step
        self.grower = grower
        self.link = link
        self.every = POLL_S if every is None else every
        #: Set once this run claimed the move and was told to make way for the grower.
        self.started = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="grow-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        looks = unknown = 0
        while not self._stop.wait(self.every):
            if self.step.child.poll() is not None:
                return
            if self.link.ready():
                if not self.link.claim():  # the grower gave up first, or the run is being ended
                    self._replace()
                    return
                self.link.warn()
                self.started.set()
                self._make_way()
                return
            looks += 1
            if looks % CHECK_EVERY:
                continue
            state = self.link.state()
            unknown = 0 if state else unknown + 1
            # Gone: an end state, or not in the queue twice in a row (once may be a failed ask).
            if (state and state not in WAITING) or unknown >= 2:
                self._replace()
                return

    def _replace(self) -> None:
        """Replace the grower from a thread of its own: the watch ends at once (the run's end
        never waits for an sbatch)."""
        threading.Thread(target=self.link.replace, name="grow-replace", daemon=True).start()

    def _make_way(self) -> None:
        self.step.log(
            f"job {self.grower} holds the nodes for a larger run; sending SIG{self.step.warning} "
            f"so that this run checkpoints and hands over (its steps end in {self.step.grace} s)"
        )
        end_step(self.step, self._stop)
