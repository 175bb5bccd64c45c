"""The broker a benchmark runs on (`--broker tansu|kafka|kafka-secure`), and how to reach it.

`kafka-secure` is the same Apache Kafka with SASL_SSL (SCRAM) and the standard authorizer
(streams/embedded/kafka_security.py): the bench's own clients and the worker log in as the
operator (the super user), so the figures show what TLS and SASL cost, not an ACL recipe.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from loopguard_fleet.streams.embedded import KafkaBroker
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.kafka.security import ClientSecurity

BROKERS = ("tansu", "kafka", "kafka-secure")
Broker = EmbeddedBroker | KafkaBroker


def add_broker_argument(ap: argparse.ArgumentParser) -> None:
    """`--broker tansu|kafka|kafka-secure` (default tansu, the embedded one)."""
    ap.add_argument(
        "--broker", choices=BROKERS, default="tansu",
        help="embedded Tansu (default), Apache Kafka, or Kafka over SASL_SSL (jars: make kafka)",
    )  # fmt: skip


def bench_broker(kind: str, workdir: Path) -> Broker:
    """An unstarted broker of this kind, its files under `workdir` (a context manager)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if kind in ("kafka", "kafka-secure"):
        return KafkaBroker(data_dir=workdir / "kafka", secure=kind == "kafka-secure")
    return EmbeddedBroker(log_dir=workdir)


def security(broker: Broker) -> ClientSecurity:
    """How the bench's clients log in (plaintext unless the broker is secured)."""
    return broker.credentials() if isinstance(broker, KafkaBroker) else ClientSecurity()


def client_options(broker: Broker) -> dict[str, Any]:
    """aiokafka keyword arguments for the bench's own producers and consumers."""
    return security(broker).aiokafka_kwargs()


def worker_env(broker: Broker) -> dict[str, str]:
    """LOOPGUARD_* a worker needs on this broker beyond a user's defaults.

    Tansu under-reports end offsets, which trips Faust's recovery consistency check
    (streams/kafka/end_offsets.py); on Kafka the worker runs with the check on.
    """
    if isinstance(broker, EmbeddedBroker):
        return {"LOOPGUARD_RECOVERY_CONSISTENCY_CHECK": "false"}
    return security(broker).settings_env()
