"""Importing the Kafka package makes every aiokafka client wait for the sockets it closes
(streams/kafka/connection.py; on a TLS broker: tests/integration/test_secure_kafka.py)."""

from __future__ import annotations

import aiokafka.client
import aiokafka.conn

import loopguard_fleet.streams.kafka  # noqa: F401  # installs the waits
from loopguard_fleet.streams.kafka import connection


def test_aiokafka_clients_connect_and_close_through_the_waiting_versions() -> None:
    assert aiokafka.client.create_conn is connection._create_conn
    assert aiokafka.conn.AIOKafkaProtocol is connection._Protocol
    bootstrap = aiokafka.client.AIOKafkaClient.bootstrap
    close = aiokafka.client.AIOKafkaClient.close
    connection.close_sockets_before_clients_close()  # a second call changes nothing
    assert aiokafka.conn.AIOKafkaProtocol is connection._Protocol
    assert aiokafka.client.AIOKafkaClient.bootstrap is bootstrap
    assert aiokafka.client.AIOKafkaClient.close is close
    assert bootstrap.__qualname__.startswith("_bootstrap.")
    assert close.__qualname__.startswith("_close.")
