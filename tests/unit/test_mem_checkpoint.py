"""A checkpoint's taken runs are copied lazily: a run's next event keeps the values taken
before it changes them, so what is written is the state at the take, whatever ran between
the take and the write; a run written before its next event is never copied."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loopguard.config import load_policy
from loopguard.detectors import RunState
from loopguard.streams.audit.replay import MemoryOutputs, MemoryStore
from loopguard.streams.processing import DriverLimits, RunDriver
from loopguard.streams.processing import driver as driver_module
from loopguard.streams.processing.metrics import Metrics
from loopguard.streams.processing.stored import decode_stored, encode_stored
from loopguard.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})
TTL_MS = 60_000
KEY = run_key("r")


def _driver(store: MemoryStore) -> RunDriver:
    limits = DriverLimits(1_048_576, 0, run_idle_ttl_ms=TTL_MS, run_cache_idle_ms=TTL_MS)
    return RunDriver(POLICY, limits, store, MemoryOutputs(), Metrics())


def _feed(driver: RunDriver, events: list[dict[str, Any]], at_s: float = 1_000.0) -> None:
    records = [InputRecord("t", 0, i, at_s, KEY, orjson.dumps(ev)) for i, ev in enumerate(events)]
    driver.apply(records)


def _calls(run: RunScript, n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i in range(n):
        events += run.both("read", {"path": f"/f{i % 2}"}, error="missing")
    return events


def _value(state: RunState, stamp_ms: int | None) -> bytes:
    return encode_stored(state, stamp_ms)


@pytest.mark.parametrize("events_between", [0, 1, 6], ids=["none", "one event", "six events"])
def test_a_checkpoint_writes_each_run_as_it_was_taken(events_between: int) -> None:
    store = MemoryStore()
    driver = _driver(store)
    run = RunScript("r")
    _feed(driver, _calls(run, 4))
    live = driver.partitions[0].live[KEY]
    expected = _value(RunState.from_json(live.state.to_json()), live.stamp_ms)

    taken = driver.take_dirty()
    _feed(driver, _calls(run, 3)[:events_between], at_s=1_001.0)
    for t in taken:
        driver.write_taken(t)

    assert store.get(0, KEY) == expected
    assert live.taken is None  # nothing is kept for a written run
    assert (KEY in driver.partitions[0].dirty) == (events_between > 0)


def test_a_run_written_before_its_next_event_is_never_copied() -> None:
    driver = _driver(MemoryStore())
    _feed(driver, _calls(RunScript("r"), 2))
    [taken] = driver.take_dirty()
    assert taken.saved is None and taken.state is taken.run.state
    driver.write_taken(taken)
    assert taken.saved is None and taken.run.taken is None


def test_the_next_event_keeps_the_taken_values_once() -> None:
    driver = _driver(MemoryStore())
    run = RunScript("r")
    _feed(driver, _calls(run, 2))
    [taken] = driver.take_dirty()
    history = list(taken.state.history)
    _feed(driver, _calls(run, 2), at_s=1_001.0)
    assert taken.saved is not None and taken.saved[0] == history
    assert taken.run.taken is None  # the later events keep nothing more
    assert len(taken.run.state.history) == len(history) + 2


def test_a_run_reset_past_the_ttl_after_the_take_writes_the_state_taken() -> None:
    store = MemoryStore()
    driver = _driver(store)
    run = RunScript("r")
    _feed(driver, _calls(run, 3))
    live = driver.partitions[0].live[KEY]
    expected = _value(RunState.from_json(live.state.to_json()), live.stamp_ms)
    [taken] = driver.take_dirty()
    later = 1_000.0 + TTL_MS / 1000 + 5  # idle past the TTL: the next event starts afresh
    _feed(driver, _calls(run, 1), at_s=later)
    assert live.state is not taken.state and live.taken is None
    driver.write_taken(taken)
    assert store.get(0, KEY) == expected


def test_an_engine_failure_after_the_take_leaves_the_taken_values_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The failed event's state is restored from the values it saved, which the take keeps
    too: the take gets its own copy, so later events cannot reach it."""
    store = MemoryStore()
    driver = _driver(store)
    run = RunScript("r")
    _feed(driver, _calls(run, 3))
    live = driver.partitions[0].live[KEY]
    expected = _value(RunState.from_json(live.state.to_json()), live.stamp_ms)
    [taken] = driver.take_dirty()

    real = driver_module.apply_event

    def fail(state: RunState, *args: Any) -> Any:
        state.history.append(state.history[0])  # a partial update, then the bug
        raise RuntimeError("engine bug")

    monkeypatch.setattr(driver_module, "apply_event", fail)
    _feed(driver, _calls(run, 1)[:1], at_s=1_001.0)
    monkeypatch.setattr(driver_module, "apply_event", real)
    _feed(driver, _calls(run, 2), at_s=1_002.0)  # mutates the restored lists in place
    driver.write_taken(taken)
    assert store.get(0, KEY) == expected


def test_runs_given_back_keep_nothing_and_are_taken_again() -> None:
    store = MemoryStore()
    driver = _driver(store)
    _feed(driver, _calls(RunScript("r"), 2))
    taken = driver.take_dirty()
    driver.untake(taken)
    assert taken[0].run.taken is None and driver.has_dirty
    [again] = driver.take_dirty()
    driver.write_taken(again)
    state, _ = decode_stored(store.get(0, KEY) or b"")
    assert state.to_json() == again.run.state.to_json()
