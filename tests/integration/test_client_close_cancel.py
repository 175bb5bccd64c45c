"""Cancelling a task that talks to the broker ends it and leaves no socket open.

The runtime client's supervisor probes the broker (an admin client: connect, list topics,
close) after a verdict that did not come, and `RuntimeClient.close()` cancels it wherever it
is. aiokafka 0.14's `AIOKafkaClient.close()` awaits its metadata task under
`suppress(CancelledError)`: a cancel landing there was swallowed and the closer went on, so
`close()` waited forever (streams/kafka/connection.py). A cancel landing while the admin
client started left its connections open (streams/kafka/admin.py), and over TLS so did one
landing as a connection's handshake completed or during its API-versions or SASL exchange
(streams/kafka/connection.py, `_connected`).
"""

from __future__ import annotations

import asyncio
import gc

import pytest
from aiokafka.client import AIOKafkaClient

import loopguard_fleet.streams.kafka  # noqa: F401  # installs the closing version
from loopguard_fleet.streams.kafka.admin import topic_partitions

from .conftest import SessionBroker, TopicSet, operator_security

pytestmark = pytest.mark.integration

TURN_S = 0.0002  # a loop turn that also lets the probe's I/O in
MAX_TURNS = 2000


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


def test_a_broker_probe_cancelled_at_any_point_ends_and_leaves_no_socket_open(
    broker: SessionBroker, topics: TopicSet
) -> None:
    # The probe the supervisor runs, cancelled after 0, 1, 2, … short loop turns (its connect,
    # metadata request, topic listing, close) until one lands after it finished. Each runs in
    # asyncio.run, so a socket left open warns when that loop closes (an error here).
    security = operator_security(broker)

    async def cancel_after(turns: int) -> tuple[bool, bool]:
        probe = asyncio.create_task(
            topic_partitions(broker.bootstrap, [topics.tool_calls], wait=5, security=security)
        )
        for _ in range(turns):
            await asyncio.sleep(TURN_S)
        probe.cancel()
        done, _ = await asyncio.wait([probe], timeout=20)
        return probe in done, probe.cancelled()

    outcomes = []
    for turns in range(MAX_TURNS):
        outcomes.append(asyncio.run(cancel_after(turns)))
        if not outcomes[-1][1]:  # finished before the cancel: every point before was hit
            break
    gc.collect()
    assert all(ended for ended, _ in outcomes)
    assert (outcomes[0], outcomes[-1]) == ((True, True), (True, False))
