"""Faust's consumer service runs in the worker's event loop (streams/worker/faust/loop_consumer.py).

On a real broker: the service the worker's Faust consumer delegates to starts no thread,
runs aiokafka's calls in the caller's thread and loop, fetches records, and stops the
aiokafka consumer with itself; with `faust_consumer_thread` on, Faust's thread is back.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from mode.threads import WorkerThread

from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.app import build_app

from .conftest import KafkaIO, SessionBroker, TopicSet, app_settings


def _service_threads() -> list[threading.Thread]:
    """mode's service threads alive (a consumer thread runs in one; executor threads do not
    count: aiokafka resolves names and loads TLS contexts in the loop's default executor)."""
    return [t for t in threading.enumerate() if isinstance(t, WorkerThread)]


def _consumer_service(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, **overrides: Any
) -> Any:
    """The worker app's Faust consumer's delegate (its "consumer thread"), not started."""
    settings = app_settings(broker, topics, tmp_path, **overrides)
    return build_app(settings, Metrics()).app.consumer._thread


async def test_the_consumer_runs_in_the_callers_loop_and_stops_with_the_service(
    broker: SessionBroker, topics: TopicSet, kafka: KafkaIO, tmp_path: Path
) -> None:
    service = _consumer_service(broker, topics, tmp_path)
    assert _service_threads() == []
    await service.start()
    try:
        assert _service_threads() == []  # no thread of its own
        assert service.thread_loop is asyncio.get_running_loop()
        here = threading.get_ident()
        assert await service.call_thread(threading.get_ident) == here

        async def where() -> tuple[int, asyncio.AbstractEventLoop]:
            return threading.get_ident(), asyncio.get_running_loop()

        assert await service.call_thread(where) == (here, asyncio.get_running_loop())

        # A fetch through Faust's own path (`getmany` → `_fetch_records`) gets the records.
        await kafka.produce_raw(topics.tool_calls, [b"one", b"two"], key=b"run-1")
        tps = {TopicPartition(topics.tool_calls, p) for p in range(topics.partitions)}
        aiokafka_consumer = service._ensure_consumer()
        aiokafka_consumer.assign(list(tps))
        await aiokafka_consumer.seek_to_beginning(*tps)
        values: list[bytes] = []
        for _ in range(40):
            got = await service.getmany(tps, timeout=0.5)
            values += [r.value for records in got.values() for r in records]
            if len(values) >= 2:
                break
        assert values == [b"one", b"two"]
        # The worker's prefetch backoff, 5 ms, not aiokafka's 100 ms (internals.py says why).
        assert aiokafka_consumer._fetcher._prefetch_backoff == 0.005
    finally:
        await service.stop()
    assert aiokafka_consumer._closed
    assert service.should_stop


async def test_faust_consumer_thread_setting_brings_the_thread_back(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path
) -> None:
    service = _consumer_service(
        broker, topics, tmp_path, faust_consumer_thread=True, fetch_prefetch_backoff_ms=25
    )
    await service.start()
    try:
        assert len(_service_threads()) == 1
        assert service.thread_loop is not asyncio.get_running_loop()
        assert await service.call_thread(threading.get_ident) != threading.get_ident()
        assert service._ensure_consumer()._fetcher._prefetch_backoff == 0.025
    finally:
        await service.stop()
