"""Stragglers (hpcjobs/runtime/supervisor/pace.py): the rule, on made-up paces."""

from __future__ import annotations

from hpcjobs.contract.faultdefaults import STRAGGLER_WINDOW_S
from hpcjobs.runtime.supervisor.pace import (
    MIN_STEPS,
    PaceLog,
    Straggler,
    advanced,
    find_straggler,
    step_at,
)


def steady(
    rate: float, seconds: float = 120.0, start: float = 0.0, every: float = 5.0
) -> list[tuple[float, int]]:
    """A node's points: one agent cycle every ``every`` s, at ``rate`` steps per second."""
    points: list[tuple[float, int]] = []
    t = start
    while t <= start + seconds:
        points.append((t, int(rate * (t - start))))
        t += every
    return points


def test_step_at_and_advanced() -> None:
    points = [(0.0, 0), (5.0, 10), (10.0, 20)]
    assert step_at(points, -1) is None
    assert step_at(points, 7.0) == 10
    assert advanced(points, 0.0, 10.0) == 20
    assert advanced(points, -5.0, 10.0) is None  # not watched since then


def test_a_uniform_run_flags_nobody() -> None:
    points = {f"n{i}": steady(2.0) for i in range(1, 9)}
    assert find_straggler(points, 120.0) is None


def test_a_node_a_third_slower_is_flagged_with_its_figures() -> None:
    points = {"n1": steady(2.0), "n2": steady(2.0 / 1.5), "n3": steady(2.0)}
    found = find_straggler(points, 120.0)
    assert found is not None and found.node == "n2"
    assert found.peers == 120 and found.steps == 80 and found.window == STRAGGLER_WINDOW_S
    assert round(found.share, 2) == 0.67
    assert found.evidence() == "n2 at 0.67 of its peers' pace: 80 steps in 60 s, they 120"


def test_two_nodes_each_judged_against_the_other() -> None:
    points = {"n1": steady(1.0), "n2": steady(0.7)}
    found = find_straggler(points, 120.0)
    assert found is not None and found.node == "n2"


def test_ten_percent_slower_is_within_the_margin() -> None:
    points = {"n1": steady(2.0), "n2": steady(1.8), "n3": steady(2.0)}
    assert find_straggler(points, 120.0) is None


def test_a_slowdown_that_has_passed_is_no_straggler() -> None:
    # n2 crawled for the first half of the window (a long save), then kept pace again.
    slow: list[tuple[float, int]] = [(float(t), int(0.2 * t)) for t in range(0, 95, 5)]
    slow += [(float(t), slow[-1][1] + int(2.0 * (t - 90))) for t in range(95, 125, 5)]
    points = {"n1": steady(2.0), "n2": slow, "n3": steady(2.0)}
    assert find_straggler(points, 120.0) is None


def test_a_node_whose_ranks_stopped_is_no_straggler() -> None:
    # n1's ranks finished (or hang) 20 s ago: its pace drops, but it is not slow.
    points = {"n1": steady(2.0, 100), "n2": steady(1.5), "n3": steady(1.5)}
    assert find_straggler(points, 120.0) is None
    assert find_straggler(points, 110.0) is None  # within the last quarter, at full pace


def test_a_hang_is_never_taken_for_a_straggler_before_the_stall_watch_sees_it() -> None:
    # One step a second on every node; n2's rank hangs at t=100. Each look, every 5 s up to
    # the stall timeout, finds nobody slow: until its deficit reaches 20 % (12 s) the node is
    # not slow enough, and from 2 mean steps and a cycle after its last step it is not judged.
    hung = steady(1.0, 100.0, every=1.0)
    for now in range(100, 131):
        points = {
            "n1": steady(1.0, float(now), every=1.0),
            "n2": hung,
            "n3": steady(1.0, float(now), every=1.0),
        }
        assert find_straggler(points, float(now)) is None, now


def test_a_node_without_a_step_in_the_window_is_not_judged() -> None:
    # Its agent's summaries went stale (a loaded host): its last step is a minute old.
    points = {"n1": steady(1.0), "n2": [(0.0, 0), (50.0, 50)], "n3": steady(1.0)}
    assert find_straggler(points, 120.0) is None


def test_too_few_steps_to_tell_and_one_node_alone() -> None:
    # A step every 4 s: the peers' 15 steps in the window are too few to tell 20 % apart.
    points = {"n1": steady(1 / 4), "n2": steady(1 / 8)}
    assert find_straggler(points, 120.0) is None
    assert MIN_STEPS > 1
    assert find_straggler({"n1": steady(2.0)}, 120.0) is None


def test_not_watched_for_a_whole_window_not_judged() -> None:
    points = {"n1": steady(2.0, 50, start=70), "n2": steady(1.0, 50, start=70)}
    assert find_straggler(points, 120.0) is None


def test_a_flagged_node_and_a_ratio_of_zero() -> None:
    points = {f"n{i}": steady(2.0) for i in range(1, 7)}
    points["n2"], points["n4"] = steady(1.0), steady(1.2)
    first = find_straggler(points, 120.0)
    assert first is not None and first.node == "n2"  # the slowest first
    second = find_straggler(points, 120.0, spared=["n2"])
    assert second is not None and second.node == "n4"
    assert find_straggler(points, 120.0, ratio=0) is None


def test_a_node_within_the_scatter_of_many_is_not_flagged() -> None:
    # 40 nodes sharing a loaded host's CPUs: 13 to 30 steps a minute. The slowest is at 0.6
    # of the median, within the noise.
    paces = [13 + (i * 7) % 18 for i in range(40)]
    points = {f"n{i}": steady(pace / 60) for i, pace in enumerate(paces)}
    assert find_straggler(points, 120.0) is None
    # Forty of one pace and one at 0.67: it stands out.
    points = {f"n{i}": steady(0.5) for i in range(40)}
    points["slow"] = steady(0.5 / 1.5)
    found = find_straggler(points, 120.0)
    assert found is not None and found.node == "slow"


def test_all_ranks_held_to_one_pace_flags_nobody() -> None:
    # A program whose every step waits for a collective: one slow node slows every node.
    points = {f"n{i}": steady(1.3) for i in range(1, 5)}
    assert find_straggler(points, 120.0) is None


def test_the_log_keeps_a_window_and_counts_from_when_it_first_saw_a_node() -> None:
    log = PaceLog(window=60.0)
    log.note("n1", 40, reached=10.0, now=100.0)  # first seen at 100: counts from then
    assert log.points["n1"] == [(100.0, 40)]
    log.note("n1", 40, reached=10.0, now=105.0)  # no change, no point
    for t in range(110, 400, 5):
        log.note("n1", t, reached=float(t), now=float(t))
    assert log.points["n1"][0][0] < 395 - 60  # one point before the window stays
    assert len(log.points["n1"]) <= 2 * 60 / 5 + 3


def test_median_without_is_the_median_of_the_others() -> None:
    import random
    import statistics

    from hpcjobs.runtime.supervisor.pace import median_without

    rng = random.Random(7)
    for _ in range(300):
        values = sorted(rng.randrange(50) for _ in range(rng.randrange(2, 12)))
        value = rng.choice(values)
        others = list(values)
        others.remove(value)
        assert median_without(values, value) == statistics.median(others)


def test_straggler_share_without_peers() -> None:
    assert Straggler("n1", 3, 0, 60).share == 0.0
