"""The broker restarts without its data while a worker runs (Tansu's memory store; on Kafka,
a wiped disk).

The worker must notice, say so, and stop with exit code 75 instead of carrying on with offsets
the broker no longer has; restarted (as a supervisor would), it recreates the topics, drops the
run states whose changelog is gone and processes what is produced afterwards exactly like an
offline replay of those events.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.worker.broker_watch import EXIT_BROKER_DATA_LOST, BrokerWatch
from loopguard_fleet.streams.worker.unclean_stop import BROKER_DATA_LOST_MARKER
from tests.chaos.drive import run_fleet
from tests.chaos.fleet import Fleet, Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import check
from tests.integration.conftest import SessionBroker, lose_data, start_broker


@pytest.fixture(scope="module")
def own_broker() -> Iterator[SessionBroker]:
    """A broker of this module's own: restarting it must not disturb the session's (each test
    makes topics of its own after the previous one's loss)."""
    broker = start_broker()
    try:
        yield broker
    finally:
        broker.stop()


def _oracle() -> Oracle:
    return Oracle(load_policy(POLICY), frozenset({"telegram"}))


async def test_a_broker_that_lost_its_data_stops_the_worker_which_then_recovers(
    own_broker: SessionBroker, tmp_path: Path
) -> None:
    cluster = Cluster(own_broker, tmp_path, tag="brk")
    await cluster.create_topics()
    fleet = chaos_fleet(120, seed=8, prefix="brk")
    worker = cluster.workers.start()
    try:
        before = Fleet(fleet.waves[:1], fleet.runs)
        await run_fleet(cluster, before, _oracle(), alive=lambda: [worker])
        produced_before = cluster.produced

        lose_data(own_broker)  # every topic and offset is gone
        cluster.ends.clear()
        cluster.produced = 0
        code = await worker.wait_exit(deadline=60)
        # The whole log: the client's reconnection errors while it stops can run past any tail.
        log = worker.log_tail(None)
        assert code == EXIT_BROKER_DATA_LOST, f"worker exit {code}:\n{worker.log_tail()}"
        assert "the broker lost this worker's data" in log

        restarted = cluster.workers.start(web_port=worker.port)  # the supervisor's restart
        after = _oracle()
        await run_fleet(
            cluster, Fleet(fleet.waves[1:], fleet.runs), after, alive=lambda: [restarted]
        )
        assert "discarding the local run states" in restarted.log_tail(None)
        await check(
            "broker restarted (data lost)",
            cluster,
            after,
            notes={"events before the loss": produced_before, "worker exit": code},
        )
    finally:
        cluster.workers.stop_all()


async def test_a_worker_that_crashed_during_the_loss_still_finds_it(
    own_broker: SessionBroker, tmp_path: Path
) -> None:
    """A crash before the watch's next check (a rebalance with the topics gone, say): the
    stopped worker asks the broker once more, so it still exits 75 and leaves the marker."""
    topic, group = "brk-crash.tool-calls", "brk-crash"
    await create_topics(own_broker.bootstrap, [topic], 1)
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=own_broker.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.commit({tp: 7})
    finally:
        await consumer.stop()
    stopped_app = SimpleNamespace(consumer=SimpleNamespace(_committed_offset={}))  # revoked
    watch = BrokerWatch(stopped_app, group, (topic,), [own_broker.bootstrap], tmp_path)
    watch.remember({tp: 7})

    assert not await watch.confirm_after_crash(wait_s=5)  # an ordinary crash: exit code kept
    assert not (tmp_path / BROKER_DATA_LOST_MARKER).exists()

    lose_data(own_broker)
    assert await watch.confirm_after_crash()
    found = (tmp_path / BROKER_DATA_LOST_MARKER).read_text()
    assert f"{topic}[0] committed 7, broker has none" in found
