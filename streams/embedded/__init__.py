"""Brokers LoopGuard starts itself on 127.0.0.1: Apache Kafka (`kafka`) and Tansu (`tansu`)."""

from loopguard_fleet.streams.embedded.kafka import (
    KAFKA_VERSION,
    KafkaBroker,
    KafkaSetupError,
    default_home,
    install_jars,
    is_installed,
)
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker

__all__ = [
    "KAFKA_VERSION",
    "EmbeddedBroker",
    "KafkaBroker",
    "KafkaSetupError",
    "default_home",
    "install_jars",
    "is_installed",
]
