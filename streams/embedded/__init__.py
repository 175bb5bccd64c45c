"""Brokers LoopGuard starts itself on 127.0.0.1: Apache Kafka here, Tansu in `streams.broker`."""

from loopguard.streams.embedded.kafka import (
    KAFKA_VERSION,
    KafkaBroker,
    KafkaSetupError,
    default_home,
    install_jars,
    is_installed,
)

__all__ = [
    "KAFKA_VERSION",
    "KafkaBroker",
    "KafkaSetupError",
    "default_home",
    "install_jars",
    "is_installed",
]
