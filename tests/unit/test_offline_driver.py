"""Replay is the worker's processing core: the same `RunDriver` steps, offline, same bytes out."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import Record, RunState
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore, Rejected, Replayer
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.wire.codec import run_key
from tests.passes import COMPILED
from tests.wire import InputRecord, RunScript

POLICY = load_policy(
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}
)
TTL_MS = 60_000


def _fleet() -> list[dict[str, Any]]:
    """Two looping runs, interleaved, one with a compaction, a redelivery and a late restart."""
    a, b = RunScript("a"), RunScript("b")
    events: list[dict[str, Any]] = []
    for _ in range(7):
        events += a.both("read", {"p": 1}, error="x") + b.both("ls", {"d": "/"}, error="y")
    events += [b.compaction(), *b.both("ls", {"d": "/"}, error="y"), events[3], a.end()]
    for i, ev in enumerate(events):
        ev["ts"] = 1_000_000 + i * 1000
    events += a.both("read", {"p": 1}, error="x")  # same run id, past the TTL: a fresh run
    events[-2]["ts"] = events[-1]["ts"] = 1_000_000 + 10 * TTL_MS
    return events


def _worker_bytes(events: list[dict[str, Any]]) -> list[bytes]:
    """What the worker's driver publishes for these events (keyed records, record time = ts)."""
    out = MemoryOutputs()
    limits = DriverLimits(1_048_576, 0, run_idle_ttl_ms=TTL_MS, run_cache_idle_ms=TTL_MS)
    driver = RunDriver(POLICY, limits, MemoryStore(), out, Metrics())
    msgs = [
        InputRecord("t", 0, i, ev["ts"] / 1000, run_key(ev["run_id"]), orjson.dumps(ev))
        for i, ev in enumerate(events)
    ]
    driver.apply(msgs)
    return out.decisions


def test_replay_publishes_exactly_what_the_worker_driver_publishes() -> None:
    events = _fleet()
    replayer = Replayer(POLICY, idle_ttl_ms=TTL_MS)
    got: list[bytes] = []
    for i, ev in enumerate(events):
        out = replayer.feed_line(i, orjson.dumps(ev))
        assert not isinstance(out, Rejected)
        got += replayer.outputs.decisions
    expected = _worker_bytes(events)
    assert [orjson.loads(v)["type"] for v in expected].count("command") == 5  # blocks of both runs
    assert got == expected
    assert (replayer.stats.events, replayer.stats.duplicates) == (len(events), 1)


def test_offline_lines_need_no_key_and_take_stream_time_from_ts() -> None:
    replayer = Replayer(POLICY, idle_ttl_ms=TTL_MS)
    assert replayer.stream_ms is None
    replayer.feed_line(1, b'{"type":"run_end","run_id":"r","event_id":"e","seq":1,"ts":5000}')
    replayer.feed_line(2, b'{"type":"run_end","run_id":"q","event_id":"e","seq":1,"ts":4000}')
    assert replayer.stream_ms == 5000  # the largest ts seen
    assert replayer.stats.rejected == 0


def test_without_a_ttl_stream_time_never_moves_and_no_run_is_stamped() -> None:
    replayer = Replayer(POLICY)
    replayer.feed_line(1, b'{"type":"tool_call","run_id":"r","event_id":"e","seq":1,"ts":5,'
                       b'"tool":"read","args":{}}')  # fmt: skip
    assert replayer.stream_ms is None
    assert replayer.driver.partition(0).live[b"r"].stamp_ms is None


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json", "not_json"),
        (b"[1]", "not_object"),
        (b'{"type":"tool_call","run_id":"r"}', "missing_event_id"),
    ],
    ids=["not_json", "not_an_object", "an_invalid_event"],
)
def test_a_refused_line_is_the_driver_dead_letter_as_a_rejected_line(
    line: bytes, reason: str
) -> None:
    replayer = Replayer(POLICY)
    got = replayer.feed_line(7, line)
    assert isinstance(got, Rejected)
    assert (got.line, got.reason) == (7, reason)
    assert replayer.outputs.dead_letters == []  # taken over by the rejection
    assert replayer.stats.rejected_reasons == {reason: 1}


@pytest.mark.skipif(
    COMPILED,
    reason="injects the failure by patching the driver's module; compiled, the driver "
    "calls the engine directly (the sources' pass runs it)",
)
def test_an_engine_failure_on_one_line_is_a_rejected_line_and_the_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import loopguard_fleet.streams.processing.driver as driver_module

    real = driver_module.apply_event

    def flaky(state: RunState, ev: Any, th: Any, *verdict: Any) -> Any:
        if ev.seq == 3:
            raise ZeroDivisionError("boom")
        return real(state, ev, th, *verdict)

    monkeypatch.setattr(driver_module, "apply_event", flaky)
    run = RunScript("r")
    replayer = Replayer(POLICY)
    outs = [
        replayer.feed_line(i, orjson.dumps(e))
        for i, e in enumerate(run.both("a", {}) + run.both("a", {}))
    ]
    assert [o.reason if isinstance(o, Rejected) else o for o in outs] == [
        [],
        [],
        "engine_error",
        [],
    ]
    assert replayer.states["r"].tool_seq == 4


def _full_state() -> RunState:
    rec = Record("read", "read:h", "c1", None, None, 3)
    return RunState(
        history=[rec],
        buckets={"k": 1},
        agent_id="main",
        guard_remaining=2,
        guard_seq=4,
        guard_obs=[("read", "read:h", "r:h")],
        guard_policy=(3, True, "sha256:0123456789abcdef"),
        tool_seq=5,
        life_seq=4,
        ended_seq=None,
        life_done=4,
        held=[(9, "run_end", None), (10, "compaction", (2, False, None))],
        critical_loops=1,
    )


def test_save_takes_every_field_and_restore_puts_each_back() -> None:
    defaults = RunState()
    for f in fields(RunState):  # every field differs from its default: none is dropped
        assert getattr(_full_state(), f.name) != getattr(defaults, f.name) or f.name == "ended_seq"
    state = _full_state()
    saved = state.save()
    for f in fields(RunState):
        setattr(state, f.name, getattr(defaults, f.name))
    state.ended_seq = 99
    state.restore(saved)
    assert state == _full_state()


@pytest.mark.parametrize("name", ["history", "buckets", "guard_obs", "held"])
def test_changing_a_state_in_place_leaves_what_it_saved_alone(name: str) -> None:
    state = _full_state()
    saved = state.save()
    container = getattr(state, name)
    if isinstance(container, dict):
        container["new"] = 2
    else:
        container.append(container[0])
    state.restore(saved)
    assert state == _full_state()


def test_the_recovery_abort_counts_as_a_detection_and_an_abort_run() -> None:
    run = RunScript("r")
    events: list[dict[str, Any]] = []
    for tool in ("read", "list"):  # two loops: critical 1 blocks, critical 2 ends the run
        for _ in range(20):
            events += run.both(tool, {"p": 1}, error="x")
        events.append(run.call(tool, {"p": 1}))
    policy = load_policy({"tools": {"loopDetection": {"enabled": True}}})
    metrics = Metrics()
    driver = RunDriver(
        policy.with_semantics("openclaw-2026.9"),
        DriverLimits(1_048_576, 0, run_idle_ttl_ms=TTL_MS, run_cache_idle_ms=TTL_MS),
        MemoryStore(),
        MemoryOutputs(),
        metrics,
    )
    driver.apply(
        [InputRecord("t", 0, i, None, b"r", orjson.dumps(ev)) for i, ev in enumerate(events)]
    )
    value = metrics.registry.get_sample_value
    exhausted = {"detector": "tool_loop_recovery_exhausted", "level": "critical", "mode": "enforce"}
    assert value("loopguard_detections_total", exhausted) == 1
    assert (
        value(
            "loopguard_detections_total",
            {"detector": "generic_repeat", "level": "critical", "mode": "enforce"},
        )
        == 2
    )
    assert value("loopguard_commands_total", {"command": "abort_run"}) == 1
    assert value("loopguard_commands_total", {"command": "block_call"}) == 2
