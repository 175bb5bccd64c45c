"""Faust's consumer thread and transaction manager as the worker replaces them (streams/worker/
faust/internals.py): the livelock check's read of a partition's position, which aiokafka
asserts is set ("Livelock detector's position read"); under exactly-once, recovery's end
offsets, which Faust takes from the last fetch ("Table recovery end offsets"), and the
producers a rebalance stops ("Transactional producers of revoked partitions")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.consumer.subscription_state import TopicPartitionState
from faust.transport.consumer import TransactionManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.worker.faust.internals import (
    _TunedConsumerThread,
    _TunedTransactionManager,
)
from loopguard_fleet.streams.worker.run import assemble


def _thread(state: TopicPartitionState) -> Any:
    """The parts of a consumer thread the check reads, its partition's state `state`."""
    assignment = SimpleNamespace(state_value=lambda tp: state)
    subscriptions = SimpleNamespace(subscription=SimpleNamespace(assignment=assignment))
    consumer = SimpleNamespace(_fetcher=SimpleNamespace(_subscriptions=subscriptions))
    app = SimpleNamespace(monitor=object(), topics=SimpleNamespace(acks_enabled_for=bool))
    return SimpleNamespace(
        _ensure_consumer=lambda: consumer,
        _verify_aiokafka_event_path=lambda now, tp: False,
        consumer=SimpleNamespace(app=app),
        time_started=0.0,
    )


async def test_a_partition_fetched_from_but_not_yet_positioned_is_skipped() -> None:
    state = TopicPartitionState(None)
    state.highwater = 5  # the group knows the partition's end; its first fetch is to come
    thread = _thread(state)
    tp = TP("calls", 0)
    with pytest.raises(AssertionError):  # Faust's own check: the consumer crashed
        faust_aiokafka.AIOKafkaConsumerThread.verify_event_path(thread, 1.0, tp)
    assert _TunedConsumerThread.verify_event_path(thread, 1.0, tp) is None


class _Consumer:
    """An aiokafka consumer that has fetched nothing since its assignment."""

    def __init__(self, ends: dict[TP, int]) -> None:
        self.ends = ends

    def last_stable_offset(self, tp: TP) -> int | None:
        return None  # known only from a fetch response

    async def end_offsets(self, partitions: list[TP]) -> dict[TP, int]:
        return {tp: self.ends[tp] for tp in partitions}


async def test_exactly_once_recovery_asks_the_broker_for_the_last_stable_offsets(
    tmp_path: Path,
) -> None:
    settings = Settings(processing_guarantee="exactly_once", data_dir=tmp_path, store="memory://")
    wiring, _ = assemble(settings)
    wiring.app.in_worker = True  # as `loopguard worker` runs it: Faust's transactions are on
    tp = TP("app-loopguard-runs-changelog", 0)
    consumer = _Consumer({tp: 40})
    thread = SimpleNamespace(app=wiring.app, consumer=SimpleNamespace(in_transaction=True))
    thread._ensure_consumer = lambda: consumer
    faust_ends = await faust_aiokafka.AIOKafkaConsumerThread._highwaters(thread, [tp])
    assert faust_ends == {tp: None}  # Faust's: recovery reads it as -1, below a stored offset
    assert await _TunedConsumerThread._highwaters(thread, [tp]) == {tp: 40}


class _Producer:
    """Faust's producer as the transaction manager drives it: which producers it stops."""

    def __init__(self) -> None:
        self.stopped: list[str] = []
        self.begun: list[str] = []

    async def stop_transaction(self, transactional_id: str) -> None:
        self.stopped.append(transactional_id)

    async def maybe_begin_transaction(self, transactional_id: str) -> None:
        self.begun.append(transactional_id)


def _transaction_manager(cls: Any, producer: _Producer, standbys: set[TP]) -> Any:
    """A transaction manager of app "app", one topic group (0), `standbys` held as standbys."""
    assignor = SimpleNamespace(
        group_for_topic={"calls": 0, "compactions": 0}.__getitem__,
        is_standby=lambda tp: tp in standbys,
    )
    app = SimpleNamespace(assignor=assignor, conf=SimpleNamespace(id="app"))
    return cls(SimpleNamespace(app=app), consumer=object(), producer=producer)


@pytest.mark.parametrize("cls", [TransactionManager, _TunedTransactionManager])
async def test_a_partition_moved_away_but_kept_as_a_standby_stops_its_producer(cls: Any) -> None:
    # The worker owned calls 0 and 1; calls 0 moves to another worker, whose producer for it
    # fences this one's, and its changelog stays here as a standby.
    moved, kept = TP("calls", 0), TP("calls", 1)
    producer = _Producer()
    manager = _transaction_manager(cls, producer, standbys={moved})
    await manager.on_rebalance({kept, TP("compactions", 1)}, {moved}, set())
    if cls is TransactionManager:  # Faust's: the fenced producer stays for when it returns
        assert producer.stopped == []
    else:
        assert producer.stopped == ["app-0-0"]
    assert producer.begun == ["app-0-1"]  # the kept partition's transaction goes on
