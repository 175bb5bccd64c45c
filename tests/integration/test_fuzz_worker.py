"""Hostile input through a real worker: >10,000 hypothesis-generated messages among good ones.

The messages are generated up front (derandomized, so every CI run sends the same ones) and
sent in bulk. Each one's fate is known offline with the worker's own rules: refused (truncated
JSON, wrong types, invalid UTF-8, NaN, unknown types, missing run_id, too large, too deep,
key mismatch) or valid however odd (huge strings and arrays, deep nesting within the JSON
limit). The worker must dead-letter exactly the refused ones, each with its reason, decide the
valid ones exactly like the offline replay, keep its memory bounded and never crash.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopguard.config import load_policy
from loopguard.detectors import InvalidEvent, parse_event
from loopguard.streams.wire.codec import InputRejected, decode_object, run_key
from tests.chaos.fleet import Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import decision_id
from tests.integration.conftest import SessionBroker

MAX_BYTES = 1_048_576  # the worker's default max_message_bytes
EXAMPLES = 450  # x ~30 messages each: > 10,000 hostile messages
RSS_LIMIT_KB = 600 * 1024

Message = tuple[bytes | None, bytes]  # (key, value)

_int = st.integers(-(2**63), 2**63 - 1)  # orjson's range
_scalar = (
    st.none()
    | st.booleans()
    | _int
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_wrong_for = {
    "type": _int | st.none() | st.text(max_size=12),
    "run_id": _int | st.none() | st.just("") | st.lists(_int, max_size=2),
    "event_id": _int | st.just("") | st.booleans(),
    "seq": st.text(max_size=5) | st.floats() | st.none() | st.booleans(),
    "tool": _int | st.none() | st.lists(st.text(max_size=3), max_size=2),
    "agent_id": _int | st.booleans(),
    "want_verdict": st.text(max_size=3) | _int,
    "ts": st.booleans() | st.lists(_int, max_size=2),
}


def _event(n: int, run_id: str, seq: int, args: Any) -> dict[str, Any]:
    return {
        "type": "tool_call" if n % 2 else "tool_result",
        "event_id": f"{run_id}:{seq}",
        "run_id": run_id,
        "seq": seq,
        "tool_call_id": f"c{seq}",
        "tool": "read",
        "args": args,
        "result": {"content": [{"type": "text", "text": "ok"}]},
    }


@st.composite
def hostile(draw: st.DrawFn) -> Message:
    """One hostile message: mostly refused, some valid but odd (see the module docstring)."""
    n = draw(st.integers(0, 10_000))
    run_id = f"fz{draw(st.integers(0, 400))}"
    seq = draw(st.integers(1, 50))
    ev = _event(n, run_id, seq, draw(_json))
    key = run_id.encode()
    kind = draw(st.integers(0, 99))
    if kind < 15:  # truncated JSON
        raw = orjson.dumps(ev)
        return key, raw[: draw(st.integers(1, len(raw) - 1))]
    if kind < 40:  # a field of the wrong type
        field = draw(st.sampled_from(sorted(_wrong_for)))
        return key, orjson.dumps({**ev, field: draw(_wrong_for[field])})
    if kind < 48:  # a required field missing
        field = draw(st.sampled_from(["type", "run_id", "event_id", "seq", "tool", "args"]))
        return key, orjson.dumps({k: v for k, v in ev.items() if k != field})
    if kind < 56:  # unknown event type
        return key, orjson.dumps({**ev, "type": draw(st.text(max_size=12))})
    if kind < 64:  # invalid UTF-8 inside a string
        raw = orjson.dumps(ev)
        at = draw(st.integers(1, len(raw) - 2))
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c"]))
        return key, raw[:at] + bad + raw[at:]
    if kind < 70:  # NaN / Infinity literals (not JSON)
        literal = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity"]))
        return key, orjson.dumps({**ev, "seq": 0}).replace(b'"seq":0', b'"seq":' + literal)
    if kind < 76:  # not an object
        return key, orjson.dumps(draw(_json.filter(lambda v: not isinstance(v, dict))))
    if kind < 82:  # the key is not the run_id
        return draw(st.sampled_from([None, b"other", b"\xff\xfe"])), orjson.dumps(ev)
    if kind < 95:  # deep nesting, on either side of the JSON parser's depth limit
        depth = draw(st.integers(200, 3000))
        nested = b"[" * depth + b"]" * depth
        return key, orjson.dumps({**ev, "args": 0}).replace(b'"args":0', b'"args":' + nested)
    if kind < 96:  # a huge string (valid under the size limit, refused past it)
        size = draw(st.sampled_from([120_000, 120_000, 120_000, 1_100_000]))
        return key, orjson.dumps({**ev, "args": {"blob": "x" * size}})
    if kind < 97:  # a huge array
        size = draw(st.integers(5_000, 50_000))
        return key, orjson.dumps({**ev, "args": list(range(size))})
    return key, draw(st.binary(max_size=64))  # random bytes


def generate() -> list[Message]:
    """The hostile messages, the same on every run (derandomized hypothesis)."""
    out: list[Message] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.lists(hostile(), min_size=20, max_size=40))
    def collect(batch: list[Message]) -> None:
        out.extend(batch)

    collect()
    out.append((b"fz10mb", b'{"run_id":"fz10mb","pad":"' + b"y" * 10_000_000 + b'"}'))
    out.append((b"fz10mb", b"[" + b"1," * 5_000_000 + b"1]"))
    return out


def expected_fate(key: bytes | None, value: bytes) -> str | None:
    """The reject reason the worker must give, or None for a valid event (worker's rules)."""
    try:
        obj = decode_object(value, MAX_BYTES)
        ev = parse_event(obj)
    except InputRejected as exc:
        return exc.reason
    except InvalidEvent as exc:
        return exc.reason
    if key is None or key != run_key(ev.run_id):
        return "key_mismatch"
    return None


async def test_hostile_messages_are_dead_lettered_and_good_ones_decided(
    broker: SessionBroker, tmp_path: Path
) -> None:
    hostile_messages = generate()
    assert len(hostile_messages) >= 10_000
    good = chaos_fleet(40, seed=11, prefix="fzgood").waves[0]  # tool events only: one topic
    # Interleave: a good event after every few hostile ones, all on the tool-calls topic.
    # Kafka refuses records over 1 MiB by default; the worker's own limit is under test here.
    big = {"max.message.bytes": str(16 * 1024 * 1024)}
    cluster = Cluster(broker, tmp_path, tag="fuzz", input_topic_configs=big)
    await cluster.create_topics()
    records: list[tuple[str, bytes | None, bytes]] = []
    fates: list[str | None] = []
    step = max(1, len(hostile_messages) // len(good))
    goods = iter(good)
    for i, (key, value) in enumerate(hostile_messages):
        records.append((cluster.tool_calls, key, value))
        fates.append(expected_fate(key, value))
        if i % step == 0:
            ev = next(goods, None)
            if ev is not None:
                records.append((cluster.tool_calls, ev["run_id"].encode(), orjson.dumps(ev)))
                fates.append(None)
    for ev in goods:
        records.append((cluster.tool_calls, ev["run_id"].encode(), orjson.dumps(ev)))
        fates.append(None)

    oracle = Oracle(load_policy(POLICY), frozenset({"telegram"}))
    valid = (v for (_, _, v), fate in zip(records, fates, strict=True) if fate is None)
    oracle.feed_raw(valid)  # the very bytes the worker reads (nesting deeper than orjson writes)

    worker = cluster.workers.start()
    rss: list[int] = []

    async def sample_rss() -> None:
        while worker.is_running:
            rss.append(worker.rss_kb())
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample_rss())
    try:
        await cluster.produce_records(records)
        await cluster.wait_drained(180, [worker])
        assert worker.is_running, f"the worker crashed:\n{worker.log_tail()}"
        await _check(cluster, records, fates, oracle, rss, len(good))
    finally:
        sampler.cancel()
        cluster.workers.stop_all()


async def _check(
    cluster: Cluster,
    records: list[tuple[str, bytes | None, bytes]],
    fates: list[str | None],
    oracle: Oracle,
    rss: list[int],
    n_good: int,
) -> None:

    dead = [orjson.loads(r.value or b"null") for r in await cluster.read(cluster.dead_letter)]
    refused = Counter(f for f in fates if f is not None)
    by_place = {(d["partition"], d["offset"]): d for d in dead}
    assert len(by_place) == len(dead), "a message was dead-lettered twice"
    assert Counter(d["reason"] for d in dead) == refused
    assert all(d["detail"] and d["topic"] == cluster.tool_calls for d in dead)
    assert all(len((d["prefix"] or "").encode()) <= 4 * 256 for d in dead)

    control = [orjson.loads(r.value or b"null") for r in await cluster.read(cluster.control)]
    got = {decision_id(m): m for m in control}
    assert got == oracle.decisions
    peak = max(rss, default=0)
    print(
        f"fuzz: {len(records) - n_good} hostile + {n_good} good messages, "
        f"{len(dead)} dead-lettered ({len(refused)} reasons), {len(got)} decisions, "
        f"peak RSS {peak // 1024} MiB"
    )
    assert 0 < peak < RSS_LIMIT_KB, f"worker RSS peaked at {peak} kB"
