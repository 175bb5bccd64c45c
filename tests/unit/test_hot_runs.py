"""Packed runs (streams/processing/hot.py): the most recently used runs keep their states as
objects, the others are packed; a driver that packs decides, and stores, exactly what one
that does not decides and stores."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors import RunState
from loopguard_fleet.streams.audit.replay import MemoryOutputs, MemoryStore
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.hot import HotRuns
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.partition import LiveRun, snapshot_state
from loopguard_fleet.streams.wire.codec import run_key
from tests.wire import InputRecord, RunScript

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})
TTL_MS = 60_000


def _run(tool_seq: int = 2) -> LiveRun:
    return LiveRun(RunState(tool_seq=tool_seq))


def test_the_least_recently_used_run_beyond_the_limit_is_packed() -> None:
    hot = HotRuns(2)
    a, b, c = _run(), _run(), _run()
    hot.use(a)
    hot.use(b)
    hot.use(a)  # a is now more recent than b
    hot.use(c)
    assert b.packed is not None and a.packed is None and c.packed is None
    assert len(hot) == 2


def test_a_packed_run_used_again_is_unpacked_to_an_equal_state() -> None:
    hot = HotRuns(1)
    a, b = _run(3), _run(5)
    before = RunState(tool_seq=3)
    hot.use(a)
    hot.use(b)
    assert a.packed is not None
    assert hot.use(a) == before and a.packed is None
    assert b.packed is not None  # a took its place


def test_no_limit_packs_nothing() -> None:
    hot = HotRuns(0)
    runs = [_run() for _ in range(50)]
    for run in runs:
        hot.use(run)
    assert all(run.packed is None for run in runs) and len(hot) == 0


def test_a_discarded_run_is_neither_held_nor_packed_later() -> None:
    hot = HotRuns(1)
    a, b = _run(), _run()
    hot.use(a)
    hot.discard([a])
    hot.use(b)
    assert a.packed is None and len(hot) == 1


def test_a_snapshot_of_a_packed_run_is_its_packed_bytes_and_reads_back_equal() -> None:
    run = _run(7)
    run.pack()
    snapshot = run.snapshot()
    assert snapshot is run.packed
    assert snapshot_state(snapshot) == RunState(tool_seq=7)
    run.state.tool_seq = 8  # the run moves on; the snapshot does not
    assert snapshot_state(snapshot) == RunState(tool_seq=7)


def _events(runs: int, rounds: int, seed: int) -> list[InputRecord]:
    """Interleaved events of `runs` looping runs: reads of a missing file, polls, and calls
    left pending, so that runs are packed with pending records, guards and held events."""
    rnd = random.Random(seed)
    scripts = [RunScript(f"r{i}") for i in range(runs)]
    out: list[dict[str, Any]] = []
    for _ in range(rounds):
        for script in rnd.sample(scripts, len(scripts)):
            kind = rnd.random()
            if kind < 0.1:
                out.append(script.compaction())
            elif kind < 0.2:
                out.append(script.call("exec", {"command": "sleep 9"}))  # stays pending
            elif kind < 0.6:
                out += script.both("read", {"path": "/missing"}, error="ENOENT")
            else:
                out += script.both("process", {"action": "poll", "sessionId": "s"}, result="-")
    return [
        InputRecord("tool-calls", 0, i, 1_000.0 + i, run_key(ev["run_id"]), orjson.dumps(ev))
        for i, ev in enumerate(out)
    ]


def _driver(hot_runs: int) -> tuple[RunDriver, MemoryStore, MemoryOutputs]:
    limits = DriverLimits(
        1_048_576, 0, run_idle_ttl_ms=TTL_MS, run_cache_idle_ms=TTL_MS, hot_runs=hot_runs
    )
    store, outputs = MemoryStore(), MemoryOutputs()
    return RunDriver(POLICY, limits, store, outputs, Metrics()), store, outputs


@pytest.mark.parametrize("seed", range(4))
def test_a_driver_that_packs_decides_and_stores_what_one_that_does_not_does(seed: int) -> None:
    records = _events(runs=12, rounds=30, seed=seed)
    packing, packed_store, packed_out = _driver(hot_runs=3)
    plain, plain_store, plain_out = _driver(hot_runs=0)
    rnd = random.Random(seed)
    i = 0
    while i < len(records):
        batch, i = records[i : i + 25], i + 25
        for driver in (packing, plain):
            driver.apply(batch)
        if rnd.random() < 0.5:  # a checkpoint: taken now, written after the next batch
            taken = packing.take_dirty(), plain.take_dirty()
            batch, i = records[i : i + 25], i + 25
            for driver, runs in zip((packing, plain), taken, strict=True):
                driver.apply(batch)
                for run in runs:
                    driver.write_taken(run)
    packing.checkpoint()
    plain.checkpoint()
    assert packed_out.decisions == plain_out.decisions
    assert any(b'"critical"' in d for d in plain_out.decisions)  # the loops were caught
    assert packed_store.values == plain_store.values
    held = packing.partition(0).live.values()
    assert sum(run.packed is not None for run in held) == 12 - 3
    assert {k: r.state for k, r in packing.partition(0).live.items()} == {
        k: r.state for k, r in plain.partition(0).live.items()
    }
