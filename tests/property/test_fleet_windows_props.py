"""Laws of the fleet windows: the signals depend on the observations and the watermarks,
not on the order observations arrive in between two watermarks, nor on a restart from the
fleet task's stored state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors.fleet import FleetSettings, FleetWindows, Observation
from loopguard_fleet.streams.processing.fleet import FleetTask
from tests.property.watermarks import by_watermark, every

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
    batches = by_watermark(obs, marks)
    shuffled = [rnd.sample(b, len(b)) for b in batches]
    assert run(batches, marks) == run(shuffled, marks)


@settings(max_examples=150, deadline=None)
@given(st.lists(observation, max_size=60), st.integers(1, 50))
def test_fine_watermarks_give_the_changes_of_one_final_watermark(obs, step_s) -> None:
    """A live worker advancing often and a replay advancing once agree, when nothing is late."""
    ordered = sorted(obs, key=lambda o: o.ts_ms)
    end = 600_000
    fine_marks = every(step_s, end)
    batches = by_watermark(ordered, fine_marks)
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


def fleet_records(steps: list[tuple[int, int, str, int, bool]]) -> list[dict[str, object]]:
    """Fleet topic records whose event time moves on by `gap` ms a record, `jitter` ms late."""
    out: list[dict[str, object]] = []
    now = 0
    for gap, jitter, sig, run, tick in steps:
        now += gap
        ts = max(0, now - jitter)
        out.append(
            {"type": "fleet_tick", "ts": ts}
            if tick
            else {
                "type": "fleet_observation",
                "signature": sig * 32,
                "tool": "read",
                "run_id": f"r{run}",
                "agent_id": f"a{run % 3}",
                "ts": ts,
                "streak": 1,
                "is_failure": True,
            }
        )
    return out


fleet_steps = st.lists(
    st.tuples(
        st.integers(0, 1_500) | st.integers(0, 1_500) | st.just(25_000),  # pauses now and then
        st.integers(0, 2_000),
        st.sampled_from("ab"),
        st.integers(0, 4),
        st.booleans(),
    ),
    min_size=20,
    max_size=100,
)


@settings(max_examples=200, deadline=None)
@given(fleet_steps, st.data())
def test_a_task_restored_from_its_state_and_fed_again_from_earlier_continues_as_if_it_never_stopped(
    steps, data
) -> None:
    """A worker restarted (its state written at offset k, its commit at j <= k) publishes after
    k exactly what one that never stopped publishes, and nothing for the records before k."""
    records = fleet_records(steps)
    settings_ = FleetSettings(enabled=True, window_seconds=20, min_runs=3)
    k = data.draw(st.integers(0, len(records)))
    j = data.draw(st.integers(0, k))
    live = FleetTask(settings_)
    changes = [live.feed(0, r, offset) for offset, r in enumerate(records)]
    first = FleetTask(settings_)
    for offset, r in enumerate(records[:k]):
        first.feed(0, r, offset)
    restarted = FleetTask(settings_)
    assert restarted.load(0, first.dump(0))
    again = [restarted.feed(0, r, offset) for offset, r in enumerate(records[j:], j)]
    assert again == [[]] * (k - j) + changes[k:]
    assert restarted.dump(0) == live.dump(0)
