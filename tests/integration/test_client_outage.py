"""The runtime client fails open, fast and quietly when the broker is away.

A broker that never started and one killed mid-run: every tool call returns at once, a
verdict fails open within its timeout, reconnection happens in the background, the log has
one line per state change and none of aiokafka's per-retry errors, and close() is clean.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Sequence

import pytest

from loopguard_fleet.streams.client import ClientError, RuntimeClient
from loopguard_fleet.streams.embedded.child import free_port
from loopguard_fleet.streams.kafka.admin import create_topics

from .conftest import PARTITIONS, KafkaIO, Message, TopicSet, operator_security, start_broker

VERDICT_TIMEOUT = 0.5
MARGIN = 0.25  # scheduling slack on a shared 2-core host
CALL_BOUND = 0.05  # a tool call only queues: far below any broker round trip


async def _timed(call: Callable[[], Awaitable[object]]) -> tuple[object, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await call()
    return result, loop.time() - started


async def _until(condition: Callable[[], bool], deadline: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not condition():
        assert loop.time() < end, "condition not met before the deadline"
        await asyncio.sleep(0.02)


def _retry_noise(records: list[logging.LogRecord]) -> list[str]:
    return [
        r.getMessage()
        for r in records
        if r.name.startswith("aiokafka") and r.levelno >= logging.WARNING
    ]


def _since_kill(messages: Sequence[Message]) -> list[Message]:
    return [m for m in messages if "before" not in m.json["args"]]


def _state_lines(records: list[logging.LogRecord]) -> list[str]:
    return [
        r.getMessage()
        for r in records
        if r.name.startswith("loopguard_fleet.streams.client") and r.levelno >= logging.WARNING
    ]


async def _one_call_each_way(client: RuntimeClient, run_id: str, calls: int) -> list[float]:
    """`calls` verdict requests; the time each tool_call + verdict pair took."""
    run = client.run(run_id)
    took = []
    for i in range(calls):
        cid, call_s = await _timed(lambda i=i: run.tool_call("read", {"i": i}, want_verdict=True))
        assert call_s < CALL_BOUND, f"tool_call took {call_s:.3f}s"
        reply, verdict_s = await _timed(lambda cid=cid: run.verdict(str(cid), VERDICT_TIMEOUT))
        assert reply.decision == "allow" and reply.is_timeout  # type: ignore[attr-defined]
        assert verdict_s < VERDICT_TIMEOUT + MARGIN, f"verdict took {verdict_s:.3f}s"
        took.append(call_s + verdict_s)
    return took


async def test_a_broker_that_never_started_costs_a_tool_call_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    caplog.set_level(logging.INFO, logger="loopguard_fleet")
    client = RuntimeClient(
        f"kafka://127.0.0.1:{free_port()}", buffer_size=20, reconnect_backoff=(0.05, 0.2)
    )
    _, start_s = await _timed(client.start)
    assert start_s < VERDICT_TIMEOUT + MARGIN
    assert not client.is_connected
    await _one_call_each_way(client, "r-nobroker", 30)
    # Thirty calls and thirty results queued against a bound of twenty: forty dropped.
    for i in range(30):
        await client.run("r-nobroker").tool_result(f"c{i}", "read", {"i": i}, result="x")
    assert client.dropped == 40
    await asyncio.sleep(1.0)  # several reconnect attempts (backoff 0.05..0.2 s) happen meanwhile
    _, close_s = await _timed(client.close)
    assert close_s < VERDICT_TIMEOUT + MARGIN
    gc.collect()  # an unclosed aiokafka client would warn here (warnings are errors)
    assert _retry_noise(caplog.records) == []
    lines = _state_lines(caplog.records)
    assert [line.split(" (K")[0] for line in lines] == [
        f"runtime client lost the broker {client.bootstrap[0]}",
        "runtime client buffer full (20 events): dropping new events until the broker takes them",
        "runtime client closing while the broker "
        f"{client.bootstrap[0]} is unreachable: 20 buffered events not delivered",
    ]


async def test_a_broker_killed_mid_run_fails_open_then_reconnects_in_the_background(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiokafka")
    caplog.set_level(logging.INFO, logger="loopguard_fleet")
    broker = start_broker()
    topics = TopicSet.fresh("co")
    security = operator_security(broker)

    async def create() -> None:
        await create_topics(broker.bootstrap, topics.names, PARTITIONS, security=security)

    try:
        await create()
        client = RuntimeClient(
            broker.bootstrap,
            topics=topics,
            security=security,
            reconnect_backoff=(0.1, 0.5),
            delivery_timeout=1.0,
        )
        await client.start()
        run = client.run("r-outage")
        await run.tool_call("read", {"before": True})
        await client.flush(10)
        assert client.is_connected

        os.kill(broker.pid, signal.SIGKILL)  # our own child, by its PID
        # Until the client notices, a verdict waits its timeout; afterwards it answers at once.
        await _one_call_each_way(client, "r-outage", 3)
        await _until(lambda: not client.is_connected)
        took = await _one_call_each_way(client, "r-outage", 20)
        assert max(took) < CALL_BOUND + MARGIN  # no wait at all once the outage is known

        dropped_in_outage = client.dropped  # at most the calls in flight when it died
        assert dropped_in_outage <= 3

        await asyncio.to_thread(broker.restart)
        await create()  # Tansu keeps topics in memory: create them again (Kafka has them)
        await _until(lambda: client.is_connected, deadline=30)
        await run.tool_call("read", {"after": True})
        try:
            await client.flush(10)
        except ClientError as exc:  # the calls lost in flight, reported once
            assert str(exc).startswith(f"{dropped_in_outage} events were not delivered")
        assert client.dropped == dropped_in_outage  # the twenty buffered calls were not lost
        _, close_s = await _timed(client.close)
        assert close_s < VERDICT_TIMEOUT + MARGIN
        delivered = await KafkaIO(broker.bootstrap, security).consume_until(
            topics.tool_calls,
            lambda ms: len(_since_kill(ms)) >= 24 - dropped_in_outage,
            deadline=20,
        )
    finally:
        broker.stop()
    gc.collect()
    # Every call from the kill on (3 + 20 + 1) but those lost in flight when it died.
    assert len(_since_kill(delivered)) == 24 - dropped_in_outage
    assert _retry_noise(caplog.records) == []
    lines = [line.split(" (")[0].split(" after ")[0] for line in _state_lines(caplog.records)]
    assert lines == [
        f"runtime client lost the broker {broker.bootstrap}",
        f"runtime client reconnected to {broker.bootstrap}",
    ]
