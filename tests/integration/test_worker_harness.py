"""The detection agent's batch logic through a harness: fake table and topics, no broker.

Covers what is awkward to provoke on a real broker: an engine bug on one event, idle expiry
in stream time, one state write per run per checkpoint, duplicates, idle runs leaving the
cache.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

import loopguard_fleet.streams.processing.driver as driver_module
from loopguard_fleet.config import load_policy
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors import RunState, parse_event, process_event
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.stored import decode_stored, encode_stored
from loopguard_fleet.streams.worker.agent import RunProcessor
from tests.wire import InputRecord

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})


class FakeEvent:
    """A Faust event: only `.message` is used (weak-referenceable like the real one)."""

    def __init__(self, message: InputRecord) -> None:
        self.message = message


@dataclass
class FakeTopic:
    """Collects what the agent sends."""

    sent: list[tuple[bytes | None, Any]] = field(default_factory=list)

    def send_soon(
        self, *, key: bytes | None, value: bytes, partition: int | None = None
    ) -> asyncio.Future[None]:
        self.sent.append((key, orjson.loads(value)))
        delivered = asyncio.get_running_loop().create_future()
        delivered.set_result(None)  # delivered at once: the commit gate awaits it
        return delivered


class FakeTable(dict[bytes, bytes]):
    """A dict that counts writes and reads."""

    writes = 0
    reads = 0

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.writes += 1
        super().__setitem__(key, value)

    def get(self, key: bytes, default: Any = None) -> Any:
        self.reads += 1
        return super().get(key, default)


class FakeBuffer:
    """Faust's producer buffer: messages queued by table writes; its sender hands them on in
    queue order, so the drain's mark (`pending.put_nowait`) comes after every one of them."""

    size = 0
    drains = 0

    def __init__(self) -> None:
        self.pending = self
        self.sending: set[asyncio.Future[None]] = set()

    def put_nowait(self, mark: Any) -> None:
        self.drains += 1
        self.size = 0
        sent = asyncio.ensure_future(mark.message.channel.publish_message(mark))
        self.sending.add(sent)
        sent.add_done_callback(self.sending.discard)


class FakeProducer:
    flushes = 0

    def __init__(self) -> None:
        self.buffer = FakeBuffer()

    async def flush(self) -> None:
        self.flushes += 1


@dataclass
class FakeApp:
    producer: FakeProducer = field(default_factory=FakeProducer)


@dataclass
class Harness:
    processor: RunProcessor
    table: FakeTable
    control: FakeTopic
    dead: FakeTopic
    metrics: Metrics
    app: FakeApp
    offset: int = 0

    def event(self, obj: dict[str, Any], ts_ms: int = 0, partition: int = 0) -> FakeEvent:
        self.offset += 1
        key = str(obj.get("run_id", "")).encode()
        msg = InputRecord("tc", partition, self.offset, ts_ms / 1000, key, orjson.dumps(obj))
        return FakeEvent(msg)

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def make_harness(settings: Settings) -> Harness:
    """A processor over fake wiring, with these settings."""

    @dataclass
    class Wiring:
        app: FakeApp
        control: FakeTopic
        dead_letter: FakeTopic
        table: FakeTable

    wiring = Wiring(FakeApp(), FakeTopic(), FakeTopic(), FakeTable())
    metrics = Metrics()
    processor = RunProcessor(wiring, settings, POLICY, metrics)  # type: ignore[arg-type]
    return Harness(processor, wiring.table, wiring.control, wiring.dead_letter, metrics, wiring.app)


@pytest.fixture
def harness() -> Iterator[Harness]:
    yield make_harness(Settings(run_idle_ttl_seconds=60))


def calls(run_id: str, n: int, start: int = 1) -> list[dict[str, Any]]:
    """n identical failing read calls (call + result) from seq `start`."""
    out = []
    for i in range(start, start + 2 * n, 2):
        base = {"run_id": run_id, "tool": "read", "args": {"path": "/a"}, "tool_call_id": f"c{i}"}
        out.append({"type": "tool_call", "event_id": f"e{i}", "seq": i, **base})
        out.append(
            {"type": "tool_result", "event_id": f"e{i + 1}", "seq": i + 1, **base, "error": "no"}
        )
    return out


async def test_an_engine_bug_costs_one_event_not_the_run(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = driver_module.apply_event

    def flaky(state: RunState, ev: Any, th: Any, *verdict: Any) -> Any:
        if ev.event_id == "e5":
            raise ZeroDivisionError("boom")
        return real(state, ev, th, *verdict)

    monkeypatch.setattr(driver_module, "apply_event", flaky)
    events = calls("r1", 4)
    await harness.processor.process([harness.event(e) for e in events])
    await harness.processor.before_commit()

    assert [(d["reason"], d["run_id"]) for _, d in harness.dead.sent] == [("engine_error", "r1")]
    expected = RunState()
    th = POLICY.for_agent(None)
    for e in events:
        if e["event_id"] != "e5":
            process_event(expected, parse_event(e), th)
    assert decode_stored(harness.table[b"r1"]).state == expected
    assert harness.sample("loopguard_events_rejected_total", reason="engine_error") == 1.0


async def test_each_run_is_written_once_per_checkpoint(harness: Harness) -> None:
    events = [harness.event(e) for e in calls("a", 5) + calls("b", 5)]
    await harness.processor.process(events[:10])
    await harness.processor.process(events[10:])
    assert harness.table.writes == 0  # nothing committed yet, nothing written
    await harness.processor.before_commit()
    assert harness.table.writes == 2
    assert harness.sample("loopguard_events_total", type="tool_call") == 10.0
    assert harness.sample("loopguard_runs_active") == 2.0


async def test_redelivered_events_are_counted_and_change_nothing(harness: Harness) -> None:
    events = calls("r", 3)
    await harness.processor.process([harness.event(e) for e in events])
    await harness.processor.before_commit()
    before = (dict(harness.table), list(harness.control.sent))
    await harness.processor.process([harness.event(e) for e in events])
    await harness.processor.before_commit()
    assert (dict(harness.table), harness.control.sent) == before
    assert harness.sample("loopguard_duplicates_total") == 6.0


async def test_idle_runs_expire_in_stream_time_not_wall_time(harness: Harness) -> None:
    await harness.processor.process([harness.event(e, ts_ms=1_000) for e in calls("old", 12)])
    await harness.processor.before_commit()
    assert b"old" in harness.table
    # Another run's event 61 s later (stream time) on the same partition sweeps "old" away.
    await harness.processor.process([harness.event(calls("new", 1)[0], ts_ms=62_000)])
    assert b"old" not in harness.table
    assert harness.sample("loopguard_runs_active") == 1.0
    # "old" comes back: it starts clean, so its 12 earlier failures do not count.
    harness.control.sent.clear()
    await harness.processor.process([harness.event(calls("old", 1, 100)[0], ts_ms=62_001)])
    assert harness.control.sent == []


async def test_a_verdict_flushes_the_producer_at_once(harness: Harness) -> None:
    ev = calls("v", 1)[0] | {"want_verdict": True}
    await harness.processor.process([harness.event(ev)])
    assert [d["type"] for _, d in harness.control.sent] == ["verdict"]
    assert harness.app.producer.flushes == 1


async def test_a_rebalance_drops_the_cache_and_the_table_copy_takes_over(harness: Harness) -> None:
    await harness.processor.process([harness.event(e) for e in calls("r", 3)])
    await harness.processor.before_commit()
    harness.table[b"r"] = encode_stored(RunState(), None)  # another owner's newer copy
    harness.processor.forget_partitions({0})
    await harness.processor.process([harness.event(calls("r", 1, 1)[0])])
    # seq 1 is new again for the table's (empty) state: the stale cached run is gone.
    assert harness.sample("loopguard_duplicates_total") == 0.0
    assert harness.sample("loopguard_runs_active") == 1.0


async def test_a_checkpoint_drains_the_producer_buffer_before_the_commit(harness: Harness) -> None:
    await harness.processor.process([harness.event(e) for e in calls("q", 2)])
    harness.app.producer.buffer.size = 3  # changelog records still queued in Faust's buffer
    await harness.processor.before_commit()
    assert (harness.app.producer.buffer.size, harness.table.writes) == (0, 1)
    assert harness.app.producer.buffer.drains >= 1


async def _quiet_then_busy(h: Harness) -> list[Any]:
    """Run "q" loops 6 calls, goes quiet for 70 s of stream time while "b" works, loops on."""
    await h.processor.process([h.event(e, ts_ms=1_000) for e in calls("q", 6)])
    await h.processor.before_commit()
    await h.processor.process([h.event(e, ts_ms=71_000) for e in calls("b", 1)])
    await h.processor.before_commit()
    quiet = (h.sample("loopguard_runs_cached"), h.sample("loopguard_runs_active"))
    await h.processor.process([h.event(e, ts_ms=72_000) for e in calls("q", 8, 13)])
    assert (h.sample("loopguard_runs_cached"), h.sample("loopguard_runs_active")) == (2.0, 2.0)
    await h.processor.before_commit()
    return [quiet, [d for _, d in h.control.sent], dict(h.table)]


async def test_an_idle_run_leaves_the_cache_and_comes_back_unchanged() -> None:
    settings = {"run_idle_ttl_seconds": 1_800}
    evicting = make_harness(Settings(run_cache_idle_seconds=60, **settings))
    keeping = make_harness(Settings(run_cache_idle_seconds=1_000, **settings))
    (cached, active), sent, table = await _quiet_then_busy(evicting)
    assert (cached, active) == (1.0, 2.0)  # "q" is held in the table only, still counted
    # One miss per run when first seen, and one for the partition's stored policy switches.
    reads_before_return = 3
    assert evicting.table.reads == reads_before_return + 1  # "q" read back once
    (kept_cached, _), kept_sent, kept_table = await _quiet_then_busy(keeping)
    assert kept_cached == 2.0 and keeping.table.reads == reads_before_return
    # The same decisions (the loop's count went on from 6) and the same stored states.
    assert sent == kept_sent
    assert any(d.get("count", 0) > 10 for d in sent), sent
    assert table == kept_table


async def test_an_evicted_run_is_read_back_and_its_new_events_written() -> None:
    h = make_harness(Settings(run_idle_ttl_seconds=1_800, run_cache_idle_seconds=0))
    await h.processor.process([h.event(e, ts_ms=1_000) for e in calls("w", 2)])
    h.processor.checkpoint()  # writes "w", then evicts it (idle time 0)
    assert h.sample("loopguard_runs_cached") == 0.0
    await h.processor.process([h.event(e, ts_ms=2_000) for e in calls("w", 1, 5)])
    assert h.sample("loopguard_runs_cached") == 1.0  # read back; dirty until the next checkpoint
    h.processor.checkpoint()
    state = decode_stored(h.table[b"w"]).state
    assert [r.seq for r in state.history] == [2, 4, 6]


async def test_an_evicted_run_still_expires_after_its_ttl() -> None:
    h = make_harness(Settings(run_idle_ttl_seconds=120, run_cache_idle_seconds=10))
    await h.processor.process([h.event(e, ts_ms=1_000) for e in calls("gone", 3)])
    await h.processor.before_commit()
    await h.processor.process([h.event(e, ts_ms=20_000) for e in calls("x", 1)])
    await h.processor.before_commit()
    assert (h.sample("loopguard_runs_cached"), h.sample("loopguard_runs_active")) == (1.0, 2.0)
    assert b"gone" in h.table
    await h.processor.process([h.event(e, ts_ms=122_000) for e in calls("x", 1, 3)])
    assert b"gone" not in h.table
    assert h.sample("loopguard_runs_active") == 1.0


async def test_a_rebalance_forgets_evicted_runs_too() -> None:
    h = make_harness(Settings(run_idle_ttl_seconds=1_800, run_cache_idle_seconds=0))
    await h.processor.process([h.event(e, ts_ms=1_000) for e in calls("r", 2)])
    await h.processor.before_commit()
    assert (h.sample("loopguard_runs_cached"), h.sample("loopguard_runs_active")) == (0.0, 1.0)
    h.processor.forget_partitions({0})
    assert h.sample("loopguard_runs_active") == 0.0
