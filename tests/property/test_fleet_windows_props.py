"""Laws of the fleet windows: the signals depend on the observations and the watermarks,
not on the order observations arrive in between two watermarks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors.fleet import FleetWindows, Observation

observation = st.builds(
    lambda sig, run, agent, ts: Observation(sig * 32, "read", f"r{run}", f"a{agent}", ts, 1, True),
    st.sampled_from("abc"),
    st.integers(0, 12),
    st.integers(0, 3),
    st.integers(0, 400_000),
)


def run(batches: list[list[Observation]], marks: list[int]) -> tuple[list[object], int]:
    w = FleetWindows(window_seconds=60, min_runs=4)
    out: list[object] = []
    for batch, mark in zip(batches, marks, strict=True):
        for o in batch:
            w.observe(o)
        out += w.advance(mark)
    return out, w.dropped_late


@settings(max_examples=150, deadline=None)
@given(
    st.lists(observation, max_size=60),
    st.lists(st.integers(1, 500_000), min_size=1, max_size=6),
    st.randoms(),
)
def test_shuffling_observations_between_watermarks_changes_nothing(obs, marks, rnd) -> None:
    marks = sorted(set(marks))
    # Each observation arrives in the batch before the first watermark past it (or the last).
    batches: list[list[Observation]] = [[] for _ in marks]
    for o in obs:
        i = next((k for k, m in enumerate(marks) if o.ts_ms < m), len(marks) - 1)
        batches[i].append(o)
    shuffled = [rnd.sample(b, len(b)) for b in batches]
    assert run(batches, marks) == run(shuffled, marks)


@settings(max_examples=150, deadline=None)
@given(st.lists(observation, max_size=60), st.integers(1, 50))
def test_fine_watermarks_give_the_changes_of_one_final_watermark(obs, step_s) -> None:
    """A live worker advancing often and a replay advancing once agree, when nothing is late."""
    ordered = sorted(obs, key=lambda o: o.ts_ms)
    end = 600_000
    fine_marks = list(range(step_s * 1000, end, step_s * 1000)) + [end]
    batches: list[list[Observation]] = [[] for _ in fine_marks]
    for o in ordered:
        batches[next(k for k, m in enumerate(fine_marks) if o.ts_ms < m)].append(o)
    fine, late = run(batches, fine_marks)
    once, _ = run([ordered], [end])
    assert late == 0
    assert fine == once


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**9), st.lists(st.integers(0, 30_000), min_size=4, max_size=4))
def test_runs_within_half_a_window_fire_wherever_the_boundaries_fall(start, offsets) -> None:
    """minRuns runs no further apart than half a window (30 s of 60) share a window."""
    times = sorted(start + o for o in offsets)
    w = FleetWindows(window_seconds=60, min_runs=4)
    for i, ts in enumerate(times):
        w.observe(Observation("a" * 32, "read", f"r{i}", "a", ts, 1, True))
    changes = w.advance(times[-1] + 1)
    assert [(c.state, c.at_ms, c.runs) for c in changes] == [("firing", times[-1], 4)]
