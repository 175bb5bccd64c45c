"""The live worker's fleet stage (streams/processing/fleet.py): signal records applied per
input partition in offset order, contributions held for the fleet topic, fleet records."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import RunState, Thresholds, ToolCall, process_event
from loopguard_fleet.detectors.fleet import (
    FleetSettings,
    Observation,
    WindowPolicy,
    signature_of_call,
)
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.fleet import (
    observation_record,
    parse_fleet_record,
    tick_record,
)
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.policy_switch import SWITCH_KEY, encode_switch
from loopguard_fleet.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

ON = FleetSettings(enabled=True, early_action="block")
POLICY = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"fleet": ON.to_doc()}}
OBS = Observation("a" * 32, "read", "r1", "main", 1_000, 2, True)


def firing(signature: str, state: str = "firing") -> dict[str, Any]:
    return {"type": "fleet_signal", "state": state, "signal_id": "s" * 32, "signature": signature,
            "runs": 7, "agents": 2, "is_failure": True}  # fmt: skip


def test_a_signal_record_applies_to_its_own_partition_only_until_it_resolves() -> None:
    stage = PartitionFleet(ON)
    assert stage.apply_record(1, firing("x" * 32))
    assert set(stage.view(1, 0, ON).firing) == {"x" * 32} and stage.view(0, 0, ON).firing == {}
    assert stage.view(1, 0, ON).firing["x" * 32].runs == 7
    assert stage.apply_record(1, firing("x" * 32, "resolved"))
    assert stage.view(1, 0, ON).firing == {}


@pytest.mark.parametrize(
    "bad", [{"state": "firing"}, firing("x" * 32, "maybe"), {**firing("x" * 32), "runs": "7"}]
)
def test_a_malformed_signal_record_is_refused(bad: dict[str, Any]) -> None:
    assert PartitionFleet(ON).apply_record(0, bad) is False


def test_contributions_are_held_until_taken_and_event_time_is_the_latest() -> None:
    stage = PartitionFleet(ON)
    stage.contribute(2, OBS, None)
    assert stage.advance(0, 5_000) == [] and stage.advance(1, 3_000) == []
    assert (stage.take(), stage.take(), stage.latest_ms) == ([(2, OBS, None)], [], 5_000)
    assert stage.latest_partition == 0  # the partition whose event moved it


def test_fleet_records_round_trip_and_bad_ones_are_none() -> None:
    assert parse_fleet_record(orjson.loads(orjson.dumps(observation_record(OBS)))) == OBS
    assert parse_fleet_record(tick_record(42)) == 42
    for bad in ([], {"type": "fleet_tick"}, {**observation_record(OBS), "streak": "2"}, {"ts": 1}):
        assert parse_fleet_record(bad) is None


def driver(
    stage: PartitionFleet, store: MemoryStore | None = None
) -> tuple[RunDriver, MemoryOutputs]:
    outputs = MemoryOutputs()
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    policy = load_policy(POLICY)
    store = store if store is not None else MemoryStore()
    return RunDriver(policy, limits, store, outputs, Metrics(), fleet=stage), outputs


def records(partition: int, values: list[dict[str, Any]], key: bytes) -> list[InputRecord]:
    return [
        InputRecord("tool-calls", partition, n, None, key, orjson.dumps(v))
        for n, v in enumerate(values)
    ]


def loop_signature_of_x() -> str:
    state = RunState()
    for ev in RunScript().both("read", {"path": "/x"}, error="ENOENT"):
        process_event(state, ev, Thresholds(enabled=True))
    return signature_of_call(state.history, "read", ToolCall.of("read", {"path": "/x"}).args_hash)


@pytest.mark.parametrize(("signal_partition", "blocked"), [(1, True), (0, False)])
def test_the_driver_blocks_early_where_its_partition_read_the_signal(
    signal_partition: int, blocked: bool
) -> None:
    run = RunScript("r1")
    events = [e for _ in range(4) for e in run.both("read", {"path": "/x"}, error="ENOENT")]
    d, outputs = driver(PartitionFleet(ON))
    d.apply(records(signal_partition, [firing(loop_signature_of_x())], b"signal"))
    d.apply(records(1, events, run_key("r1")))
    sent = [orjson.loads(v) for v in outputs.decisions]
    commands = [(m["command"], m["detector"], m["seq"]) for m in sent if m["type"] == "command"]
    assert commands == ([("block_call", "fleet_signal", 7)] if blocked else [])
    assert outputs.dead_letters == []


def test_a_malformed_signal_record_is_dead_lettered_with_its_reason() -> None:
    d, outputs = driver(PartitionFleet(ON))
    d.apply(records(0, [{"type": "fleet_signal", "state": "firing"}], b"signal"))
    [letter] = [orjson.loads(v) for v in outputs.dead_letters]
    assert letter["reason"] == "invalid_fleet_signal"


def test_a_restarted_driver_loads_the_partitions_firing_set_from_the_store() -> None:
    events = failing_reads("r1")
    store = MemoryStore()
    first = driver(PartitionFleet(ON), store)[0]
    first.apply(records(1, [firing(loop_signature_of_x())], b"signal"))
    # A new worker (empty stage) over the same table: the signal still applies on partition 1.
    second, outputs = driver(PartitionFleet(ON), store)
    second.apply(records(1, events, run_key("r1")))
    sent = [orjson.loads(v) for v in outputs.decisions]
    assert [m["seq"] for m in sent if m.get("command") == "block_call"] == [7]
    # A resolution is stored too: a third worker decides without it.
    second.apply(records(1, [firing(loop_signature_of_x(), "resolved")], b"signal"))
    third, later = driver(PartitionFleet(ON), store)
    third.apply(records(1, failing_reads("r2"), run_key("r2")))
    assert [m for m in map(orjson.loads, later.decisions) if m.get("command")] == []


def failing_reads(run_id: str) -> list[dict[str, Any]]:
    """Four failing reads of /x by one run."""
    run = RunScript(run_id)
    return [e for _ in range(4) for e in run.both("read", {"path": "/x"}, error="ENOENT")]


def test_contributions_carry_the_window_settings_of_the_pushed_policy_in_force() -> None:
    stage = PartitionFleet(ON)
    limits = DriverLimits(1_048_576, 256, run_idle_ttl_ms=0, run_cache_idle_ms=0)
    d = RunDriver(
        load_policy(POLICY), limits, MemoryStore(), MemoryOutputs(), Metrics(), fleet=stage,
        follows="p",
    )  # fmt: skip
    tuned = {**POLICY, "loopguard": {"fleet": {**ON.to_doc(), "windowSeconds": 60, "minRuns": 3}}}
    switch = encode_switch(load_policy(tuned).version, tuned, "p", 41)  # policy-topic offset 41
    d.apply([InputRecord("tool-calls", 1, 0, None, SWITCH_KEY, switch)])
    for partition, run_id in ((1, "r1"), (0, "r0")):  # switched on partition 1 only
        events = failing_reads(run_id)
        d.apply([InputRecord("tool-calls", partition, n + 1, None, run_key(run_id),
                             orjson.dumps(e)) for n, e in enumerate(events)])  # fmt: skip
    taken = stage.take()
    assert {(p, w) for p, _, w in taken} == {(1, WindowPolicy(41, 60, 3, 10, 0.5)), (0, None)}
    _, obs, windows = next(c for c in taken if c[0] == 1)
    assert observation_record(obs, windows)["windows"] == [41, 60, 3, 10, 0.5]  # what is sent
