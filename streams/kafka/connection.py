"""One direct connection to one broker, whose socket is closed when the block ends.

aiokafka closes a connection by starting to close its transport and returning a future
(`AIOKafkaConnection.close`), and in two places it does not wait for it: the bootstrap
connection of `AIOKafkaClient.bootstrap()` and a connection refused during its TLS or SASL
handshake. Over TLS the close needs the broker's reply (close_notify) first, so a loop that
ends right after such a close (a short probe run with `asyncio.run`) leaves the socket open:
a `ResourceWarning: unclosed transport` when it is collected, later, in whatever runs then.
Here the caller's block ends only once the socket is closed (or a bounded wait has passed).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiokafka.conn import AIOKafkaConnection

from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = ["broker_connection"]

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
    try:
        await conn.connect()
        yield conn
    finally:
        await _closed(conn)


async def _closed(conn: Any) -> None:
    """Close `conn` and wait until its socket is closed (aiokafka resolves the future then)."""
    closing = conn.close()
    # No transport was made (refused TCP, failed TLS handshake): asyncio closed the socket.
    # aiokafka sets `_protocol` only once a transport exists, and only then resolves `closing`.
    if closing is None or conn._protocol is None:
        await asyncio.sleep(0)  # asyncio closes an aborted socket on its next loop turn
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(closing), _CLOSE_WAIT_S)
