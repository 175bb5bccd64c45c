"""Waiting for a broker that is not up yet: retry with backoff, then give up in one line.

A worker started beside its broker (compose, Kubernetes, `make run`) often starts first; it
retries its start-up against the broker for `LOOPGUARD_BROKER_WAIT_SECONDS` and then exits
with EXIT_BROKER_UNREACHABLE (streams/cli_errors.py) and one line on stderr.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError

from loopguard_fleet.streams.errors import StreamError

__all__ = ["BrokerUnreachable", "retry_until_reachable"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")
FIRST_DELAY_S = 0.2
MAX_DELAY_S = 5.0
_CONNECTION_ERRORS = (
    KafkaConnectionError,
    KafkaTimeoutError,
    NodeNotReadyError,
    OSError,
    TimeoutError,
)


class BrokerUnreachable(StreamError, ConnectionError):
    """No broker answered within the wait; the message names the broker and the last error."""


async def retry_until_reachable(
    attempt: Callable[[], Awaitable[_T]],
    broker: str,
    wait_s: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> _T:
    """`attempt()` until it does not fail to connect, doubling the delay, for `wait_s` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    delay = FIRST_DELAY_S
    tries = 0
    client_log = logging.getLogger("aiokafka")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)  # its "Unable connect" per attempt: ours says it once
    try:
        while True:
            tries += 1
            try:
                return await attempt()
            except _CONNECTION_ERRORS as exc:
                left = deadline - loop.time()
                reason = str(exc) or type(exc).__name__
                if left <= 0:
                    waited = f" after {wait_s:g} s ({tries} attempts)" if tries > 1 else ""
                    raise BrokerUnreachable(
                        f"broker {broker} unreachable{waited}: {reason}"
                    ) from exc
                if tries == 1:
                    log.warning("broker %s not reachable yet (%s); retrying for up to %g s",
                                broker, reason, wait_s)  # fmt: skip
                await sleep(min(delay, left))
                delay = min(delay * 2, MAX_DELAY_S)
    finally:
        client_log.setLevel(level)
