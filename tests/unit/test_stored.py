"""The worker's table value: engine state and stream time in a versioned envelope; bare states
of formats 1-2 (the stamp inside) still load and are written back enveloped."""

from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import InvalidState, RunState, parse_event, process_event
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.stored import Stored, decode_stored, encode_stored
from loopguard_fleet.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})
TTL_MS = 60_000


def _state(n: int = 3) -> RunState:
    state = RunState()
    run = RunScript("r")
    th = POLICY.for_agent(None)
    for _ in range(n):
        for ev in run.both("read", {"p": 1}, error="x"):
            process_event(state, parse_event(ev), th)
    return state


def _driver(store: MemoryStore) -> RunDriver:
    limits = DriverLimits(1_048_576, 0, run_idle_ttl_ms=TTL_MS, run_cache_idle_ms=TTL_MS)
    return RunDriver(POLICY, limits, store, MemoryOutputs(), Metrics())


@pytest.mark.parametrize("stamp", [None, 0, 1_764_606_000_123])
def test_a_value_round_trips_state_and_stamp(stamp: int | None) -> None:
    state = _state()
    stored = decode_stored(encode_stored(state, stamp))
    assert stored == Stored(state, stamp)
    assert stored.state.to_json() == state.to_json()


def test_the_envelope_holds_the_state_document_unchanged() -> None:
    state = _state()
    doc = json.loads(encode_stored(state, 7))
    assert doc == {"w": 1, "m": 7, "r": json.loads(state.to_json())}
    assert "m" not in json.loads(encode_stored(state, None))


def test_the_engine_state_no_longer_holds_a_stamp() -> None:
    doc = json.loads(_state().to_json())
    assert doc["v"] == 3 and len(doc["s"]) == 4


def test_a_format_2_value_migrates_with_its_stamp() -> None:
    state = _state()
    v2 = json.loads(state.to_json())
    tool, life, ended, done = v2["s"]
    v2.update(v=2, s=[tool, life, ended, 1234, done])
    old = orjson.dumps(v2)
    assert decode_stored(old) == Stored(state, 1234)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        b'{"w": 2, "r": {"v": 3}}',  # an envelope from a newer release
        b'{"w": 1, "m": "soon", "r": {"v": 3}}',
        b'{"w": 1, "m": 1}',  # no state
        b'{"v": 9}',
    ],
)
def test_anything_else_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidState):
        decode_stored(raw)


def test_the_driver_reads_an_old_value_and_writes_it_back_enveloped() -> None:
    """A worker upgraded over an old changelog: the bare format-2 state and its stamp take
    effect (the TTL counts from the old stamp), and the next checkpoint writes the envelope."""
    store = MemoryStore()
    key = run_key("r")
    v2 = json.loads(_state().to_json())
    tool, life, ended, done = v2["s"]
    v2.update(v=2, s=[tool, life, ended, 1_000_000, done])
    store.put(0, key, orjson.dumps(v2))
    driver = _driver(store)
    loaded = driver.load(0, key)
    assert loaded.stamp_ms == 1_000_000 and loaded.state.tool_seq == tool

    run = RunScript("r")
    run.seq = tool
    ev = run.call("read", {"p": 1})
    driver.forget([0])
    driver.apply([InputRecord("t", 0, 0, 1_000_001.5, key, orjson.dumps(ev))])
    driver.checkpoint()
    written = store.get(0, key)
    assert written is not None and json.loads(written)["w"] == 1
    state, stamp = decode_stored(written)
    assert stamp == 1_000_001_500 and state.tool_seq == tool + 1


def test_an_old_values_stamp_still_expires_the_run() -> None:
    store = MemoryStore()
    key = run_key("r")
    v2 = json.loads(_state().to_json())
    v2.update(v=2, s=[*v2["s"][:3], 1_000_000, v2["s"][3]])
    store.put(0, key, orjson.dumps(v2))
    driver = _driver(store)
    driver.partition(0).advance(1_000_000 + TTL_MS + 1)
    assert driver.load(0, key).state == RunState()  # idle past the TTL since its old stamp


def test_a_value_holds_no_more_memory_than_its_bytes() -> None:
    """The encoder's output buffer is not kept alive by a stored value (orjson's is 4 KB+)."""
    state = _state(1)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        values = [encode_stored(state, 1) for _ in range(50)]
        grown = tracemalloc.take_snapshot().compare_to(before, "filename")
    finally:
        tracemalloc.stop()
    per_value = sum(stat.size_diff for stat in grown) / len(values)
    assert per_value < len(values[0]) + 200
