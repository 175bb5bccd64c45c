"""aiokafka's per-retry connection errors, counted instead of logged while a client runs.

With the broker down aiokafka logs an ERROR for every reconnect attempt (thousands a
minute). A `RuntimeClient` logs one line per state change instead (streams/client/runtime.py),
so while one is started the records below are dropped from aiokafka's loggers and counted;
the client's next state line reports the count. Other aiokafka records pass untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

__all__ = ["RETRY_NOISE"]

# aiokafka 0.14's messages for a broker it cannot reach (client.py, producer/sender.py,
# consumer/fetcher.py): each is logged once per retry.
_TEMPLATES: Final = (
    "Unable connect to",
    "Unable to update metadata",
    "Unable to request metadata",
    "Failed fetch messages",
    "Failed fetch offsets",
    "Cannot send",
    "Could not send",
    "Got error produce response",
)
_LOGGERS: Final = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.admin.client",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
)


class RetryNoise(logging.Filter):
    """Drops and counts aiokafka's retry records while at least one listener is attached."""

    def __init__(self) -> None:
        super().__init__()
        self.suppressed = 0
        self._listeners: list[Callable[[], None]] = []

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for a retry record; tell the listeners the broker is misbehaving."""
        if record.levelno < logging.WARNING or not isinstance(record.msg, str):
            return True
        if not record.msg.startswith(_TEMPLATES):
            return True
        self.suppressed += 1
        for listener in list(self._listeners):
            listener()
        return False

    def attach(self, listener: Callable[[], None]) -> None:
        """Start filtering (first listener) and call `listener` on each dropped record."""
        if not self._listeners:
            for name in _LOGGERS:
                logging.getLogger(name).addFilter(self)
        self._listeners.append(listener)

    def detach(self, listener: Callable[[], None]) -> None:
        """Stop calling `listener`; the last one to leave removes the filter."""
        if listener in self._listeners:
            self._listeners.remove(listener)
        if not self._listeners:
            for name in _LOGGERS:
                logging.getLogger(name).removeFilter(self)


RETRY_NOISE: Final = RetryNoise()
