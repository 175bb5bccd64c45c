"""Apache Kafka's own faults: the broker SIGKILLed and restarted with its data on disk.

(1) The broker dies mid-stream (SIGKILL, no controlled shutdown) and comes back on the same
    ports with its log: the worker keeps running, reconnects and loses nothing; it must not
    take the restart for a data loss (streams/worker/broker_watch.py exits 75 only for that).
(2) The worker is SIGKILLed while the broker is down and restarting; a new worker starts once
    the broker is back and takes over from the committed offsets and the changelog.

(2) also runs with exactly-once (Faust's transactions), committing every 0.1 s (Kafka Streams'
interval there), so that the kill almost always lands with a transaction open: the control
topic read by a `read_committed` consumer then has no duplicate and every state matches. It
found decisions sent outside every transaction and a store keeping the writes of one that
never committed (docs/reliability.md, "Exactly-once and the commit interval").
These need Kafka whatever LOOPGUARD_TEST_BROKER says (Tansu loses its data on restart:
tests/chaos/test_broker_restart.py), so each test starts a Kafka broker of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.embedded import KafkaBroker
from tests.chaos.drive import DRAIN_DEADLINE_S, produce_paced, wait_uncommitted
from tests.chaos.fleet import Fleet, Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import Figures, check
from tests.worker_process import WorkerProcess

RUNS = 150
DOWN_S = 2.0  # how long the broker stays dead before it is started again
EXACTLY_ONCE_INTERVAL_S = 0.1  # (2) under exactly-once: the module docstring


@pytest.fixture
def kafka_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A Kafka broker of this test's own, data in the test's directory (kept across kills)."""
    broker = KafkaBroker(data_dir=tmp_path / "kafka").start()
    try:
        yield broker
    finally:
        broker.stop()


def _oracle() -> Oracle:
    return Oracle(load_policy(POLICY), frozenset({"telegram"}))


async def _restart_broker(broker: KafkaBroker) -> float:
    """SIGKILL the broker, leave it dead DOWN_S, start it again; seconds it was unreachable."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.to_thread(broker.kill)
    await asyncio.sleep(DOWN_S)  # a crashed broker stays down a while before it is back
    await asyncio.to_thread(broker.start)
    return round(loop.time() - began, 1)


async def _drive(cluster: Cluster, fleet: Fleet, oracle: Oracle, live: list[WorkerProcess]) -> None:
    """Produce the remaining waves one by one, each drained by the live worker."""
    for wave in fleet.waves[1:]:
        await produce_paced(cluster, wave, chunk=500, pace_s=0)
        oracle.feed(wave)
        await cluster.wait_drained(DRAIN_DEADLINE_S, live[-1:])


def _assert_exactly_once(figures: Figures, guarantee: str) -> None:
    if guarantee == "exactly_once":
        assert figures.duplicates == 0, f"read_committed saw duplicates: {figures.line()}"


@pytest.mark.parametrize("guarantee", ["at_least_once"])
async def test_a_broker_sigkilled_and_restarted_with_its_data_loses_nothing(
    kafka_broker: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    cluster = Cluster(
        kafka_broker, tmp_path, tag="bkill", extra_settings={"processing_guarantee": guarantee}
    )
    await cluster.create_topics()
    fleet = chaos_fleet(RUNS, seed=21, prefix="bkill")
    oracle = _oracle()
    worker = cluster.workers.start()
    notes: dict[str, object] = {}
    try:
        first = fleet.waves[0]
        cut = int(len(first) * 0.5)
        await produce_paced(cluster, first[:cut])
        notes["uncommitted at broker SIGKILL"] = await wait_uncommitted(cluster, worker, 200)
        notes["broker down s"] = await _restart_broker(kafka_broker)
        await produce_paced(cluster, first[cut:])
        oracle.feed(first)
        await cluster.wait_drained(DRAIN_DEADLINE_S, [worker])
        await _drive(cluster, fleet, oracle, [worker])
        assert worker.is_running, f"the worker stopped:\n{worker.log_tail()}"
        assert "the broker lost this worker's data" not in worker.log_tail(None)
        figures = await check(
            f"broker SIGKILL + restart with data ({guarantee})", cluster, oracle, notes=notes
        )
        _assert_exactly_once(figures, guarantee)
    finally:
        cluster.workers.stop_all()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
async def test_a_worker_sigkilled_while_the_broker_restarts_loses_nothing(
    kafka_broker: KafkaBroker, tmp_path: Path, guarantee: str
) -> None:
    settings: dict[str, object] = {"processing_guarantee": guarantee}
    if guarantee == "exactly_once":
        settings["commit_interval_seconds"] = EXACTLY_ONCE_INTERVAL_S
    cluster = Cluster(kafka_broker, tmp_path, tag="wkill", extra_settings=settings)
    await cluster.create_topics()
    fleet = chaos_fleet(RUNS, seed=22, prefix="wkill")
    oracle = _oracle()
    worker = cluster.workers.start()
    notes: dict[str, object] = {}
    try:
        first = fleet.waves[0]
        cut = int(len(first) * 0.5)
        await produce_paced(cluster, first[:cut])
        notes["uncommitted at broker SIGKILL"] = await wait_uncommitted(cluster, worker, 200)
        restart = asyncio.create_task(_restart_broker(kafka_broker))
        await asyncio.sleep(DOWN_S / 2)  # the broker is down: the worker dies meanwhile
        await asyncio.to_thread(worker.kill)
        notes["broker down s"] = await restart
        second = cluster.workers.start(web_port=worker.port)
        await produce_paced(cluster, first[cut:])
        oracle.feed(first)
        await cluster.wait_drained(DRAIN_DEADLINE_S, [second])
        await _drive(cluster, fleet, oracle, [second])
        figures = await check(
            f"worker SIGKILL while the broker restarts ({guarantee})",
            cluster,
            oracle,
            notes=notes,
        )
        _assert_exactly_once(figures, guarantee)
    finally:
        cluster.workers.stop_all()
