"""Driving a scenario: produce a fleet wave by wave, inject a fault mid-stream, drain.

`run_fleet` produces each wave (wave 0 paced, so a fault lands while events are flowing),
feeds exactly the produced events to the oracle, and waits for the drain barrier after each
wave. `fault` is awaited concurrently with wave 0's production once `fault_after` of its
events were produced; the rest of wave 0 then flows over about `fault_span_s` seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from tests.chaos.fleet import Fleet, Oracle, WireEvent
from tests.chaos.harness import Cluster
from tests.worker_process import WorkerProcess

DRAIN_DEADLINE_S = 120.0

Fault = Callable[[], Awaitable[None]]


async def produce_paced(
    cluster: Cluster, events: Sequence[WireEvent], *, chunk: int = 100, pace_s: float = 0.02
) -> None:
    """Produce `events` in chunks with a short pause between them (a live fleet's flow)."""
    for i in range(0, len(events), chunk):
        await cluster.produce(events[i : i + chunk])
        await asyncio.sleep(pace_s)  # pacing the flow, not waiting for a result


async def wait_progress(cluster: Cluster, share: float, deadline: float = 60.0) -> None:
    """Wait until the group committed at least `share` of what was produced so far."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        committed = await cluster.committed()
        done = sum(max(0, committed.get(tp, 0)) for tp in cluster.ends if tp[0] in cluster.inputs)
        total = sum(n for tp, n in cluster.ends.items() if tp[0] in cluster.inputs)
        if total and done >= share * total:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the worker did not commit {share:.0%} of its input in {deadline}s")


def processed_events(metrics_text: str) -> int:
    """Sum of `loopguard_events_total` over event types, from a /metrics page."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("loopguard_events_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def wait_uncommitted(
    cluster: Cluster, worker: WorkerProcess, at_least: int, deadline: float = 60.0
) -> int:
    """Wait until `worker` processed at least `at_least` events beyond the group's commits.

    A fault injected then lands between two commits, with work done but not yet committed:
    the case at-least-once delivery exists for. Returns how many events were uncommitted.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while loop.time() < end:
        assert worker.is_running, f"worker exited:\n{worker.log_tail()}"
        try:
            _, body = await asyncio.to_thread(worker.get, "/metrics")
        except OSError:
            await asyncio.sleep(0.05)
            continue
        processed = processed_events(body)
        committed = sum(max(0, n) for n in (await cluster.committed()).values())
        if processed - committed >= at_least:
            return processed - committed
        await asyncio.sleep(0.05)
    raise TimeoutError(f"never {at_least} events processed beyond the last commit")


async def run_fleet(
    cluster: Cluster,
    fleet: Fleet,
    oracle: Oracle,
    *,
    fault: Fault | None = None,
    fault_after: float = 0.4,
    fault_span_s: float = 8.0,
    alive: Callable[[], Sequence[WorkerProcess]] = lambda: (),
) -> None:
    """Produce every wave, inject `fault` during wave 0, and drain after each wave."""
    for k, wave in enumerate(fleet.waves):
        if k == 0 and fault is not None:
            cut = int(len(wave) * fault_after)
            await produce_paced(cluster, wave[:cut])
            # The rest flows for about `fault_span_s`, so the fault and recovery overlap it.
            pace = fault_span_s / max(1, (len(wave) - cut) // 50)
            rest = asyncio.create_task(produce_paced(cluster, wave[cut:], chunk=50, pace_s=pace))
            try:
                await fault()
            finally:
                await rest
        else:
            await produce_paced(cluster, wave, chunk=500, pace_s=0)
        oracle.feed(wave)
        await cluster.wait_drained(DRAIN_DEADLINE_S, alive())
