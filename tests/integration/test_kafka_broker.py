"""The Apache Kafka launcher on a real broker: loopback, explicit topics, data kept on restart.

One broker of this module's own (the session's may be Tansu, and these tests kill theirs).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from loopguard_fleet.streams.embedded import KafkaBroker
from loopguard_fleet.streams.embedded.child import kafka_ready
from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.admin import create_topics, topic_partitions

pytestmark = pytest.mark.integration


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def kafka_broker() -> Iterator[KafkaBroker]:
    """This module's own Kafka broker (temporary data dir), stopped by PID at the end."""
    broker = KafkaBroker().start()
    try:
        yield broker
    finally:
        broker.stop()


async def _topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, f"v{i}".encode(), partition=i % 2)
        await producer.flush()
    finally:
        await producer.stop()


async def _read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        got: list[bytes] = []
        while sum(ends.values()) > len(got):
            batches = await consumer.getmany(timeout_ms=10_000)
            assert batches, f"nothing more after {len(got)} of {sum(ends.values())} records"
            for records in batches.values():
                got.extend(r.value for r in records if r.value is not None)
        return sorted(got)
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> dict[int, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
    finally:
        await admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items()}


async def _commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    # No auto-commit: on stop it would commit the consumer's position (the end) over ours.
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))  # aiokafka commits only for assigned partitions
        await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
    finally:
        await consumer.stop()


async def test_the_broker_serves_on_loopback_and_creates_no_topic_by_itself(
    kafka_broker: KafkaBroker,
) -> None:
    host, port = kafka_broker.bootstrap.split(":")
    assert host == "127.0.0.1" and kafka_ready(host, int(port))
    config = (kafka_broker.data_dir / "server.properties").read_text()
    assert "auto.create.topics.enable=false" in config.splitlines()
    listeners = next(ln for ln in config.splitlines() if ln.startswith("listeners="))
    assert listeners.count("127.0.0.1:") == 2 and "0.0.0.0" not in listeners
    with pytest.raises(KafkaError):  # a producer touching an unknown topic does not create it
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_broker.bootstrap, request_timeout_ms=1500
        )
        await producer.start()
        try:
            await producer.send_and_wait("kb.unknown", b"x", partition=0)
        finally:
            await producer.stop()
    with pytest.raises(BrokerError, match=r"do not exist.*kb\.unknown"):
        await topic_partitions(kafka_broker.bootstrap, ["kb.unknown"], wait=0.5)
    assert "kb.unknown" not in await _topic_names(kafka_broker.bootstrap)
    assert "Kafka Server started" in kafka_broker.log_path.read_text()


async def test_a_sigkilled_broker_restarts_with_its_topics_records_and_offsets(
    kafka_broker: KafkaBroker,
) -> None:
    await create_topics(kafka_broker.bootstrap, ["kb.kept"], 2)
    await _produce(kafka_broker.bootstrap, "kb.kept", 40)
    tps = [TopicPartition("kb.kept", p) for p in range(2)]
    await _commit(kafka_broker.bootstrap, "kb-group", {tps[0]: 7, tps[1]: 11})
    old_pid, old_bootstrap = kafka_broker.pid, kafka_broker.bootstrap

    kafka_broker.kill()
    assert not _is_alive(old_pid) and not kafka_broker.is_running
    kafka_broker.start()

    assert kafka_broker.bootstrap == old_bootstrap and kafka_broker.pid != old_pid
    assert await topic_partitions(kafka_broker.bootstrap, ["kb.kept"]) == {"kb.kept": 2}
    assert await _read_all(kafka_broker.bootstrap, "kb.kept", 2) == sorted(
        f"v{i}".encode() for i in range(40)
    )
    assert await _committed(kafka_broker.bootstrap, "kb-group", tps) == {0: 7, 1: 11}


async def test_a_graceful_restart_keeps_the_data_and_a_wiped_one_loses_it(
    kafka_broker: KafkaBroker,
) -> None:
    await create_topics(kafka_broker.bootstrap, ["kb.again"], 2)
    await _produce(kafka_broker.bootstrap, "kb.again", 10)

    kafka_broker.restart()
    assert len(await _read_all(kafka_broker.bootstrap, "kb.again", 2)) == 10

    kafka_broker.restart(keep_data=False)
    assert "kb.again" not in await _topic_names(kafka_broker.bootstrap)
    await create_topics(kafka_broker.bootstrap, ["kb.fresh"], 1)  # a usable, empty broker


def test_stop_ends_the_process_frees_the_ports_and_removes_its_temporary_dir() -> None:
    own = KafkaBroker().start()
    pid, port, data_dir = own.pid, own.port, own.data_dir
    own.stop()
    assert not _is_alive(pid) and not own.is_running
    assert not data_dir.exists()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing listens there any more


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        own = KafkaBroker(port, start_timeout=60.0)
        try:
            with pytest.raises(BrokerError, match=f"exited with code 1 .* on 127.0.0.1:{port}"):
                own.start()
        finally:
            own.stop()
