"""Tool health (docs/fleet.md, "Tool health"): a tool fires at the end of a window in which
enough of the runs calling it failed or made no progress, resolves when it recovers, and keeps
its counts across a restart; what counts as bad; the metrics' bounded tool labels."""

from __future__ import annotations

import orjson

from loopguard_fleet.detectors.fleet import FleetSettings, Observation
from loopguard_fleet.detectors.fleet.settings import ToolHealthSettings
from loopguard_fleet.detectors.fleet.tools import (
    OTHER_TOOLS,
    ToolRatio,
    ToolUse,
    ToolWindows,
    tool_signal_id,
    tool_use_of,
    top_tools,
)
from loopguard_fleet.detectors.values import Thresholds, ToolCall
from loopguard_fleet.streams.processing.fleet import FleetTask, tool_use_record
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.processing.metrics import Metrics

T0 = 1_764_000_000_000  # a multiple of the 5 s hop: buckets start at T0, T0 + 5 s, …


def windows() -> ToolWindows:
    return ToolWindows(window_seconds=10, min_runs=4, error_ratio=0.5)


def uses(tool: str, runs: range, ts: int, bad: str | None = None) -> list[ToolUse]:
    return [ToolUse(tool, f"r{i}", f"a{i % 2}", ts + i, bad) for i in runs]  # type: ignore[arg-type]


def feed(w: ToolWindows, items: list[ToolUse], mark: int) -> list[object]:
    for u in items:
        w.observe(u, w.judged_ms)
    return list(w.advance(mark))


def test_a_tool_fires_at_the_end_of_a_window_where_enough_runs_fail() -> None:
    w = windows()
    items = uses("read", range(6), T0 + 1000) + uses("read", range(3), T0 + 2000, "error")
    items += uses("read", range(3, 4), T0 + 3000, "no_progress")
    assert feed(w, items, T0 + 4_999) == []  # no window closed yet
    [change] = feed(w, [], T0 + 5_000)  # the window [T0 - 5 s, T0 + 5 s) closes
    assert change.state == "firing"  # type: ignore[attr-defined]
    assert vars_of(change) == {
        "tool": "read",
        "at_ms": T0 + 5_000,
        "window_start_ms": T0 - 5_000,
        "runs": 6,
        "bad_runs": 4,
        "error_runs": 3,
        "no_progress_runs": 1,
        "agents": 2,
        "ratio": 0.6667,
        "first_seen_ms": T0 + 2000,
        "last_seen_ms": T0 + 3003,
        "sample_run_ids": ("r0", "r1", "r2"),
        "signal_id": tool_signal_id("read", T0 + 5_000),
    }
    assert w.latest["read"] == ToolRatio(6, 4, 3, 1, 0.6667)


def vars_of(change: object) -> dict[str, object]:
    keys = (
        "tool", "at_ms", "window_start_ms", "runs", "bad_runs", "error_runs",
        "no_progress_runs", "agents", "ratio", "first_seen_ms", "last_seen_ms",
        "sample_run_ids", "signal_id",
    )  # fmt: skip
    return {k: getattr(change, k) for k in keys}


def test_too_few_runs_or_a_low_ratio_never_fire() -> None:
    few = windows()  # three runs all failing: below minRuns 4
    assert feed(few, uses("exec", range(3), T0, "error"), T0 + 60_000) == []
    low = windows()  # 3 of 7 runs failing: below 0.5
    items = uses("exec", range(7), T0) + uses("exec", range(3), T0 + 10, "error")
    assert feed(low, items, T0 + 60_000) == []
    assert low.latest == {}  # the last window the watermark closed had no uses


def test_healthy_shared_reads_and_polls_are_uses_never_bad() -> None:
    th = Thresholds()
    call = ToolCall("read", {"path": "README.md"}, "c1", "read:abc")
    assert tool_use_of(call, th, "r1", "a1", T0, None) == ToolUse("read", "r1", "a1", T0)
    failing = Observation("s" * 32, "read", "r1", "a1", T0, 1, True)
    stuck = Observation("s" * 32, "read", "r1", "a1", T0, 5, False)
    assert tool_use_of(call, th, "r1", "a1", T0, failing).bad == "error"
    assert tool_use_of(call, th, "r1", "a1", T0, stuck).bad == "no_progress"
    # A fleet of runs re-reading the same README many times: uses only, never a signal.
    w = windows()
    items = [u for n in range(10) for u in uses("read", range(50), T0 + 100 * n)]
    assert feed(w, items, T0 + 60_000) == []


def test_a_tool_resolves_with_its_id_at_the_end_of_the_first_window_that_recovers() -> None:
    w = windows()
    bad = uses("read", range(5), T0 + 1000, "error")
    [fired] = feed(w, bad, T0 + 5_000)
    # Next window [T0, T0 + 10 s) still holds the failures of bucket T0: still firing.
    healthy = uses("read", range(5), T0 + 6_000) + uses("read", range(10, 13), T0 + 6_000)
    assert feed(w, healthy, T0 + 10_000) == []  # 5 bad of 8 runs
    [resolved] = feed(w, [], T0 + 15_000)  # [T0 + 5 s, T0 + 15 s): 8 healthy runs, 0 bad
    assert resolved.state == "resolved"  # type: ignore[attr-defined]
    assert resolved.signal_id == fired.signal_id  # type: ignore[attr-defined]
    assert (resolved.at_ms, resolved.runs, resolved.ratio) == (T0 + 15_000, 8, 0.0)  # type: ignore[attr-defined]


def test_a_firing_tool_without_any_later_use_resolves_and_fires_again_under_a_new_id() -> None:
    w = windows()
    [fired] = feed(w, uses("read", range(5), T0 + 1000, "error"), T0 + 5_000)
    [resolved] = feed(w, [], T0 + 60_000)
    assert (resolved.state, resolved.runs, resolved.first_seen_ms) == ("resolved", 0, None)  # type: ignore[attr-defined]
    assert resolved.at_ms == T0 + 15_000  # type: ignore[attr-defined]
    [again] = feed(w, uses("read", range(5), T0 + 61_000, "error"), T0 + 65_000)
    assert again.state == "firing" and again.signal_id != fired.signal_id  # type: ignore[attr-defined]


def test_late_and_capped_uses_are_dropped_and_counted() -> None:
    w = ToolWindows(window_seconds=10, min_runs=4, error_ratio=0.5, max_tools=1, max_runs=2)
    feed(w, uses("read", range(2), T0), T0 + 5_000)
    # Bucket T0 - 5 s lies in windows both judged; bucket T0 in [T0, T0 + 10 s), still open.
    assert not w.observe(ToolUse("read", "r9", None, T0 - 100), T0 + 5_000)
    assert w.dropped_late == 1
    assert w.observe(ToolUse("read", "r0", None, T0 + 6_000), T0 + 5_000)
    assert w.observe(ToolUse("read", "r1", None, T0 + 6_000), T0 + 5_000)
    assert not w.observe(ToolUse("read", "r2", None, T0 + 6_000), T0 + 5_000)  # 3rd run
    assert not w.observe(ToolUse("exec", "r0", None, T0 + 6_000), T0 + 5_000)  # 2nd tool
    assert w.dropped_full == 2


def test_a_restored_state_gives_the_same_changes() -> None:
    first = uses("read", range(6), T0 + 1000, "error") + uses("read", range(6, 9), T0 + 1500)
    later = uses("read", range(20), T0 + 7_000)
    one = windows()
    expected = feed(one, first, T0 + 5_000) + feed(one, later, T0 + 30_000)
    before = windows()
    feed(before, first, T0 + 5_000)
    restored = windows()
    assert restored.restore(orjson.loads(orjson.dumps(before.state())))
    assert feed(restored, later, T0 + 30_000) == expected[1:]
    assert [c.state for c in expected] == ["firing", "resolved"]  # type: ignore[attr-defined]
    other = ToolWindows(window_seconds=10, min_runs=4, error_ratio=0.6)
    assert not other.restore(before.state())  # kept with another errorRatio


def test_the_fleet_task_counts_tool_uses_in_its_partition_state() -> None:
    settings = FleetSettings(
        enabled=True, window_seconds=10, tool_health=ToolHealthSettings(True, 0.5, 4)
    )
    task = FleetTask(settings)
    for offset, u in enumerate(uses("read", range(5), T0 + 1000, "error")):
        assert task.feed(0, tool_use_record(u), offset) == []
    assert task.feed(0, {"type": "fleet_tool_use", "tool": "read", "ts": T0, "bad": "x"}) is None
    restored = FleetTask(settings)
    assert restored.load(0, task.dump(0))
    [change] = restored.feed(0, {"type": "fleet_tick", "ts": T0 + 7_000}, 6) or []
    assert (change.payload["kind"], change.payload["state"], change.payload["runs"]) == (
        "tool",
        "firing",
        5,
    )
    assert restored.tools_firing == 1 and restored.tool_ratios()["read"].bad_runs == 5


def test_a_worker_sends_one_healthy_use_per_run_tool_and_bucket_and_every_bad_one() -> None:
    on = FleetSettings(enabled=True, window_seconds=10, tool_health=ToolHealthSettings(True))
    stage = PartitionFleet(on)
    for n in range(4):
        stage.use(0, ToolUse("read", "r1", None, T0 + 100 * n), None)
    stage.use(0, ToolUse("read", "r1", None, T0 + 5_000), None)  # the next bucket
    stage.use(0, ToolUse("read", "r1", None, T0 + 5_100, "error"), None)
    stage.use(0, ToolUse("read", "r1", None, T0 + 5_200, "error"), None)
    assert [(u.ts_ms, u.bad) for _, u, _ in stage.take_uses()] == [
        (T0, None),
        (T0 + 5_000, None),
        (T0 + 5_100, "error"),
        (T0 + 5_200, "error"),
    ]
    off = PartitionFleet(FleetSettings(enabled=True))
    off.use(0, ToolUse("read", "r1", None, T0), None)
    assert off.take_uses() == []


def test_the_metrics_name_the_busiest_tools_and_fold_the_rest() -> None:
    ratios = {f"t{i:02}": ToolRatio(100 - i, i, i, 0, round(i / (100 - i), 4)) for i in range(25)}
    top = top_tools(ratios, k=20)
    assert list(top)[:20] == [f"t{i:02}" for i in range(20)]
    assert top[OTHER_TOOLS] == round(sum(range(20, 25)) / sum(100 - i for i in range(20, 25)), 4)
    metrics = Metrics()
    metrics.set_tool_ratios(top)
    metrics.set_tool_ratios({"t00": 0.0})  # the others leave the exposition
    body = metrics.render().decode()
    samples = [line for line in body.splitlines() if line.startswith("loopguard_fleet_tool_bad")]
    assert samples == ['loopguard_fleet_tool_bad_ratio{tool="t00"} 0.0']
