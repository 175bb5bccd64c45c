"""A worker SIGKILLed mid-stream and restarted; a graceful restart (SIGTERM)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.settings import COMMIT_INTERVAL_AT_LEAST_ONCE_S
from tests.chaos.drive import run_fleet, wait_uncommitted
from tests.chaos.fleet import Fleet, Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import check
from tests.integration.conftest import broker_kind
from tests.worker_process import WorkerProcess

RUNS = 150


def _oracle() -> Oracle:
    return Oracle(load_policy(POLICY), frozenset({"telegram"}))


async def test_a_fleet_without_faults_matches_the_oracle(cluster: Cluster) -> None:
    fleet = chaos_fleet(RUNS, seed=1, prefix="calm")
    oracle = _oracle()
    worker = cluster.workers.start()
    await run_fleet(cluster, fleet, oracle, alive=lambda: [worker])
    await check("no fault", cluster, oracle)


async def _restart_mid_stream(
    cluster: Cluster,
    store: str,
    fleet: Fleet,
    fault: str,
    stop: Callable[[WorkerProcess], None],
    **settings: object,
) -> None:
    """Stop the worker with `stop` while 300+ events are uncommitted, start another, check."""
    oracle = _oracle()
    worker = cluster.workers.start(store=store, **settings)
    workers = [worker]
    notes: dict[str, object] = {}

    async def stop_and_restart() -> None:
        notes[f"uncommitted at {fault}"] = await wait_uncommitted(cluster, worker, 300)
        await asyncio.to_thread(stop, worker)
        workers.append(cluster.workers.start(web_port=worker.port, store=store, **settings))

    await run_fleet(cluster, fleet, oracle, fault=stop_and_restart, alive=lambda: workers[-1:])
    label = ", ".join([store, *(f"{k}={v}" for k, v in settings.items())])
    await check(f"{fault} + restart ({label})", cluster, oracle, notes=notes)


def _terminate(worker: WorkerProcess) -> None:
    code = worker.terminate(30.0)
    assert code == 0, f"graceful stop exited {code}:\n{worker.log_tail()}"


def _stores(first: str, second: str) -> list[str]:
    """The store a fault runs with on this pass's broker: each fault meets both stores and
    each store meets both brokers across the Tansu and Kafka passes (a pairwise cover of
    fault x store x broker, at half the cost of the full product)."""
    return [first if broker_kind() == "tansu" else second]


@pytest.mark.parametrize("store", _stores("memory://", "rocksdb://"))
async def test_a_worker_killed_mid_stream_and_restarted_loses_nothing(
    cluster: Cluster, store: str
) -> None:
    fleet = chaos_fleet(RUNS, seed=2, prefix="kill")
    await _restart_mid_stream(cluster, store, fleet, "SIGKILL", WorkerProcess.kill)


async def test_a_worker_killed_between_commits_at_the_default_interval_loses_nothing(
    cluster: Cluster,
) -> None:
    # The harness commits every 2.8 s; a user's worker at-least-once every 10 s, with up to
    # 10 s of events processed but not committed when it dies.
    fleet = chaos_fleet(RUNS, seed=12, prefix="kill10")
    await _restart_mid_stream(
        cluster,
        "rocksdb://",
        fleet,
        "SIGKILL",
        WorkerProcess.kill,
        commit_interval_seconds=COMMIT_INTERVAL_AT_LEAST_ONCE_S,
    )


@pytest.mark.parametrize("store", _stores("rocksdb://", "memory://"))
async def test_a_graceful_restart_mid_stream_loses_nothing(cluster: Cluster, store: str) -> None:
    fleet = chaos_fleet(RUNS, seed=3, prefix="term")
    await _restart_mid_stream(cluster, store, fleet, "SIGTERM", _terminate)


async def test_a_worker_evicting_every_run_at_every_checkpoint_loses_nothing_across_a_kill(
    cluster: Cluster,
) -> None:
    """Idle runs leave the cache (here all of them, at every checkpoint) and are read back."""
    fleet = chaos_fleet(RUNS, seed=4, prefix="evict")
    await _restart_mid_stream(
        cluster, "rocksdb://", fleet, "SIGKILL", WorkerProcess.kill, run_cache_idle_seconds=0
    )
