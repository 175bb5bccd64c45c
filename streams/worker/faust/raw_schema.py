"""A Faust schema for topics of raw bytes: the record's key and value, as they came.

Every LoopGuard topic carries bytes (`key_type=bytes`, `"raw"` serializers): the worker
decodes the value itself (streams/wire/codec.py, JSON as JavaScript reads it). Faust's
`Schema` still passes each key and value through its serializer registry — a codec lookup
by name, `want_bytes` twice and several settings reads per record —, which returns the same
bytes object and cost ~10 % of the worker's time on workload P (docs/performance.md).
`RawSchema.compile` builds the event from the record directly. It
overrides only public Faust API (`Schema.compile`; the `Event` setting `App.create_event`
instantiates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import faust

__all__ = ["RawSchema"]


class RawSchema(faust.Schema[bytes, bytes]):
    """Keys and values of type bytes, with no serializer: the event holds the record's bytes."""

    def __init__(self) -> None:
        super().__init__(
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

    def event_maker(self, app: Any) -> Callable[[Any], Any]:
        """record -> event, the key and value unchanged, as `app.create_event` builds it."""
        # With the event class looked up once: reading it from `app.conf` (a slow
        # `__getattribute__`) per record cost 3 % on workload P.
        event_class = app.conf.Event

        def make(message: Any) -> Any:
            return event_class(app, message.key, message.value, message.headers, message)

        return make

    def compile(self, app: Any, **kwargs: Any) -> Any:
        """The decode function of a topic (the conductor awaits it): `event_maker`'s event."""
        make = self.event_maker(app)

        async def decode(message: Any, *, propagate: bool = False) -> Any:
            return make(message)

        return decode
