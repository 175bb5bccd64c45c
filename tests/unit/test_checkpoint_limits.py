"""The checkpoint writes while batches go on, and the commit after it stops at what it wrote
and at what was delivered (and the worker's heap at its first batch leaves the cyclic
collector's scans).

Drives the worker's real Faust consumer (acks, `_new_offset`, `force_commit` with the
checkpoint hook; tests/unit/faust_rig.py records the broker-side commit) and the worker's
`RunProcessor` over a dict table, with an outbox whose delivery the test holds open: a
checkpoint is stopped after it took its runs, a second batch is processed meanwhile, and the
commit must not cover that batch until a later checkpoint wrote its states
(streams/worker/agent.py, docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.structs import ConsumerRecord

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import OutputLost
from loopguard_fleet.streams.processing.stored import decode_stored
from loopguard_fleet.streams.wire.codec import run_key
from loopguard_fleet.streams.worker.agent import RunProcessor
from tests.unit.faust_rig import TOPIC, TP0, Rig, build_rig, turns

POLICY = load_policy({"tools": {"loopDetection": {"enabled": True}}})


class HeldOutbox:
    """An outbox whose delivery waits until the test opens it (a slow broker acknowledgement)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.waiting = asyncio.Event()  # a checkpoint is waiting for its delivery
        self.opened = asyncio.Event()
        self._pending: list[bytes] = []

    def add(self, key: bytes, value: bytes) -> None:
        self._pending.append(value)

    async def send(self, *, urgent: bool) -> None:
        self.sent += self._pending
        self._pending = []

    def delivery(self) -> HeldOutbox:
        return self

    async def wait(self) -> None:
        self.waiting.set()
        await self.opened.wait()

    async def wait_delivered(self) -> None:
        await self.wait()


class HeldChannel:
    """A Faust topic whose records are acknowledged only when the test says so."""

    def __init__(self) -> None:
        self.sent: list[asyncio.Future[None]] = []

    def send_soon(self, *, key: bytes | None, value: bytes, partition: int | None) -> Any:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sent.append(fut)
        return fut

    def acknowledge(self) -> None:
        for fut in self.sent:
            fut.set_result(None)

    def fail(self) -> None:
        for fut in self.sent:
            fut.set_exception(OSError("broker gone"))


class Event:
    """A Faust event as the agent gets it (weak-referenceable, as the table routing needs)."""

    def __init__(self, message: Any) -> None:
        self.message = message


@dataclasses.dataclass
class Worker:
    rig: Rig
    processor: RunProcessor
    outbox: HeldOutbox
    table: dict[bytes, bytes]
    dead_letters: HeldChannel
    offset: int = 0

    async def batch(self, runs: list[str], seq: int) -> None:
        """One batch, as `take_batches` runs it: tracked, processed, then acked."""

        def call(run: str) -> bytes:
            return orjson.dumps(
                {"type": "tool_call", "event_id": f"{run}-{seq}", "run_id": run, "seq": seq,
                 "tool_call_id": f"c{seq}", "tool": "read", "args": {"path": "/a"}}
            )  # fmt: skip

        await self.records([(run_key(run), call(run)) for run in runs])

    async def records(self, records: list[tuple[bytes, bytes]]) -> None:
        """One batch of raw (key, value) records."""
        consumer = self.rig.consumer
        messages = []
        for key, value in records:
            record = ConsumerRecord(
                TOPIC, 0, self.offset, 1_000, 0, key, value, None, 1, len(value), []
            )
            self.offset += 1
            messages.append(consumer._to_message(TP0, record))
        for message in messages:
            consumer.track_message(message)
        await self.processor.process([Event(m) for m in messages])
        for message in messages:
            consumer.ack(message)

    def stored_seq(self, run: str) -> int | None:
        """The last tool seq of `run` in the table (None: not written)."""
        raw = self.table.get(run_key(run))
        return None if raw is None else decode_stored(raw).state.tool_seq

    def committed(self) -> list[int]:
        return [c[TP0] for c in self.rig.commits]


async def _worker(rig: Rig, tmp_path: Path, guarantee: str) -> Worker:
    table: dict[bytes, bytes] = {}
    dead_letters = HeldChannel()
    wiring = dataclasses.replace(rig.wiring, table=table, dead_letter=dead_letters)
    outbox = HeldOutbox()
    settings = Settings(data_dir=tmp_path, store="memory://", processing_guarantee=guarantee)
    processor = RunProcessor(wiring, settings, POLICY, Metrics(), outbox)
    rig.wiring.app.before_commit.append(processor.before_commit)  # as install_agent does
    await rig.wiring.app.producer.buffer.start()  # the checkpoint drains Faust's real buffer
    return Worker(rig, processor, outbox, table, dead_letters)


@pytest.fixture
async def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Worker]:
    async with build_rig(tmp_path, monkeypatch) as rig:
        w = await _worker(rig, tmp_path, "at_least_once")
        try:
            yield w
        finally:
            await rig.wiring.app.producer.buffer.stop()


RUNS = ["a", "b", "c", "d"]


async def test_a_batch_runs_while_the_checkpoint_waits_and_the_commit_stops_before_it(
    worker: Worker,
) -> None:
    await worker.batch(RUNS, seq=1)  # offsets 0-3
    commit = asyncio.ensure_future(worker.rig.consumer.commit())
    await worker.outbox.waiting.wait()  # the checkpoint took a-d at seq 1 and waits

    # The batch is not held back by the checkpoint (it was, behind the agent's lock).
    await asyncio.wait_for(worker.batch(RUNS, seq=2), timeout=1.0)  # offsets 4-7, acked
    worker.outbox.opened.set()
    await commit

    # The commit covers the states the checkpoint wrote (offsets 0-3), not the acked batch
    # processed meanwhile, whose states are still only in memory.
    assert (worker.committed(), [worker.stored_seq(r) for r in RUNS]) == ([4], [1, 1, 1, 1])
    await worker.rig.consumer.commit()
    assert (worker.committed(), [worker.stored_seq(r) for r in RUNS]) == ([4, 8], [2, 2, 2, 2])


async def test_a_partition_forgotten_during_the_checkpoint_is_neither_written_nor_committed(
    worker: Worker,
) -> None:
    await worker.batch(RUNS, seq=1)
    commit = asyncio.ensure_future(worker.rig.consumer.commit())
    await worker.outbox.waiting.wait()
    worker.processor.forget_partitions([0])  # revoked: another worker may own it now
    worker.outbox.opened.set()
    await commit
    assert (worker.committed(), worker.table) == ([], {})


async def test_a_checkpoint_cancelled_before_it_wrote_leaves_its_runs_to_the_next_one(
    worker: Worker,
) -> None:
    await worker.batch(RUNS, seq=1)
    commit = asyncio.ensure_future(worker.rig.consumer.commit())
    await worker.outbox.waiting.wait()
    commit.cancel()  # the worker stopping while the checkpoint waits
    with pytest.raises(asyncio.CancelledError):
        await commit
    worker.outbox.opened.set()
    await worker.rig.consumer.commit()  # the stop's last commit
    assert (worker.committed(), [worker.stored_seq(r) for r in RUNS]) == ([4], [1, 1, 1, 1])


async def test_exactly_once_keeps_batches_out_until_the_checkpoint_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with build_rig(tmp_path, monkeypatch) as rig:
        worker = await _worker(rig, tmp_path, "exactly_once")
        try:
            await worker.batch(RUNS, seq=1)
            commit = asyncio.ensure_future(rig.consumer.commit())
            await worker.outbox.waiting.wait()
            second = asyncio.ensure_future(worker.batch(RUNS, seq=2))
            await turns(50)  # the batch waits for the agent's lock meanwhile
            is_held = not second.done()
            worker.outbox.opened.set()
            await commit
            await second
            assert (is_held, worker.committed(), [worker.stored_seq(r) for r in RUNS]) == (
                True,
                [4],
                [1, 1, 1, 1],
            )
        finally:
            await rig.wiring.app.producer.buffer.stop()


async def test_a_record_another_agent_produced_is_delivered_before_the_commit_passes_its_input(
    worker: Worker,
) -> None:
    # A side agent (the fleet task) read offset 0 and produced a record from it; no run changed.
    consumer, produced = worker.rig.consumer, HeldChannel()
    message = consumer._to_message(
        TP0, ConsumerRecord(TOPIC, 0, 0, 1_000, 0, b"k", b"{}", None, 1, 2, [])
    )
    consumer.track_message(message)
    worker.processor.gate.send(produced, b"sig", b"fleet_signal", source=(TOPIC, 0))
    worker.processor.gate.read(TOPIC, 0, 0)
    consumer.ack(message)

    commit = asyncio.ensure_future(consumer.commit())
    await turns(50)
    held = (commit.done(), worker.committed())
    produced.acknowledge()
    await commit
    assert (held, worker.committed()) == ((False, []), [1])


async def test_a_dead_letter_is_delivered_before_the_commit_passes_the_refused_record(
    worker: Worker,
) -> None:
    await worker.records([(b"r", b"not json")])  # refused: dead-lettered, no run changed
    commit = asyncio.ensure_future(worker.rig.consumer.commit())
    await turns(50)
    held = (commit.done(), worker.committed(), len(worker.dead_letters.sent))
    worker.dead_letters.acknowledge()
    await commit
    assert (held, worker.committed()) == ((False, [], 1), [1])


async def test_a_record_not_delivered_stops_the_commit(worker: Worker) -> None:
    await worker.records([(b"r", b"not json")])
    worker.dead_letters.fail()
    with pytest.raises(OutputLost):
        await worker.rig.consumer.commit()
    assert worker.committed() == []
