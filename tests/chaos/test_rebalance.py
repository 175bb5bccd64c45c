"""A second worker joins the group mid-stream and leaves again: partitions move and return."""

from __future__ import annotations

import asyncio

import pytest

from loopguard.config import load_policy
from tests.chaos.drive import processed_events, run_fleet, wait_uncommitted
from tests.chaos.fleet import Oracle, chaos_fleet
from tests.chaos.harness import POLICY, Cluster
from tests.chaos.invariants import check
from tests.integration.conftest import broker_kind
from tests.worker_process import WorkerProcess

RUNS = 150


@pytest.mark.xfail(
    broker_kind() == "kafka",
    reason="known open defect on Apache Kafka: 14 runs end with stale states (14 decisions "
    "lost, 90 differ) in some runs; docs/reliability.md, Known problems",
    strict=False,
)
async def test_a_second_worker_joining_and_leaving_loses_nothing(cluster: Cluster) -> None:
    fleet = chaos_fleet(RUNS, seed=4, prefix="move")
    oracle = Oracle(load_policy(POLICY), frozenset({"telegram"}))
    first = cluster.workers.start()
    notes: dict[str, object] = {}

    async def join_and_leave() -> None:
        await wait_uncommitted(cluster, first, 200)
        second = cluster.workers.start()
        # The newcomer takes partitions: it processes events of its own.
        notes["second worker processed"] = await _wait_processing(second)
        code = await asyncio.to_thread(second.terminate, 30.0)
        assert code == 0, f"second worker exited {code}:\n{second.log_tail()}"

    await run_fleet(
        cluster, fleet, oracle, fault=join_and_leave, fault_span_s=20.0, alive=lambda: [first]
    )
    await check("second worker joins and leaves", cluster, oracle, notes=notes)


async def _wait_processing(worker: WorkerProcess, at_least: int = 100) -> int:
    """Wait until `worker` processed `at_least` events; how many it had."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while loop.time() < end:
        assert worker.is_running, worker.log_tail()
        try:
            _, body = await asyncio.to_thread(worker.get, "/metrics")
            n = processed_events(body)
            if n >= at_least:
                return n
        except OSError:
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError("the second worker never processed events")
