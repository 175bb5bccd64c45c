"""`RunDriver.accept` (a value the caller decoded) validates, refuses and moves stream time
exactly as `RunDriver.decode` (the raw value) does: replay shards decode each line once."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import Event
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.wire.codec import decode_object, run_key
from tests.wire import InputRecord, RunScript

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})
LIMITS = DriverLimits(1_048_576, 64, run_idle_ttl_ms=60_000, run_cache_idle_ms=60_000)

_run = RunScript("r")
VALUES = {
    "a call": orjson.dumps({**_run.call("read", {"p": 1}), "ts": 5_000}),
    "a result": orjson.dumps({**_run.result("read", {"p": 1}, error="x"), "ts": 4_000}),
    "no run_id": b'{"type":"tool_call","event_id":"e","seq":1,"tool":"read","args":{},"ts":9000}',
    "a bad type": b'{"type":"nap","run_id":"r","event_id":"e","seq":3}',
    "a bad seq": b'{"type":"run_end","run_id":"r","event_id":"e","seq":"1"}',
}


def _driver(*, offline: bool) -> tuple[RunDriver, MemoryOutputs]:
    out = MemoryOutputs()
    return RunDriver(POLICY, LIMITS, MemoryStore(), out, Metrics(), offline=offline), out


def _record(value: bytes, key: bytes | None) -> InputRecord:
    return InputRecord("t", 0, 7, 12.5, key, value)


def _seen(ev: Event | None) -> Any:
    return None if ev is None else (ev.type, ev.run_id, ev.seq, ev.event_id)


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "worker"])
@pytest.mark.parametrize("key", [b"r", b"other", None], ids=["run key", "other key", "no key"])
@pytest.mark.parametrize("name", list(VALUES))
def test_accept_gives_the_event_the_dead_letter_and_the_stream_time_of_decode(
    name: str, key: bytes | None, offline: bool
) -> None:
    value = VALUES[name]
    by_decode, out_decode = _driver(offline=offline)
    by_accept, out_accept = _driver(offline=offline)
    msg = _record(value, key)
    ev = by_decode.decode(msg)
    accepted = by_accept.accept(msg, decode_object(value, LIMITS.max_message_bytes))
    assert _seen(accepted) == _seen(ev)
    assert out_accept.dead_letters == out_decode.dead_letters
    assert by_accept.partition(0).stream_ms == by_decode.partition(0).stream_ms


def test_the_worker_refuses_an_accepted_event_keyed_by_another_run() -> None:
    driver, out = _driver(offline=False)
    assert driver.accept(_record(VALUES["a call"], b"x"), orjson.loads(VALUES["a call"])) is None
    assert [orjson.loads(d)["reason"] for d in out.dead_letters] == ["key_mismatch"]
    assert driver.partition(0).stream_ms == 12_500  # the record time, as decode moves it


def test_an_accepted_event_steps_like_a_decoded_one() -> None:
    runs = RunScript("loop")
    events = [orjson.dumps(e) for _ in range(25) for e in runs.both("read", {"p": 1}, error="x")]
    got = []
    for via in ("decode", "accept"):
        driver, out = _driver(offline=True)
        for value in events:
            msg = _record(value, None)
            ev = driver.decode(msg) if via == "decode" else driver.accept(msg, orjson.loads(value))
            assert ev is not None
            step = driver.step(msg, run_key(ev.run_id), ev)
            assert step is not None
            driver.publish(run_key(ev.run_id), step.decisions, (msg.topic, msg.partition))
        got.append(out.decisions)
    assert got[0] == got[1]
    assert b"block_call" in b"".join(got[0])
