"""Fleet counts in event-time windows and their signals (docs/fleet.md, "Windows and
signals"): timestamps are passed explicitly, no broker, no clock."""

from __future__ import annotations

import tracemalloc

from loopguard_fleet.detectors.fleet import MAX_SIGNATURES, FleetWindows, Observation, signal_id

SIG = "a" * 32
OTHER = "b" * 32


def obs(run: str, ts_s: float, sig: str = SIG, agent: str | None = "main") -> Observation:
    return Observation(sig, "read", run, agent, int(ts_s * 1000), 1, True)


def fleet(*observations: Observation, min_runs: int = 5, cap: int = 100) -> FleetWindows:
    w = FleetWindows(window_seconds=60, min_runs=min_runs, max_signatures=cap)
    for o in observations:
        w.observe(o)
    return w


def test_a_signature_fires_at_the_event_time_of_its_min_runs_th_run_once_the_watermark_passes() -> (
    None
):
    w = fleet(*[obs(f"r{i}", 70 + i, agent=f"a{i % 2}") for i in range(6)])
    assert w.advance(74_000) == []  # the fifth run is at 74.0 s: not passed yet
    [change] = w.advance(74_001)
    assert (change.state, change.at_ms, change.signature) == ("firing", 74_000, SIG)
    # Counted as of its event time: the sixth run came later, calls are a resolution's.
    assert (change.runs, change.agents, change.calls) == (5, 2, None)
    # Windows of 60 s start every 30 s: the earliest one that holds the runs names them.
    assert (change.window_start_ms, change.window_end_ms) == (30_000, 90_000)
    assert (change.first_seen_ms, change.last_seen_ms) == (70_000, 74_000)
    assert change.sample_run_ids == ("r0", "r1", "r2")
    assert change.signal_id == signal_id(SIG, 74_000)
    assert w.signal_of(SIG) == change.signal_id
    assert w.advance(100_000) == []  # a state change only, not once per watermark


def test_a_burst_across_a_window_boundary_fires_at_its_min_runs_th_run() -> None:
    # Five runs in 5 s around the 60 s boundary: two windows [0, 60) and [60, 120) would see
    # two and three; the window [30, 90) sees all five.
    w = fleet(*[obs(f"r{i}", t) for i, t in enumerate([58, 59, 61, 62, 63])])
    [change] = w.advance(63_001)
    assert (change.state, change.at_ms, change.runs) == ("firing", 63_000, 5)
    assert (change.window_start_ms, change.window_end_ms) == (30_000, 90_000)


def test_one_run_repeating_many_times_is_one_run() -> None:
    w = fleet(*[obs("r1", 1 + i) for i in range(20)], *[obs(f"r{i}", 30) for i in range(2, 5)])
    assert w.advance(59_000) == []  # four runs
    w.observe(obs("r9", 59.5))
    assert [c.state for c in w.advance(59_600)] == ["firing"]


def test_the_result_does_not_depend_on_the_arrival_order_within_a_window() -> None:
    ordered = [obs(f"r{i}", 5 + 3 * i, agent=f"a{i}") for i in range(8)]
    one = fleet(*ordered).advance(120_000)
    two = fleet(*reversed(ordered)).advance(120_000)
    assert one == two and [c.state for c in one] == ["firing", "resolved"]


def test_it_stays_firing_while_windows_reach_min_runs_and_resolves_after_one_that_does_not() -> (
    None
):
    first = [obs(f"r{i}", 50 + i) for i in range(5)]
    second = [obs(f"s{i}", 70 + i) for i in range(5)]
    third = [obs("t1", 130)]
    w = fleet(*first, *second, *third)
    fired = w.advance(60_000)
    assert [c.state for c in fired] == ["firing"]
    assert w.advance(120_000) == []  # the second window reached 5 runs too
    # [90, 150) is the first window after the firing one without 5 runs: t1 alone.
    [resolved] = w.advance(180_000)
    assert (resolved.state, resolved.at_ms, resolved.runs, resolved.calls) == (
        "resolved",
        150_000,
        1,
        1,
    )
    assert resolved.signal_id == fired[0].signal_id
    assert (resolved.window_start_ms, resolved.window_end_ms) == (90_000, 150_000)
    assert w.signal_of(SIG) is None


def test_a_window_without_any_observation_resolves_it() -> None:
    w = fleet(*[obs(f"r{i}", 10 + i) for i in range(5)])
    assert [c.state for c in w.advance(20_000)] == ["firing"]
    assert w.advance(89_999) == []  # [0, 60) reached 5 runs; [30, 90) has none
    [resolved] = w.advance(90_000)
    assert (resolved.state, resolved.at_ms, resolved.runs, resolved.tool) == (
        "resolved",
        90_000,
        0,
        "read",
    )


def test_after_resolving_it_fires_again_with_a_new_signal_id() -> None:
    again = [obs(f"x{i}", 200 + i) for i in range(5)]
    w = fleet(*[obs(f"r{i}", 10 + i) for i in range(5)], *again)
    changes = w.advance(300_000)
    assert [(c.state, c.at_ms) for c in changes] == [
        ("firing", 14_000),
        ("resolved", 90_000),
        ("firing", 204_000),
        ("resolved", 270_000),
    ]
    assert changes[0].signal_id != changes[2].signal_id


def test_below_min_runs_nothing_fires() -> None:
    w = fleet(
        *[obs(f"r{i}", 10 + i) for i in range(4)], *[obs(f"s{i}", 10, OTHER) for i in range(3)]
    )
    assert w.advance(600_000) == []
    assert w.buckets == {}  # closed windows leave memory


def test_a_late_observation_is_dropped_and_counted() -> None:
    w = fleet(obs("r1", 10))
    w.advance(91_000)  # [0, 60) and [30, 90) are closed
    assert w.observe(obs("r2", 59)) is False
    assert w.dropped_late == 1
    assert w.observe(obs("r3", 61)) is True  # [60, 120) is open


def test_distinct_signatures_per_window_are_capped_but_a_firing_one_is_still_counted() -> None:
    w = fleet(*[obs(f"r{i}", 10 + i) for i in range(5)], cap=3)
    assert [c.state for c in w.advance(30_000)] == ["firing"]
    for n in range(4):
        w.observe(obs("z", 61, sig=f"{n:032x}"))  # fills the next window
    assert w.dropped_full == 1
    assert all(w.observe(obs(f"s{i}", 62 + i)) for i in range(5))  # the firing one
    assert w.advance(120_000) == []  # still firing: its count was kept
    assert w.dropped_full == 1


def test_an_attacker_making_every_call_a_new_signature_stays_under_64_mb() -> None:
    w = FleetWindows(window_seconds=300, min_runs=5)
    tracemalloc.start()
    try:
        for half in (0, 150):  # both buckets of the window [0, 300)
            for i in range(MAX_SIGNATURES + 5):  # one run, one agent, one call per signature
                sig = f"{half}-{i}".rjust(32, "0")
                run, agent = f"run-{half}-{i}", f"agent-{i % 50}"
                w.observe(obs(run, half + 1 + i / 1000, sig=sig, agent=agent))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(w.buckets[b]) for b in (0, 150_000)] == [MAX_SIGNATURES, MAX_SIGNATURES]
    assert w.dropped_full == 10
    assert peak < 64 * 2**20  # the keys (signatures, run ids) included
