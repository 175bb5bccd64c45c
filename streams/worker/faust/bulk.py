"""A partition's fetched records handed to the agent as one channel item (`Bulk`).

Today's direct delivery (delivery.py) still makes, for every record, a Faust message, a Faust
event, a queue put and get, a tracking entry and an ack: about a quarter of the worker's time
on workload P (docs/performance.md). When the drain loop (drain.py) finds a
partition's records of one fetch in one run of consecutive offsets, and nothing on the
conductor's path could wait, it puts them into the agent's channel queue as one `Bulk`.

What Faust does per record is then done once for the bulk, with the same effect:
- the Faust message and event of the bulk's *last* record stand for it: the message is
  tracked in the consumer's unacked set while the agent works on the bulk (a rebalance's
  `wait_empty` and a graceful stop wait for it), holds the channel's reference, and the event
  routes the run table's reads and writes (internals.py, `TableStore`);
- the ack (batches.py, `ack_all`) adds the bulk's offsets to the acked offsets as one range
  (acked.py), counts each for commit-every, and only from the committed offset on, as Faust's
  per-record ack does.

The driver reads a bulk's records as `RecordView`s: the fields of Faust's message it reads,
the timestamp converted to seconds exactly as Faust's `_to_message` converts it, so a record
decides the same whichever way it came (streams/processing/driver.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

__all__ = ["Bulk", "RecordView", "messages_of", "records_in"]


class RecordView(NamedTuple):
    """A fetched record as the driver reads it (the driver's `Message` protocol)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float | None  # seconds, as Faust's `_to_message` gives it


class Bulk:
    """Records of one partition, consecutive offsets, delivered to the agent as one item."""

    __slots__ = ("event", "message", "records")

    def __init__(self, event: Any, records: list[Any]) -> None:
        self.event = event  # the Faust event of the last record
        self.message = event.message  # its Faust message: tracked, referenced, acked
        self.records = records  # aiokafka `ConsumerRecord`s, lowest offset first


def records_in(item: Any) -> int:
    """How many input records a channel item holds (a Faust event holds one)."""
    return len(item.records) if type(item) is Bulk else 1


def messages_of(items: Iterable[Any]) -> Iterator[Any]:
    """The input records of channel items (Faust events and bulks), in order, as messages."""
    for item in items:
        if type(item) is not Bulk:
            yield item.message
            continue
        for r in item.records:
            ts = r.timestamp
            yield RecordView(
                r.topic, r.partition, r.offset, r.key, r.value, None if ts is None else ts / 1000.0
            )
