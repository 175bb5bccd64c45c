"""Closing the runtime client ends its background tasks, even when a cancellation is lost.

aiokafka swallows a cancel in places (its client's close(): tests/integration/
test_client_close_cancel.py), and on Python 3.11 `asyncio.wait_for` loses one that lands as
its call completes: the cancelled task runs on into its next await. Seen as a docs example
that never returned on Apache Kafka (its client's supervisor was probing the broker when the
example closed the client). Here a probe loses the cancel the generic way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError

from loopguard_fleet.streams.client import RuntimeClient
from loopguard_fleet.streams.client import connection as client_connection
from loopguard_fleet.streams.embedded.child import free_port


async def test_close_ends_a_supervisor_whose_cancellation_was_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probing = asyncio.Event()
    calls: list[str] = []

    async def probe(*args: Any, **kwargs: Any) -> dict[str, int]:
        calls.append("probe")
        if len(calls) != 2:  # start() and every reconnect after the lost cancellation
            raise KafkaConnectionError("no broker")
        probing.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            calls.append("cancel lost")  # as wait_for on 3.11: the call's own outcome wins
            raise KafkaConnectionError("the probe failed as it was cancelled") from None
        raise AssertionError("a probe is only ever left by its cancellation")

    monkeypatch.setattr(client_connection, "topic_partitions", probe)
    client = RuntimeClient(f"127.0.0.1:{free_port()}", reconnect_backoff=(0.01, 0.01))
    await client.start()
    await asyncio.wait_for(probing.wait(), 10)  # the supervisor is reconnecting, inside probe
    async with asyncio.timeout(30):  # a bound: without the fix close() never returns
        await client.close()
    assert calls[:3] == ["probe", "probe", "cancel lost"]
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("loopguard-client")]
