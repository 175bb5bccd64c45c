"""Policy switches as input records (streams/processing/policy_switch.py): each input partition
decides with the last switch read on it, in offset order, stored at its checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import Policy, load_policy
from loopguard_fleet.streams.audit.compare import compare
from loopguard_fleet.streams.audit.explain import explain_run
from loopguard_fleet.streams.audit.inputs import (
    PARTITION_START,
    FileInput,
    Placed,
    merge_by_seq,
    place_of,
)
from loopguard_fleet.streams.audit.replay import (
    LineOutput,
    MemoryOutputs,
    MemoryStore,
    Replayer,
    replay_lines,
)
from loopguard_fleet.streams.audit.replay_jobs import ReplaySpec, replay_local, replay_sharded
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.policy_switch import (
    SWITCH_KEY,
    encode_switch,
    switch_entry,
)
from loopguard_fleet.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

OLD_DOC: dict[str, Any] = {"tools": {"loopDetection": {"enabled": True}}}
NEW_DOC: dict[str, Any] = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}
}
OLD, NEW = load_policy(OLD_DOC), load_policy(NEW_DOC)


def switch(doc: dict[str, Any], offset: int = 0, topic: str = "loopguard.policy") -> bytes:
    return encode_switch(load_policy(doc).version, doc, topic, offset)


def driver(
    store: MemoryStore, metrics: Metrics | None = None, follows: str | None = "loopguard.policy"
) -> tuple[RunDriver, MemoryOutputs]:
    outputs = MemoryOutputs()
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    metrics = metrics or Metrics()
    return RunDriver(OLD, limits, store, outputs, metrics, follows=follows), outputs


class Partition:
    """Input records of one topic-partition, offsets in the order they are made."""

    def __init__(self, partition: int, topic: str = "tool-calls") -> None:
        self.topic, self.partition, self.offset = topic, partition, 0

    def __call__(self, key: bytes, *values: bytes | dict[str, Any]) -> list[InputRecord]:
        out = []
        for v in values:
            raw = v if isinstance(v, bytes) else orjson.dumps(v)
            out.append(InputRecord(self.topic, self.partition, self.offset, None, key, raw))
            self.offset += 1
        return out


def repeats(run: RunScript, n: int) -> list[dict[str, Any]]:
    """`n` identical reads with identical results (a generic repeat)."""
    return [e for _ in range(n) for e in run.both("read", {"path": "/x"}, result="same")]


def versions(outputs: MemoryOutputs) -> list[tuple[int, str]]:
    """(seq, policy_version) of each loop event published."""
    sent = [orjson.loads(v) for v in outputs.decisions]
    return [(m["seq"], m["policy_version"]) for m in sent if m["type"] == "loop_event"]


def test_a_switch_applies_from_its_offset_on_its_own_partition_only() -> None:
    d, outputs = driver(MemoryStore())
    p0, p1 = Partition(0), Partition(1)
    a, b = RunScript("a"), RunScript("b")
    d.apply(p0(run_key("a"), *repeats(a, 10)) + p1(run_key("b"), *repeats(b, 10)))
    d.apply(p1(b"policy", switch(NEW_DOC)))
    d.apply(p0(run_key("a"), *repeats(a, 1)) + p1(run_key("b"), *repeats(b, 1)))
    by_run = {run: versions(outputs) for run in "ab"}
    sent = [orjson.loads(v) for v in outputs.decisions if b'"loop_event"' in v]
    a_versions = {m["policy_version"] for m in sent if m["run_id"] == "a"}
    b_after = [m["policy_version"] for m in sent if m["run_id"] == "b" and m["seq"] > 20]
    assert a_versions == {OLD.version}  # partition 0 read no switch
    assert b_after == [NEW.version]  # the 11th read: above the new warning threshold
    assert by_run["a"] and d.policy_of("tool-calls", 1).version == NEW.version
    assert d.policy_of("tool-calls", 0).version == OLD.version and outputs.dead_letters == []


@pytest.mark.parametrize("follows", [None, "shadow.policy"])
def test_a_worker_applies_only_its_own_groups_switches(follows: str | None) -> None:
    d, outputs = driver(MemoryStore(), follows=follows)
    d.apply(Partition(0)(b"policy", switch(NEW_DOC)))  # from loopguard.policy
    assert d.policy_of("tool-calls", 0) is OLD and not d.has_dirty and outputs.dead_letters == []
    d.apply(Partition(0)(b"policy", switch(NEW_DOC, topic="shadow.policy")))
    assert d.policy_of("tool-calls", 0).version == (NEW.version if follows else OLD.version)


def test_a_switch_decides_events_after_it_in_the_same_batch() -> None:
    d, outputs = driver(MemoryStore())
    p = Partition(0)
    run = RunScript("r")
    d.apply(p(run_key("r"), *repeats(run, 2), switch(NEW_DOC), *repeats(run, 2)))
    assert versions(outputs) == [(7, NEW.version)]  # the 4th read: 3 repeats, the new warning


def test_a_switch_read_again_changes_nothing_and_the_old_version_applies_again() -> None:
    store = MemoryStore()
    metrics = Metrics()
    d, _ = driver(store, metrics)
    p = Partition(0)
    d.apply(p(b"policy", switch(NEW_DOC)))
    d.checkpoint()
    stored = store.get(0, SWITCH_KEY)
    d.apply(p(b"policy", switch(NEW_DOC, offset=1)))  # the same version sent again
    d.checkpoint()
    assert (
        store.get(0, SWITCH_KEY) == stored and d.policy_of("tool-calls", 0).version == NEW.version
    )
    d.apply(p(b"policy", switch(OLD_DOC, offset=2)))  # a rollback is a new record
    assert d.policy_of("tool-calls", 0).version == OLD.version
    info = metrics.registry.get_sample_value
    assert info("loopguard_policy_info", {"version": OLD.version}) == 1


def test_a_restart_resumes_with_the_version_in_force_at_its_last_checkpoint() -> None:
    store = MemoryStore()
    first, _ = driver(store)
    p = Partition(1)
    first.apply(p(b"policy", switch(NEW_DOC)))
    # Not checkpointed yet: a worker starting from the committed offset reads it again.
    assert driver(store)[0].policy_of("tool-calls", 1).version == OLD.version
    first.checkpoint()
    second, outputs = driver(store)
    run = RunScript("r")
    second.apply(p(run_key("r"), *repeats(run, 4)))
    assert versions(outputs) == [(7, NEW.version)]
    # A partition revoked and assigned again loads it from the store too.
    second.forget({1})
    assert (
        second.policy_of("tool-calls", 1).version == NEW.version
        and second.policy_of("tool-calls", 0) is OLD
    )


def test_a_worker_resuming_a_switched_partition_exports_the_version_it_decides_with() -> None:
    """The rollout is complete when every worker exports the new version (docs/policy.md): a
    worker restarted after it, or given the partition by a rebalance, decides with the stored
    switch and must not keep exporting its start-up policy's version."""
    store = MemoryStore()
    first, _ = driver(store)
    p = Partition(2)
    first.apply(p(b"policy", switch(NEW_DOC)))
    first.checkpoint()
    metrics = Metrics()
    metrics.set_policy(OLD.version)  # what a worker exports at start (streams/worker/run.py)
    second, outputs = driver(store, metrics)
    run = RunScript("r")
    second.apply(p(run_key("r"), *repeats(run, 4)))
    assert versions(outputs) == [(7, NEW.version)]
    info = metrics.registry.get_sample_value
    assert info("loopguard_policy_info", {"version": NEW.version}) == 1
    assert info("loopguard_policy_info", {"version": OLD.version}) is None


def test_an_invalid_switch_is_dead_lettered_and_counted_and_the_policy_stays() -> None:
    metrics = Metrics()
    d, outputs = driver(MemoryStore(), metrics)
    p = Partition(0)
    bad_threshold = {"tools": {"loopDetection": {"warningThreshold": 0}}}
    d.apply(
        p(b"policy",
          encode_switch("sha256:x", bad_threshold, "loopguard.policy", 0),
          {"type": "policy_switch", "version": "sha256:x", "policy_topic": "loopguard.policy"},
          {"type": "policy_switch", "policy": NEW_DOC, "policy_topic": "loopguard.policy"},
          {"type": "policy_switch", "version": "sha256:x", "policy": NEW_DOC})  # no topic
    )  # fmt: skip
    reasons = [orjson.loads(v)["reason"] for v in outputs.dead_letters]
    assert reasons == ["invalid_policy_switch"] * 4
    assert d.policy_of("tool-calls", 0) is OLD and not d.has_dirty
    total = "loopguard_events_rejected_total"
    assert metrics.registry.get_sample_value(total, {"reason": "invalid_policy_switch"}) == 4


def test_replay_applies_the_switch_records_of_its_input_in_line_order() -> None:
    run = RunScript("r")
    lines = [orjson.dumps(e) for e in repeats(run, 2)] + [switch(NEW_DOC)]
    lines += [orjson.dumps(e) for e in repeats(run, 2)]
    out = [d for d in replay_lines(Replayer(OLD), lines) if not hasattr(d, "reason")]
    assert [(d.payload["seq"], d.payload["policy_version"]) for d in out] == [(7, NEW.version)]
    assert [d for d in replay_lines(Replayer(OLD), lines[:4] + lines[5:])] == []


def test_the_switch_record_holds_the_document_and_its_version() -> None:
    record = orjson.loads(switch(NEW_DOC, offset=7))
    assert record == {"type": "policy_switch", "version": NEW.version,
                      "policy_topic": "loopguard.policy", "policy_offset": 7,
                      "policy": NEW_DOC}  # fmt: skip
    assert isinstance(OLD, Policy)


def _lines_of(run_id: str, before: int, after: int, switched: bool = True) -> list[bytes]:
    """A run's repeats around a switch record (or none)."""
    run = RunScript(run_id)
    lines = [orjson.dumps(e) for e in repeats(run, before)]
    lines += [switch(NEW_DOC)] if switched else []
    return lines + [orjson.dumps(e) for e in repeats(run, after)]


def _decided(outputs: list[LineOutput]) -> list[tuple[str, int, str]]:
    out = []
    for o in outputs:
        for line in o.data.splitlines():
            m = orjson.loads(line)
            out.append((m["run_id"], m["seq"], m["policy_version"]))
    return out


def test_a_topic_replay_starts_each_partition_with_the_policy_it_was_given() -> None:
    # Partition 0 switches after 2 repeats; partition 1's run has 5 before its own switch:
    # decided by the old policy (no decision) as the worker's partition 1 decided them.
    items = [PARTITION_START, *_lines_of("a", 2, 2), PARTITION_START, *_lines_of("b", 5, 0)]
    outputs, stats = replay_local(ReplaySpec(OLD), list(enumerate(items, 1)))
    assert _decided(list(outputs)) == [("a", 7, NEW.version)]
    assert (stats.rejected, stats.decisions) == (0, 1)


@pytest.mark.parametrize("bad_switch", [False, True])
def test_sharded_replay_applies_each_switch_in_every_shard(bad_switch: bool) -> None:
    lines = [orjson.dumps(e) for r in "abcdef" for e in repeats(RunScript(r), 2)]
    if bad_switch:
        lines.append(orjson.dumps({"type": "policy_switch", "version": "sha256:x",
                                   "policy_topic": "loopguard.policy"}))  # fmt: skip
    lines.append(switch(NEW_DOC))
    lines += [orjson.dumps(e) for r in "abcdef" for e in repeats(RunScript(r), 4)[4:]]
    lines += [PARTITION_START, *_lines_of("g", 4, 0, switched=False)]  # the old policy again
    items = list(enumerate(lines, 1))
    one, one_stats = replay_local(ReplaySpec(OLD), items)
    local = list(one)
    sharded, stats = replay_sharded(ReplaySpec(OLD), items, 3)
    assert list(sharded) == local
    assert len(_decided(local)) == 6 and {v for *_, v in _decided(local)} == {NEW.version}
    assert [o.rejected.reason for o in local if o.rejected] == [
        "invalid_policy_switch"
    ] * bad_switch
    assert (stats.rejected, stats.rejected_reasons, stats.events) == (
        one_stats.rejected, one_stats.rejected_reasons, one_stats.events
    )  # fmt: skip


def test_shards_reading_a_file_apply_its_switch_records_as_one_process(tmp_path: Path) -> None:
    lines = [orjson.dumps(e) for r in "abcdef" for e in repeats(RunScript(r), 2)]
    lines += [orjson.dumps({"type": "policy_switch"}), switch(NEW_DOC)]
    lines += [orjson.dumps(e) for r in "abcdef" for e in repeats(RunScript(r), 4)[4:]]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    local, _ = replay_local(ReplaySpec(OLD), FileInput(str(path)))
    expected = list(local)
    sharded, stats = replay_sharded(ReplaySpec(OLD), FileInput(str(path)), 3)
    assert list(sharded) == expected and len(_decided(expected)) == 6
    assert stats.rejected_reasons == {"invalid_policy_switch": 1}


def test_explain_and_compare_apply_switch_records_to_the_current_policy_only() -> None:
    events = [orjson.dumps(e) for e in repeats(RunScript("r"), 4)]
    switched = list(enumerate([switch(NEW_DOC), *events], 1))
    timeline = explain_run(OLD, switched, "r")
    decided = [(d["seq"], d["policy_version"]) for row in timeline.rows for d in row.decisions]
    assert decided == [(7, NEW.version)] and timeline.rejected == 0
    assert timeline.thresholds["warningThreshold"] == 3
    # The current side switched to the candidate's policy: no difference, and none refused.
    same = compare(OLD, NEW, switched).to_json()
    assert (same["decisions"]["current"], same["rejected"]) == (same["decisions"]["candidate"], 0)
    differs = compare(OLD, NEW, list(enumerate(events, 1))).to_json()
    assert differs["decisions"]["current"] != differs["decisions"]["candidate"]


def test_a_successor_reading_from_an_older_offset_decides_each_event_as_before() -> None:
    # Worker A started with OLD and read a switch to NEW at offset 8; a checkpoint stored the
    # switches but (killed while writing) no run state, and nothing was committed. Worker B
    # started later, with NEW (the topic's last version): it reads from offset 0 again.
    run = RunScript("r")
    p = Partition(0)
    records = p(run_key("r"), *repeats(run, 4)) + p(b"policy", switch(NEW_DOC))
    records += p(run_key("r"), *repeats(run, 2))
    store = MemoryStore()
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    a_out, b_out = MemoryOutputs(), MemoryOutputs()
    a = RunDriver(OLD, limits, store, a_out, Metrics(), follows="loopguard.policy",
                  base_document=OLD_DOC)  # fmt: skip
    a.apply(records)
    a.checkpoint()
    switches_only = MemoryStore()
    switches_only.put(0, SWITCH_KEY, store.get(0, SWITCH_KEY) or b"")
    b = RunDriver(NEW, limits, switches_only, b_out, Metrics(), follows="loopguard.policy",
                  base_document=NEW_DOC)  # fmt: skip
    b.apply(records)
    assert versions(a_out) == [(9, NEW.version), (11, NEW.version)]
    assert b_out.decisions == a_out.decisions
    # A worker that takes the partition over after the switch's offset decides with it.
    c = RunDriver(OLD, limits, switches_only, MemoryOutputs(), Metrics())
    assert c.policy_of("tool-calls", 0).version == NEW.version


# A longer post-compaction window: a compaction armed under it watches 5 results, and 5
# identical ones abort the run; under OLD's (3), the 3rd does.
LONG_WINDOW_DOC: dict[str, Any] = {
    "tools": {"loopDetection": {"enabled": True, "postCompactionGuard": {"windowSize": 5}}}
}
LONG_WINDOW = load_policy(LONG_WINDOW_DOC)
SHORT_WINDOW_DOC: dict[str, Any] = {
    "tools": {"loopDetection": {"enabled": True, "postCompactionGuard": {"windowSize": 2}}}
}


def _late_compaction(
    run: RunScript, tool_calls: Partition, compactions: Partition
) -> list[InputRecord]:
    """5 identical reads of `run`, then its compaction (seq 1), delivered after them: the
    compaction arms the guard with its own policy and feeds it those results (SPEC §8)."""
    key = run_key(run.run_id)
    compaction = run.compaction()
    return tool_calls(key, *repeats(run, 5)) + compactions(key, compaction)


def _guard_aborts(decisions: list[bytes]) -> list[tuple[str, int, str]]:
    """(run, seq, policy_version) of each post-compaction guard's abort."""
    sent = [m for m in map(orjson.loads, decisions) if m["type"] == "loop_event"]
    guard = [m for m in sent if m["detector"] == "compaction_loop_persisted"]
    return [(m["run_id"], m["seq"], m["policy_version"]) for m in guard]


def _aborted(outputs: MemoryOutputs) -> list[tuple[str, int, str]]:
    return _guard_aborts(outputs.decisions)


def test_a_compaction_is_decided_by_the_switches_of_its_own_topic_partition() -> None:
    d, outputs = driver(MemoryStore())
    tool_calls, compactions = Partition(0), Partition(0, "compactions")
    d.apply(tool_calls(b"policy", switch(LONG_WINDOW_DOC)))
    # The compactions partition 0 read no switch: OLD's 3-result window.
    d.apply(_late_compaction(RunScript("a"), tool_calls, compactions))
    assert _aborted(outputs) == [("a", 7, OLD.version)]
    assert d.policy_of("compactions", 0) is OLD
    assert d.policy_of("tool-calls", 0).version == LONG_WINDOW.version
    d.apply(compactions(b"policy", switch(LONG_WINDOW_DOC)))
    d.apply(_late_compaction(RunScript("b"), tool_calls, compactions))
    assert _aborted(outputs)[1:] == [("b", 11, LONG_WINDOW.version)]


def test_a_resumed_worker_looks_up_each_topic_partitions_switch_at_its_own_offsets() -> None:
    store = MemoryStore()
    first, _ = driver(store)
    tool_calls, compactions = Partition(0), Partition(0, "compactions")
    tool_calls.offset = compactions.offset = 40  # the compactions offsets pass the switch's
    first.apply(tool_calls(b"policy", switch(LONG_WINDOW_DOC)))
    first.checkpoint()
    second, outputs = driver(store)
    compactions.offset = 50
    second.apply(_late_compaction(RunScript("a"), tool_calls, compactions))
    assert _aborted(outputs) == [("a", 7, OLD.version)]  # compactions[0]: no switch of its own
    assert second.policy_of("tool-calls", 0, 40) is OLD
    assert second.policy_of("tool-calls", 0, 41).version == LONG_WINDOW.version


def test_switches_stored_in_the_first_format_still_load() -> None:
    # A worker that stored tool-calls switches only ({"v": 1}): they stay the tool-calls
    # partition's, and the compactions partition keeps deciding with the last of them (the
    # version that decided its compactions) until its own first switch record.
    store = MemoryStore()
    v1 = {"v": 1, "switches": [[-1, switch_entry(OLD_DOC, OLD.version, "loopguard.policy")],
                               [4, orjson.loads(switch(NEW_DOC))]]}  # fmt: skip
    store.put(0, SWITCH_KEY, orjson.dumps(v1))
    outputs = MemoryOutputs()
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)

    def resumed() -> RunDriver:
        return RunDriver(LONG_WINDOW, limits, store, outputs, Metrics(),
                         follows="loopguard.policy", v1_topic="tool-calls")  # fmt: skip

    for d in (first := resumed(), resumed()):
        assert d.policy_of("tool-calls", 0, 4).version == OLD.version
        assert d.policy_of("tool-calls", 0, 5).version == NEW.version
        assert d.policy_of("compactions", 0, 0).version == NEW.version
        assert d.policy_of("compactions", 1, 0) is d.policy  # another partition: its own
        if d is first:  # a new switch stores both topics' in the current format
            compactions = Partition(0, "compactions")
            compactions.offset = 9
            d.apply(compactions(b"policy", switch(OLD_DOC)))
            d.checkpoint()
            assert orjson.loads(store.get(0, SWITCH_KEY) or b"")["v"] == 2
    assert resumed().policy_of("compactions", 0, 10).version == OLD.version


def _placed(topic: str, records: list[bytes]) -> list[tuple[int, bytes]]:
    return [(i, Placed(v, place_of(topic, 0), i)) for i, v in enumerate(records)]


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_merged_replay_applies_each_topic_partitions_switches_at_its_offsets(
    jobs: int,
) -> None:
    # Run b's compaction (compactions offset 0) comes before the compactions partition's
    # switch to a 2-result window, run a's (offset 2) after it. Each compaction follows a
    # call and its result, then 5 identical reads: OLD's guard aborts at the 3rd identical
    # result (seq 9), the short window's at the 2nd (seq 7), each named by the version its
    # compaction armed the guard with. In seq order the switch comes first: its offset decides.
    a, b = RunScript("a"), RunScript("b")
    tool_calls = [orjson.dumps(e) for r in (a, b) for e in r.both("ls", {}, result="x")]
    compactions = [orjson.dumps(b.compaction()), switch(SHORT_WINDOW_DOC),
                   orjson.dumps(a.compaction())]  # fmt: skip
    tool_calls += [orjson.dumps(e) for r in (a, b) for e in repeats(r, 5)]
    merged = merge_by_seq([_placed("compactions", compactions), _placed("tool-calls", tool_calls)])
    items = list(enumerate(merged, 1))
    spec = ReplaySpec(OLD)
    outputs, stats = (replay_local(spec, items) if jobs == 1
                      else replay_sharded(spec, items, jobs))  # fmt: skip
    decided = _guard_aborts([line for o in outputs for line in o.data.splitlines()])
    short = load_policy(SHORT_WINDOW_DOC).version
    assert (decided, stats.rejected) == ([("a", 7, short), ("b", 9, OLD.version)], 0)
