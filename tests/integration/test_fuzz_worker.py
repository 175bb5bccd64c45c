"""Hostile input through a real worker: >10,000 generated messages among good ones.

The messages are generated up front from a fixed seed (every CI run sends the same ones) and
sent in bulk. Each one's fate is known offline with the worker's own rules: refused (truncated
JSON, wrong types, invalid UTF-8, NaN, unknown types, missing run_id, too large, key
mismatch) or valid however odd (unknown fields, odd text, huge strings and arrays, nesting
deeper than orjson reads: JSON has no depth limit). The worker must dead-letter exactly the
refused ones, each with its reason, decide the valid ones exactly like the offline replay,
keep its memory bounded and never crash.

They were drawn with hypothesis until its per-draw cost took 70-80 s of each of CI's three
passes (~7 ms a message); the seeded generator below draws the same kinds in under a second.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import InvalidEvent, parse_event
from loopguard_fleet.streams.wire.codec import InputRejected, decode_object, run_key
from tests.chaos.fleet import Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import decision_id
from tests.integration.conftest import SessionBroker

MAX_BYTES = 1_048_576  # the worker's default max_message_bytes
COUNT = 12_000  # hostile messages
SEED = 20261201
RSS_LIMIT_KB = 600 * 1024

Message = tuple[bytes | None, bytes]  # (key, value)

# Text with what breaks naive JSON handling: quotes, escapes, controls, line separators,
# combining marks, CJK, astral code points (surrogate pairs in UTF-16), the BOM.
_CHARS = (
    "ab Z09_-/.:"
    '"\\'
    "\x00\x01\x1f\x7f\t\n\r"
    "\u00e9\u0301\u2028\u2029\ufeff\uffff\u4e2d\u6587"
    "\U0001f600\U0001f4a9\U00010000\U0010ffff"
)
_WRONG_FOR = ("type", "run_id", "event_id", "seq", "tool", "agent_id", "want_verdict", "ts")
_REQUIRED = ("type", "run_id", "event_id", "seq", "tool", "args")


def _text(rng: random.Random, max_size: int) -> str:
    return "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, max_size)))


def _int(rng: random.Random) -> int:
    """An integer of orjson's range, often at or near its edges."""
    return rng.choice(
        [0, 1, -1, 2**53, 2**53 + 1, -(2**63), 2**63 - 1, rng.randint(-(2**63), 2**63 - 1)]
    )


def _scalar(rng: random.Random) -> Any:
    pick = rng.randrange(5)
    if pick == 0:
        return None
    if pick == 1:
        return rng.random() < 0.5
    if pick == 2:
        return _int(rng)
    if pick == 3:
        return rng.choice([0.0, -0.0, 1e-300, 1.7976931348623157e308, 0.1, rng.uniform(-1e9, 1e9)])
    return _text(rng, 30)


def _json(rng: random.Random, leaves: int = 12) -> Any:
    """A JSON value: scalars, lists and objects nested while leaves are left."""
    if leaves <= 1 or rng.random() < 0.4:
        return _scalar(rng)
    if rng.random() < 0.5:
        return [_json(rng, leaves // 2) for _ in range(rng.randint(0, 4))]
    return {_text(rng, 8): _json(rng, leaves // 2) for _ in range(rng.randint(0, 4))}


def _wrong_value(rng: random.Random, field: str) -> Any:
    """A value of the wrong type for `field`."""
    options: dict[str, list[Any]] = {
        "type": [_int(rng), None, _text(rng, 12)],
        "run_id": [_int(rng), None, "", [_int(rng) for _ in range(rng.randint(0, 2))]],
        "event_id": [_int(rng), "", rng.random() < 0.5],
        "seq": [_text(rng, 5), rng.uniform(-10, 10), None, rng.random() < 0.5],
        "tool": [_int(rng), None, [_text(rng, 3) for _ in range(rng.randint(0, 2))]],
        "agent_id": [_int(rng), rng.random() < 0.5],
        "want_verdict": [_text(rng, 3), _int(rng)],
        "ts": [rng.random() < 0.5, [_int(rng) for _ in range(rng.randint(0, 2))]],
    }
    return rng.choice(options[field])


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


def hostile(rng: random.Random) -> Message:
    """One hostile message: mostly refused, some valid but odd (see the module docstring)."""
    n = rng.randint(0, 10_000)
    run_id = f"fz{rng.randint(0, 400)}"
    seq = rng.randint(1, 50)
    ev = _event(n, run_id, seq, _json(rng))
    key = run_id.encode()
    kind = rng.randint(0, 99)
    if kind < 15:  # truncated JSON
        raw = orjson.dumps(ev)
        return key, raw[: rng.randint(1, len(raw) - 1)]
    if kind < 40:  # a field of the wrong type
        field = rng.choice(_WRONG_FOR)
        return key, orjson.dumps({**ev, field: _wrong_value(rng, field)})
    if kind < 48:  # a required field missing
        field = rng.choice(_REQUIRED)
        return key, orjson.dumps({k: v for k, v in ev.items() if k != field})
    if kind < 56:  # unknown event type
        return key, orjson.dumps({**ev, "type": _text(rng, 12)})
    if kind < 64:  # invalid UTF-8 inside a string
        raw = orjson.dumps(ev)
        at = rng.randint(1, len(raw) - 2)
        bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf0\x28\x8c"])
        return key, raw[:at] + bad + raw[at:]
    if kind < 70:  # NaN / Infinity literals (not JSON)
        literal = rng.choice([b"NaN", b"Infinity", b"-Infinity"])
        return key, orjson.dumps({**ev, "seq": 0}).replace(b'"seq":0', b'"seq":' + literal)
    if kind < 76:  # not an object
        value = _json(rng)
        while isinstance(value, dict):
            value = _json(rng)
        return key, orjson.dumps(value)
    if kind < 82:  # the key is not the run_id
        return rng.choice([None, b"other", b"\xff\xfe"]), orjson.dumps(ev)
    if kind < 92:  # valid but odd: unknown fields, odd text everywhere a string may be
        extra = {_text(rng, 8): _json(rng) for _ in range(rng.randint(1, 4))}
        return key, orjson.dumps({**extra, **ev, "tool": _text(rng, 20) or "t"})
    if kind < 95:  # deep nesting, on either side of orjson's depth limit (1,024)
        # Few: past the limit our own parser reads them, ~9 ms each at 3,000 levels.
        depth = rng.randint(200, 3000)
        nested = b"[" * depth + b"]" * depth
        return key, orjson.dumps({**ev, "args": 0}).replace(b'"args":0', b'"args":' + nested)
    if kind < 96:  # a huge string (valid under the size limit, refused past it)
        size = rng.choice([120_000, 120_000, 120_000, 1_100_000])
        return key, orjson.dumps({**ev, "args": {"blob": "x" * size}})
    if kind < 97:  # a huge array
        size = rng.randint(5_000, 50_000)
        return key, orjson.dumps({**ev, "args": list(range(size))})
    return key, rng.randbytes(rng.randint(0, 64))  # random bytes


def generate() -> list[Message]:
    """The hostile messages, the same on every run (a fixed seed)."""
    rng = random.Random(SEED)
    out = [hostile(rng) for _ in range(COUNT)]
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
