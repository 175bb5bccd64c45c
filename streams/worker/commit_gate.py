"""How far a commit may go: past an input record only once everything produced from it was
delivered (docs/reliability.md, "The commit protocol").

Every agent of the worker (the detection agent, the fleet task, any agent reading a topic of
the worker's group) sends what it produces from a record through the gate (`send`), then
notes the record processed (`read`). The checkpoint takes both at once (`take`, synchronous,
so between two records of every agent): the offsets a commit may not pass, and the delivery
of every record sent up to then. It waits for that delivery before the commit; a record that
was not delivered raises `OutputLost`, and nothing is committed past it.

The detection agent's decisions leave through its own outbox (streams/processing/outbox.py),
whose delivery the checkpoint awaits as well; everything else goes through here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, Protocol

from loopguard_fleet.streams.processing.outbox import wait_all

__all__ = ["CommitGate", "GateDelivery", "InputPartition", "Snapshots"]

InputPartition = tuple[str, int]  # (topic, partition): equal to, and hashed as, Faust's TP
# Sent records kept before the delivered ones are dropped (failures stay until checked).
_PRUNE_AT: Final = 4096


class Snapshots(Protocol):
    """State an agent keeps beside the run table's, written at every checkpoint (the fleet
    task's windows: streams/worker/fleet.py)."""

    def take_snapshots(self) -> Callable[[], None] | None:
        """Under the checkpoint's lock: note in the gate the offsets the state taken reaches,
        and return what writes it (after the delivery, before the commit), or None."""
        ...

    def untake_snapshots(self) -> None:
        """The checkpoint stopped after taking: what it took is taken again next time."""
        ...


class GateDelivery:
    """The records sent through the gate up to a `take`: `wait` until all are delivered."""

    def __init__(
        self, futures: list[asyncio.Future[Any]], drain: Callable[[], Awaitable[None]]
    ) -> None:
        self._futures = futures
        self._drain = drain

    def __bool__(self) -> bool:
        return bool(self._futures)

    async def wait(self) -> None:
        """Hand Faust's buffer on, then wait for every acknowledgement; OutputLost if one
        failed."""
        if not self._futures:
            return
        await self._drain()  # a record still in Faust's buffer has no acknowledgement coming
        await wait_all(self._futures, "a record produced before the commit failed")


class CommitGate:
    """The input records processed and the records produced from them, per checkpoint."""

    def __init__(self, drain: Callable[[], Awaitable[None]]) -> None:
        self._drain = drain  # hands Faust's producer buffer on (drain_producer_buffer)
        # The offset after the last record processed, per partition: the detection agent
        # writes it directly for each record (`read` is the same, for one).
        self.read_to: dict[InputPartition, int] = {}
        self._sent: list[asyncio.Future[Any]] = []
        self._prune_at = _PRUNE_AT

    def send(
        self, channel: Any, key: bytes | None, value: bytes, partition: int | None = None
    ) -> None:
        """Produce one record on a Faust topic; the next checkpoint waits for its delivery."""
        self.track(channel.send_soon(key=key, value=value, partition=partition))

    def track(self, fut: asyncio.Future[Any]) -> None:
        """Wait for a record's delivery (its producer's future) at the next checkpoint."""
        sent = self._sent
        sent.append(fut)
        if len(sent) > self._prune_at:  # at twice what the last pruning kept: linear overall
            self._sent = [f for f in sent if not f.done() or f.exception() is not None]
            self._prune_at = max(_PRUNE_AT, 2 * len(self._sent))

    def read(self, topic: str, partition: int, offset: int) -> None:
        """A record was processed and what it produced was sent: a commit may pass it, once
        that is delivered."""
        self.read_to[topic, partition] = offset + 1

    def take(self) -> tuple[dict[InputPartition, int], GateDelivery]:
        """The offsets the next commit may not pass, and the delivery to await before it."""
        sent, self._sent = self._sent, []
        self._prune_at = _PRUNE_AT
        return dict(self.read_to), GateDelivery(sent, self._drain)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the offsets of partitions whose ownership changed: they commit nothing until
        read again."""
        gone = set(partitions)
        for tp in [tp for tp in self.read_to if tp[1] in gone]:
            del self.read_to[tp]
