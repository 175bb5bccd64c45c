"""Policy switches per input topic-partition (docs/policy.md, "Where a switch applies"): a
merged replay of both input topics, in each run's seq order, decides every event with the
switch in force at its own topic-partition's offset, whatever the merge puts before it (a
post-compaction abort with the version of the compaction that armed the guard); so does a
worker reading each topic-partition in offset order, however far one topic runs ahead of
the other (a compaction read after the results it watches included; the run's compactions
a guard window apart, the ordering guarantee's precondition)."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.inputs import Placed, merge_by_seq, place_of
from loopguard_fleet.streams.audit.replay import (
    MemoryOutputs,
    MemoryStore,
    Replayer,
    replay_items,
)
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.policy_switch import encode_switch
from loopguard_fleet.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

TOOL_CALLS, COMPACTIONS = "tool-calls", "compactions"
# Both decide often (low thresholds) and differently (the guard window, the thresholds).
DOCS: list[dict[str, Any]] = [
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2,
                                 "criticalThreshold": 4, "globalCircuitBreakerThreshold": 6,
                                 "postCompactionGuard": {"windowSize": 3}}}},
    {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3,
                                 "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7,
                                 "postCompactionGuard": {"windowSize": 2}}}},
]  # fmt: skip
POLICIES = [load_policy(d) for d in DOCS]
# A run's compactions are at least the largest guard window of outcomes apart: the ordering
# guarantee's precondition (docs/wire-format.md, "Ordering", limit 1), which any topic
# interleaving then keeps.
GUARD_SPACING = 3


def _switch(version: int, at: int) -> bytes:
    return encode_switch(POLICIES[version].version, DOCS[version], "loopguard.policy", at)


Record = tuple[str, bytes, bytes]  # (topic, key, value)


@st.composite
def publishes(draw: st.DrawFn) -> list[Record]:
    """Records in the order they were published: the runs' events (tool events to
    tool-calls, compactions to compactions, `GUARD_SPACING` calls apart at least), each
    run's in seq order, interleaved at random,
    and switch records (versions taking turns) written to each topic at random places."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    runs: list[list[Record]] = []
    for r in range(draw(st.integers(1, 4))):
        run, events = RunScript(f"run-{r}"), []
        since_compaction = GUARD_SPACING
        for _ in range(draw(st.integers(1, 12))):
            if since_compaction >= GUARD_SPACING and draw(st.integers(0, 4)) == 0:
                events.append((COMPACTIONS, run_key(run.run_id), orjson.dumps(run.compaction())))
                since_compaction = 0
            since_compaction += 1
            args = {"path": "/x" if draw(st.integers(0, 3)) else "/y"}
            for e in run.both("read", args, result="same"):
                events.append((TOOL_CALLS, run_key(run.run_id), orjson.dumps(e)))
        runs.append(events)
    published: list[Record] = []
    while runs:  # a random interleaving that keeps each run's order
        events = rng.choice(runs)
        published.append(events.pop(0))
        runs = [q for q in runs if q]
    for topic in (TOOL_CALLS, COMPACTIONS):
        version = 0
        for _ in range(draw(st.integers(0, 3))):
            version = 1 - version
            at = rng.randint(0, len(published))
            published.insert(at, (topic, b"policy", _switch(version, at)))
    return published


def _by_topic(published: list[Record]) -> dict[str, list[tuple[int, Record]]]:
    """Each topic's records with their offsets."""
    out: dict[str, list[tuple[int, Record]]] = {TOOL_CALLS: [], COMPACTIONS: []}
    for record in published:
        out[record[0]].append((len(out[record[0]]), record))
    return out


def _versions(published: list[Record]) -> dict[str, str]:
    """Each event id's version: the last switch before it on its own topic-partition."""
    versions: dict[str, str] = {}
    for records in _by_topic(published).values():
        version = POLICIES[0].version
        for _, (_, _, value) in records:
            obj = orjson.loads(value)
            if obj["type"] == "policy_switch":
                version = obj["version"]
            else:
                versions[obj["event_id"]] = version
    return versions


def _expected_version(
    event: dict[str, Any], published: list[Record], versions: dict[str, str]
) -> str:
    """The version a loop event must name: its trigger's, or for a post-compaction abort
    that of the compaction (the last before the trigger in seq order) that armed the guard."""
    if event["detector"] != "compaction_loop_persisted":
        return versions[event["trigger_event_id"]]
    events = [orjson.loads(v) for _, _, v in published]
    of_run = {e["event_id"]: e for e in events if e.get("run_id") == event["run_id"]}
    trigger_seq = of_run[event["trigger_event_id"]]["seq"]
    arming = max(
        (e for e in of_run.values() if e["type"] == "compaction" and e["seq"] < trigger_seq),
        key=lambda e: e["seq"],
    )
    return versions[arming["event_id"]]


def _interleavings(published: list[Record], rng: random.Random) -> list[Record]:
    """The records in an order a worker may read them: each topic in its own order, the two
    topics interleaved at random (a compaction may be read after the results it watches)."""
    queues = {t: [r for r in published if r[0] == t] for t in (TOOL_CALLS, COMPACTIONS)}
    out: list[Record] = []
    while any(queues.values()):
        out.append(queues[rng.choice([t for t, q in queues.items() if q])].pop(0))
    return out


def _loop_events(decisions: list[bytes]) -> list[dict[str, Any]]:
    return [d for d in map(orjson.loads, decisions) if d["type"] == "loop_event"]


@settings(max_examples=60, deadline=None)
@given(publishes(), st.randoms(use_true_random=False))
def test_each_decision_names_the_version_in_force_at_its_own_topic_partition_offset(
    published: list[Record], rng: random.Random
) -> None:
    versions = _versions(published)
    streams = [
        [(offset, Placed(value, place_of(topic, 0), offset)) for offset, (_, _, value) in records]
        for topic, records in _by_topic(published).items()
    ]
    replayer = Replayer(POLICIES[0])
    replayed = [
        orjson.dumps(got.to_wire())  # type: ignore[union-attr]
        for _, got in replay_items(replayer, enumerate(merge_by_seq(streams), 1))
    ]
    assert replayer.stats.rejected == 0
    events = _loop_events(replayed)
    assert all(e["policy_version"] == _expected_version(e, published, versions) for e in events)

    # A worker reading each topic-partition in offset order, the two topics interleaved at
    # random, makes every decision of the merged replay, byte for byte.
    outputs = MemoryOutputs()
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    worker = RunDriver(POLICIES[0], limits, MemoryStore(), outputs, Metrics())
    offsets = {TOOL_CALLS: 0, COMPACTIONS: 0}
    for topic, key, value in _interleavings(published, rng):
        worker.apply([InputRecord(topic, 0, offsets[topic], None, key, value)])
        offsets[topic] += 1
    for run_id in {e["run_id"] for e in map(orjson.loads, replayed + outputs.decisions)}:
        of_run = [d for d in outputs.decisions if orjson.loads(d)["run_id"] == run_id]
        # Byte for byte; in the order read (a late compaction's abort comes when it is read).
        assert sorted(of_run) == sorted(d for d in replayed if orjson.loads(d)["run_id"] == run_id)
