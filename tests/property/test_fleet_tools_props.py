"""Laws of tool health: its signals depend on the uses and the watermarks, not on the order
uses arrive in between two watermarks, nor on how often the watermark moves, nor on a restart
from the fleet task's stored state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.detectors.fleet.settings import ToolHealthSettings
from loopguard_fleet.detectors.fleet.tools import ToolUse, ToolWindows
from loopguard_fleet.streams.processing.fleet import FleetTask, tool_use_record
from tests.property.watermarks import by_watermark, every

use = st.builds(
    ToolUse,
    st.sampled_from(["read", "exec"]),
    st.integers(0, 12).map(lambda r: f"r{r}"),
    st.integers(0, 3).map(lambda a: f"a{a}"),
    st.integers(0, 400_000),
    st.sampled_from([None, None, "error", "no_progress"]),
)


def run(batches: list[list[ToolUse]], marks: list[int]) -> tuple[list[object], int]:
    w = ToolWindows(window_seconds=60, min_runs=3, error_ratio=0.5)
    out: list[object] = []
    for batch, mark in zip(batches, marks, strict=True):
        for u in batch:
            w.observe(u, w.judged_ms)
        out += w.advance(mark)
    return out, w.dropped_late


@settings(max_examples=150, deadline=None)
@given(
    st.lists(use, max_size=80),
    st.lists(st.integers(1, 500_000), min_size=1, max_size=6),
    st.randoms(),
)
def test_shuffling_uses_between_watermarks_changes_nothing(uses, marks, rnd) -> None:
    marks = sorted(set(marks))
    batches = by_watermark(uses, marks)
    shuffled = [rnd.sample(b, len(b)) for b in batches]
    assert run(batches, marks) == run(shuffled, marks)


@settings(max_examples=150, deadline=None)
@given(st.lists(use, max_size=80), st.integers(1, 50))
def test_fine_watermarks_give_the_changes_of_one_final_watermark(uses, step_s) -> None:
    ordered = sorted(uses, key=lambda u: u.ts_ms)
    end = 600_000
    fine_marks = every(step_s, end)
    batches = by_watermark(ordered, fine_marks)
    fine, late = run(batches, fine_marks)
    once, _ = run([ordered], [end])
    assert late == 0
    assert fine == once


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1_500) | st.just(25_000), use), min_size=10, max_size=80),
    st.data(),
)
def test_a_task_restored_from_its_state_continues_as_if_it_never_stopped(steps, data) -> None:
    """Tool counts survive a restart: restored from the state written at offset k and fed
    again from j <= k, the task publishes what one that never stopped publishes."""
    records: list[dict[str, object]] = []
    now = 0
    for gap, u in steps:
        now += gap
        records.append(tool_use_record(ToolUse(u.tool, u.run_id, u.agent_id, now, u.bad)))
    health = ToolHealthSettings(enabled=True, error_ratio=0.5, min_runs=3)
    settings_ = FleetSettings(enabled=True, window_seconds=20, tool_health=health)
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
