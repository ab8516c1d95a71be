"""Stragglers: a node that stays slower than its peers (docs/faults.md, "Stragglers").

The rule, defined here once. Each node's pace is the steps its slowest rank advanced over the
last :data:`~hpcjobs.contract.faultdefaults.STRAGGLER_WINDOW_S` seconds (the site's
``faults.straggler_window_s``), read from the node agents' summaries the stall watch reads
anyway (O(nodes) per agent cycle, nothing per rank). A node is a straggler when, with at least
:data:`MIN_NODES` nodes judged:

- its pace over the window is below a share of its peers' (the site's
  ``faults.straggler_ratio``, by default
  :data:`~hpcjobs.contract.faultdefaults.STRAGGLER_RATIO`; the peers' pace is the median of the
  other nodes' paces: with two nodes, the other one), and so is its pace over the newer half of
  the window (a slowdown that has already passed, a checkpoint save say, is no straggler);
- with three nodes or more, it also stands out of their spread: its steps are more than
  :data:`SPREAD` scaled median absolute deviations of all the nodes' steps below its peers'
  median (Google's goodput tooling flags step times beyond median + 3 MAD). Where the nodes'
  paces scatter (131 sandbox nodes sharing 2 cores: 13 to 25 steps a minute), a node at 0.6 is
  within the noise and not flagged; on a cluster whose nodes keep one pace, the spread is small
  and the ratio decides;
- its peers advanced at least :data:`MIN_STEPS` steps over the window (fewer: the figures are
  too coarse to tell 20 % apart, and the node is not judged);
- it was watched for the whole window, and is still advancing at its own pace: it made a step
  in the window, and its newest step came within two of its mean step intervals over the
  window and one agent cycle (``every``). A node whose ranks stopped is a stall (the stall
  watch's business), the end of the program there, or an agent whose summaries are late (the
  watch skips a stale summary): it looks slower, and is not a straggler.

Why these figures: 0.8 flags a node whose steps take a quarter longer or more (NVIDIA's
resiliency extension reports at 0.7 of its per-rank scores; Falcon detects shifts of 10 % and
more); over 60 s (about ten agent cycles) one late cycle or a save does not cross it; ranks
that all advance together (a program whose every step waits for a collective) have one pace on
every node, and no node is flagged: the whole run is slow, not one node. Pure:
``tests/unit/test_pace.py``.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from hpcjobs.contract.faultdefaults import STRAGGLER_RATIO, STRAGGLER_WINDOW_S

#: The fewest steps the peers must advance in a window for a node to be judged: a step every
#: 3 s or faster at the default window. With fewer, 20 % is a step or two, and a hang of a few
#: steps would look like a slow node before the stall watch finds it.
MIN_STEPS = 20
#: The fewest nodes judged at once (one node has no peers).
MIN_NODES = 2
#: How far below the peers, in scaled median absolute deviations of the nodes' steps, a
#: straggler must be (with three nodes or more).
SPREAD = 3.0
#: A median absolute deviation times this estimates a standard deviation (normal data).
MAD_SCALE = 1.4826

#: What is done with a straggler (the ``action`` of its ``straggler`` event): swapped for a
#: spare node of the job at the program's next checkpoint, or (no spare) left out of the
#: chain's next run while this one goes on.
SWAP, KEEP_OUT = "swap", "keep_out"


class Straggler(NamedTuple):
    """A node slower than its peers: its steps and theirs (the median) over ``window`` s."""

    node: str
    steps: int
    peers: float
    window: float

    @property
    def share(self) -> float:
        """Its pace as a share of its peers'."""
        return self.steps / self.peers if self.peers else 0.0

    def evidence(self) -> str:
        """``n2 at 0.67 of its peers' pace: 40 steps in 60 s, they 60``."""
        return (
            f"{self.node} at {self.share:.2f} of its peers' pace: {self.steps} steps in "
            f"{self.window:.0f} s, they {self.peers:g}"
        )


def step_at(points: Sequence[tuple[float, int]], when: float) -> int | None:
    """The step a node had reached at ``when``, from its ``(time reached, step)`` points in
    time order; None before the first."""
    found = None
    for reached, step in points:
        if reached > when:
            break
        found = step
    return found


def advanced(points: Sequence[tuple[float, int]], start: float, end: float) -> int | None:
    """Steps advanced between ``start`` and ``end`` (None: not watched since ``start``)."""
    before, after = step_at(points, start), step_at(points, end)
    if before is None or after is None:
        return None
    return after - before


def find_straggler(
    points: Mapping[str, Sequence[tuple[float, int]]],
    now: float,
    ratio: float = STRAGGLER_RATIO,
    window: float = STRAGGLER_WINDOW_S,
    spared: Sequence[str] = (),
    every: float = 5.0,
) -> Straggler | None:
    """The slowest node that is a straggler at ``now`` (see the module docs), among those not in
    ``spared`` (already flagged in this run); ``points``: each node's ``(time reached, step)``
    in time order, its first point when it was first watched; ``every``: the seconds between
    two agent cycles."""
    if ratio <= 0:
        return None
    whole = _paces(points, now - window, now)
    if len(whole) < MIN_NODES:
        return None
    half = _paces(points, now - window / 2, now)
    ranked, ranked_half = sorted(whole.values()), sorted(half.values())
    noise = SPREAD * spread(ranked) if len(ranked) >= 3 else 0.0
    found: list[Straggler] = []
    for node, steps in whole.items():
        if node in spared or steps <= 0:
            continue  # no step in the window: a stall, a stale agent, the program's end
        if now - points[node][-1][0] > 2 * window / steps + every:
            continue  # stopped since: the same
        peers = median_without(ranked, steps)
        if peers < MIN_STEPS or steps >= ratio * peers or steps >= peers - noise:
            continue
        recent = half.get(node)
        if recent is None or len(ranked_half) < MIN_NODES:
            continue
        if recent >= ratio * median_without(ranked_half, recent):
            continue
        found.append(Straggler(node, steps, peers, window))
    return min(found, key=lambda s: (s.share, s.node), default=None)


def spread(ranked: Sequence[int]) -> float:
    """The scaled median absolute deviation of ``ranked`` (sorted, not empty)."""
    middle = statistics.median(ranked)
    return MAD_SCALE * statistics.median(sorted(abs(x - middle) for x in ranked))


def median_without(ranked: Sequence[int], value: int) -> float:
    """The median of ``ranked`` (sorted) without one occurrence of ``value``: a node's peers'
    median in O(log nodes), so that a look at 1,000 nodes stays O(nodes log nodes)."""
    skip = bisect.bisect_left(ranked, value)
    count = len(ranked) - 1

    def other(index: int) -> int:
        return ranked[index if index < skip else index + 1]

    if count % 2:
        return float(other(count // 2))
    return (other(count // 2 - 1) + other(count // 2)) / 2


def _paces(
    points: Mapping[str, Sequence[tuple[float, int]]], start: float, end: float
) -> dict[str, int]:
    paces = {}
    for node, seen in points.items():
        steps = advanced(seen, start, end)
        if steps is not None:
            paces[node] = steps
    return paces


class PaceLog:
    """Each node's ``(time reached, step)`` points, kept for the window and a margin:
    O(nodes × window / agent cycle) in memory."""

    def __init__(self, window: float = STRAGGLER_WINDOW_S) -> None:
        self.window = window
        self.points: dict[str, list[tuple[float, int]]] = {}

    def note(self, node: str, step: int, reached: float, now: float) -> None:
        """Node ``node``'s slowest rank is at ``step``, reached at ``reached``."""
        seen = self.points.setdefault(node, [])
        if seen and seen[-1][1] == step:
            return
        if not seen:
            # Watched from now on: the step it had then counts from now.
            reached = max(reached, now)
        seen.append((max(reached, seen[-1][0]) if seen else reached, step))
        keep = now - 2 * self.window
        while len(seen) > 2 and seen[1][0] < keep:
            seen.pop(0)
