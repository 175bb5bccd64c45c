"""The agent's decisions leave on a producer of their own, not behind Faust's requests.

aiokafka keeps one produce request in flight per broker connection; on Faust's producer a
verdict waited for the changelog records of a checkpoint (streams/worker/faust/internals.py,
docs/performance.md). Here Faust's own producer is held so that none of its
requests reaches the broker, and a decision batch must still arrive on the control topic.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import ProducerClosed

from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import BatchOutbox
from loopguard_fleet.streams.worker.app import build_app
from loopguard_fleet.streams.worker.faust.internals import decisions_producer

from .conftest import KafkaIO, SessionBroker, TopicSet, app_settings


def _hold_requests(producer: Any) -> asyncio.Event:
    """Keep every produce request of `producer` (aiokafka's sender) until the event is set."""
    sender = producer._sender
    send = sender._send_produce_req
    gate = asyncio.Event()

    async def held(node_id: int, batches: Any) -> None:
        await gate.wait()
        await send(node_id, batches)

    sender._send_produce_req = held
    return gate


async def test_a_decision_arrives_while_fausts_producer_sends_nothing(
    broker: SessionBroker, topics: TopicSet, kafka: KafkaIO, tmp_path: Path
) -> None:
    app = build_app(app_settings(broker, topics, tmp_path), Metrics()).app
    await app.producer.start()
    gate = asyncio.Event()
    own = decisions_producer(app)
    try:
        fausts = app.producer._ensure_producer()  # type: ignore[attr-defined]  # Faust's own
        gate = _hold_requests(fausts)
        held_record = await fausts.send(topics.dead_letter, b"held", key=b"run-0")
        outbox = BatchOutbox(app, topics.control, topics.partitions)
        outbox.add(b"run-1", b'{"type":"verdict","run_id":"run-1"}')
        await outbox.send(urgent=True)
        await asyncio.wait_for(outbox.wait_delivered(), 20)
        arrived = await kafka.consume_count(topics.control, 1)
        assert [(m.key, m.json) for m in arrived] == [
            (b"run-1", {"type": "verdict", "run_id": "run-1"})
        ]
        assert not held_record.done()  # Faust's request was still held meanwhile
    finally:
        gate.set()
        await app.producer.stop()
    with pytest.raises(ProducerClosed):  # stopped with Faust's producer service
        await own.send(topics.control, b"late")
