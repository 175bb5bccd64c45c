"""The broker a benchmark runs on (`--broker tansu|kafka`), and what a worker needs on it."""

from __future__ import annotations

import argparse
from pathlib import Path

from loopguard.streams.embedded import KafkaBroker
from loopguard.streams.embedded.tansu import EmbeddedBroker

BROKERS = ("tansu", "kafka")
Broker = EmbeddedBroker | KafkaBroker


def add_broker_argument(ap: argparse.ArgumentParser) -> None:
    """`--broker tansu|kafka` (default tansu, the embedded one)."""
    ap.add_argument(
        "--broker", choices=BROKERS, default="tansu",
        help="embedded Tansu (default) or Apache Kafka (jars: make kafka)",
    )  # fmt: skip


def bench_broker(kind: str, workdir: Path) -> Broker:
    """An unstarted broker of this kind, its files under `workdir` (a context manager)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if kind == "kafka":
        return KafkaBroker(data_dir=workdir / "kafka")
    return EmbeddedBroker(log_dir=workdir)


def worker_env(broker: Broker) -> dict[str, str]:
    """LOOPGUARD_* a worker needs on this broker beyond a user's defaults.

    Tansu under-reports end offsets, which trips Faust's recovery consistency check
    (streams/kafka/end_offsets.py); on Kafka the worker runs with the check on.
    """
    if isinstance(broker, EmbeddedBroker):
        return {"LOOPGUARD_RECOVERY_CONSISTENCY_CHECK": "false"}
    return {}
