"""Kafka connections whose sockets are closed before their owner says it is done.

aiokafka closes a connection by starting to close its transport and returning a future
(`AIOKafkaConnection.close`), and in two places nothing waits for it: the bootstrap
connection of `AIOKafkaClient.bootstrap()` (closed once the metadata is in, so every
producer, consumer and admin client has one) and a connection refused or cancelled during its
handshake (API versions, SASL). Over TLS the close needs the broker's reply (close_notify)
first, so a loop that ends soon after (a client started and stopped at once, a consumer in a
thread of its own, a short probe under `asyncio.run`) leaves the socket open: a
`ResourceWarning: unclosed transport` when it is collected, later, in whatever runs then.
asyncio adds a third: a cancel that lands as the TLS handshake completes makes
`create_connection` close its new transport and raise, so aiokafka never holds it.

`broker_connection` is one direct connection, closed before its block ends.
`abandon_producer` and `stop_consumer` stop a client whose broker is gone without hanging or
cancelling their caller (two aiokafka 0.14 shutdown bugs, each described where it is handled).

This module is the one place outside streams/worker/faust/ that touches aiokafka's private
names (tests/unit/test_layers.py holds it to that); pyproject bounds aiokafka below 0.15.
`close_sockets_before_clients_close()` (run once, from `loopguard_fleet.streams.kafka`) makes
every `AIOKafkaClient` in the process do the same: its `close()` also waits for the sockets
aiokafka closed without waiting, and the socket of a connect() that fails or is cancelled is
aborted and closed before the error leaves (aiokafka's protocol class is swapped for one that
hands its transport over as soon as it is made, `_Protocol`). Each wait is bounded;
aiokafka < 0.15 (pyproject), whose `create_conn` and `AIOKafkaProtocol` this relies on.
That `close()` also keeps a cancel that aiokafka swallows (it awaits its metadata task under
`suppress(CancelledError)`): a task cancelled while it closes a client, such as the runtime
client's supervisor probing the broker, ends instead of going on (and `RuntimeClient.close()`
waiting for it forever).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any

import aiokafka.client
import aiokafka.conn
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.conn import AIOKafkaConnection, AIOKafkaProtocol
from aiokafka.errors import KafkaConnectionError

from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = [
    "abandon_producer",
    "broker_connection",
    "cancel_until_done",
    "close_sockets_before_clients_close",
    "stop_consumer",
]

_CANCEL_WAIT_S = 0.05  # between cancels of a task that is still running
_CLOSE_WAIT_S = 10.0  # a broker that never answers a TLS close: give up, do not hang


@contextlib.asynccontextmanager
async def broker_connection(
    server: str, security: ClientSecurity, *, request_timeout_ms: int = 5000
) -> AsyncIterator[Any]:
    """A connected AIOKafkaConnection to `host:port` (TLS and SASL done), closed on exit.

    A refused handshake raises aiokafka's error; the connection is closed before it leaves.
    """
    host, _, port = server.strip().rpartition(":")
    conn = AIOKafkaConnection(
        host, int(port), request_timeout_ms=request_timeout_ms, **security.aiokafka_kwargs()
    )
    await _connected(conn)
    try:
        yield conn
    finally:
        await _closed(conn)


async def _closed(conn: Any) -> None:
    """Close `conn` and wait until its socket is closed (aiokafka resolves the future then)."""
    closing = conn.close()
    # aiokafka holds no transport (refused TCP, a TLS handshake that failed or was cancelled):
    # asyncio closed the socket or `_connected` aborted it. aiokafka sets `_protocol` only once
    # create_connection has returned a transport, and only then resolves `closing`.
    if closing is None or conn._protocol is None:
        await asyncio.sleep(0)  # asyncio closes an aborted socket on its next loop turn
        return
    # asyncio.wait, not wait_for: on Python 3.11, wait_for returns the result of a future that
    # completes as its caller is cancelled, and the cancellation is lost (the caller, say a
    # task being stopped, then runs on). wait() never swallows it and never cancels `closing`.
    await asyncio.wait([closing], timeout=_CLOSE_WAIT_S)


# The transports made for the connection whose connect() runs in this task (`_connected`).
_MADE: ContextVar[list[Any] | None] = ContextVar("loopguard_made", default=None)


class _Protocol(AIOKafkaProtocol):  # type: ignore[misc]  # aiokafka has no type hints
    """aiokafka's protocol, which hands its transport to the connect() that made it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._made = _MADE.get()  # built inside connect(), so in its task's context

    def connection_made(self, transport: Any) -> None:
        """Start reading; the transport is known to connect() before create_connection returns."""
        super().connection_made(transport)
        if self._made is not None:
            self._made.append(transport)


async def _connected(conn: Any) -> None:
    """`conn.connect()`; one that fails or is cancelled has its socket closed before it leaves."""
    made: list[Any] = []
    token = _MADE.set(made)
    try:
        await conn.connect()
    except BaseException:  # refused, or cancelled (a broker probe whose owner stops)
        # Over TLS, what aiokafka or asyncio closed waits for the broker's close_notify, and
        # a cancel that lands as the TLS handshake completes leaves the transport to nobody
        # (asyncio closes it inside create_connection, which then raises). An unfinished
        # connection has nothing to flush: abort() closes its socket on the next loop turn.
        for transport in made:
            transport.abort()
        await _closed(conn)
        raise
    finally:
        _MADE.reset(token)


# The client whose bootstrap() is running in this task (a task it starts inherits it).
_BOOTSTRAPPING: ContextVar[Any] = ContextVar("loopguard_bootstrapping", default=None)
_OWN = "_loopguard_closing"  # attribute of a client: the connections it must wait for


async def _create_conn(host: str, port: int, **kwargs: Any) -> Any:
    """aiokafka's `create_conn`, recording the connection for its client; a refused or
    cancelled one is closed, socket included, before its error leaves."""
    conn = AIOKafkaConnection(host, port, **kwargs)
    await _connected(conn)
    client = _BOOTSTRAPPING.get()
    if client is not None:
        kept = [c for c in getattr(client, _OWN, ()) if not c._closed_fut.done()]
        setattr(client, _OWN, [*kept, conn])
    return conn


def _bootstrap(original: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    async def bootstrap(self: Any) -> None:
        token = _BOOTSTRAPPING.set(self)
        try:
            await original(self)
        finally:
            _BOOTSTRAPPING.reset(token)

    return bootstrap


def _close(original: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    async def close(self: Any) -> None:
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        await original(self)
        for conn in getattr(self, _OWN, ()):
            await _closed(conn)
        setattr(self, _OWN, [])
        # aiokafka awaits its metadata task under suppress(CancelledError), so a cancel of
        # the closing task that lands then is swallowed; honoured here, once all is closed.
        if task is not None and task.cancelling() > cancels:
            raise asyncio.CancelledError

    return close


def close_sockets_before_clients_close() -> None:
    """Make every AIOKafkaClient's close() wait for the sockets aiokafka closes without
    waiting (module docstring); idempotent."""
    client_class: Any = aiokafka.client.AIOKafkaClient
    if getattr(client_class, "_loopguard_closes_sockets", False):
        return
    aiokafka.client.create_conn = _create_conn  # what bootstrap() and _get_conn() call
    aiokafka.conn.AIOKafkaProtocol = _Protocol  # what AIOKafkaConnection.connect() builds
    client_class.bootstrap = _bootstrap(client_class.bootstrap)
    client_class.close = _close(client_class.close)
    client_class._loopguard_closes_sockets = True


async def cancel_until_done(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel `tasks`, again and again, until every one has ended.

    One cancel is not always enough for a task that awaits aiokafka: aiokafka suppresses
    CancelledError in places (its client's close(), whose case `_close` handles), and on
    Python 3.11 `asyncio.wait_for` loses a cancel that lands as its call completes; the task
    then runs on into its next await, where nothing would cancel it again.
    """
    pending = {t for t in tasks if not t.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_CANCEL_WAIT_S)


async def abandon_producer(producer: AIOKafkaProducer) -> None:
    """Stop a producer whose broker is lost, failing what it still holds, without waiting.

    aiokafka 0.14 never gives up on a batch whose partition leader is known but dead: its
    sender, even cancelled, waits for in-flight requests that wait for fresh metadata, so
    `stop()` waits for the broker to come back. So the sender task is cancelled until it
    ends (each cancel reaches the request it awaits), the accumulator fails every batch
    (its own `fail_all`), and `stop()` then has nothing left to wait for.
    """
    sender = producer._sender
    accumulator = producer._message_accumulator
    task = getattr(sender, "sender_task", None)
    if isinstance(task, asyncio.Task) and accumulator is not None:
        await cancel_until_done([task])
        batches = [b for q in accumulator._batches.values() for b in q]
        batches += list(accumulator._pending_batches)
        accumulator.fail_all(KafkaConnectionError("the broker was lost"))
        for batch in batches:  # the callers' futures report the loss (`dropped`), not these
            if batch.future.done() and not batch.future.cancelled():
                batch.future.exception()
    await producer.stop()


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop a consumer; its CancelledError must not reach the task stopping it.

    aiokafka 0.14's `Fetcher.close` cancels its pending fetch requests and awaits them
    without catching their CancelledError, which then cancels whoever called `stop()` and
    skips the rest of the shutdown. So `stop()` runs in a task of its own, and when it ends
    that way the remaining fetch requests are cancelled and the client closed here.
    """
    task = asyncio.create_task(consumer.stop())
    await asyncio.wait([task])
    if not task.cancelled():
        task.result()
        return
    fetcher = consumer._fetcher
    for pending in list(fetcher._pending_tasks):
        pending.cancel()
    client = consumer._client
    if client is not None:
        await client.close()
