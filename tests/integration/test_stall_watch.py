"""StallWatch on the real broker: a consumer whose commits stand still with events waiting."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from streams.stall_watch import ConsumerStalled, StallWatch

from .conftest import KafkaIO, TopicSet


class TP(NamedTuple):
    topic: str
    partition: int


@dataclass
class FakeConsumer:
    """The two pieces of Faust's consumer the watch reads."""

    assigned: set[TP]
    _committed_offset: dict[TP, int] = field(default_factory=dict)

    def assignment(self) -> set[TP]:
        return self.assigned


@dataclass
class FakeApp:
    consumer: FakeConsumer
    rebalancing: bool = False
    in_recovery: bool = False
    crashed: list[BaseException] = field(default_factory=list)

    async def crash(self, exc: BaseException) -> None:
        self.crashed.append(exc)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _watch(
    topics: TopicSet, kafka: KafkaIO, committed: int
) -> tuple[FakeApp, StallWatch, Clock]:
    """Ten events on one partition; the group committed `committed` there."""
    await kafka.produce_json(topics.tool_calls, [{"run_id": "r", "seq": i} for i in range(10)])
    partition = (await kafka.consume_count(topics.tool_calls, 10))[0].partition
    tp = TopicPartition(topics.tool_calls, partition)
    committer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=topics.group_id, enable_auto_commit=False
    )
    await committer.start()
    try:
        committer.assign([tp])
        await committer.commit({tp: OffsetAndMetadata(committed, "")})
    finally:
        await committer.stop()
    app = FakeApp(FakeConsumer({TP(tp.topic, tp.partition)}))
    clock = Clock()
    watch = StallWatch(app, topics.group_id, (topics.tool_calls,), [kafka.bootstrap], 20.0, clock)
    return app, watch, clock


async def test_commits_standing_still_with_events_waiting_stop_the_worker(
    topics: TopicSet, kafka: KafkaIO
) -> None:
    app, watch, clock = await _watch(topics, kafka, committed=4)
    await watch.check()
    clock.now = 10.0
    await watch.check()
    assert app.crashed == []  # not quiet long enough yet
    clock.now = 25.0
    await watch.check()
    assert len(app.crashed) == 1 and isinstance(app.crashed[0], ConsumerStalled)
    assert "from offset 4" in str(app.crashed[0])


async def test_a_group_at_the_end_is_idle_not_stalled(topics: TopicSet, kafka: KafkaIO) -> None:
    app, watch, clock = await _watch(topics, kafka, committed=10)
    await watch.check()
    clock.now = 60.0
    await watch.check()
    assert app.crashed == []


async def test_nothing_is_concluded_during_a_rebalance(topics: TopicSet, kafka: KafkaIO) -> None:
    app, watch, clock = await _watch(topics, kafka, committed=4)
    await watch.check()
    app.rebalancing = True
    clock.now = 60.0
    await watch.check()
    app.rebalancing = False
    clock.now = 70.0
    await watch.check()
    assert app.crashed == []  # the quiet period restarted when the rebalance ended
