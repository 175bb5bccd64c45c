"""A task cancelled while it closes an aiokafka client ends (streams/kafka/connection.py).

aiokafka 0.14's `AIOKafkaClient.close()` cancels its metadata task and awaits it under
`suppress(CancelledError)`: a cancel of the closing task that lands then went to that task and
was swallowed, and the closer went on. The runtime client's supervisor closes an admin client
after each probe of the broker; `RuntimeClient.close()` cancelling it there waited forever.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.client import AIOKafkaClient

import loopguard_fleet.streams.kafka  # noqa: F401  # installs the closing version

from .conftest import SessionBroker

pytestmark = pytest.mark.integration


async def test_a_cancel_landing_while_a_client_closes_ends_the_closing_task(
    broker: SessionBroker,
) -> None:
    client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
    await client.bootstrap()  # starts the metadata task that close() awaits
    closed = asyncio.Event()

    async def close_then_idle() -> None:  # as the supervisor: close a client, wait for trouble
        await client.close()
        closed.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(close_then_idle())
    await asyncio.sleep(0)  # the task is now inside close(), awaiting the metadata task
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=20)
    assert (task in done, task.cancelled(), closed.is_set()) == (True, True, False)
