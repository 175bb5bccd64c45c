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

Under exactly-once (`Transactional`) each record names the input topic-partition it was
produced from (`source`), and the gate holds it until the checkpoint takes it with the
offsets: the delivery then sends it in that partition's transaction
(streams/worker/faust/internals.py, "Transactional producers by source"), which the commit
closes with offsets that cover the record it came from and nothing after. A record held for
a partition whose ownership changed is dropped (`forget`): the partition is read again from
its committed offset, and its next owner produces the record again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, Protocol

from loopguard_fleet.streams.processing.outbox import wait_all

__all__ = ["CommitGate", "GateDelivery", "Held", "InputPartition", "Snapshots", "Transactional"]

InputPartition = tuple[str, int]  # (topic, partition): equal to, and hashed as, Faust's TP
# A record held under exactly-once: (source, topic, key, value, destination partition or None).
Held = tuple[InputPartition, str, bytes | None, bytes, int | None]


class Transactional(Protocol):
    """Sends one record in the transaction of the input partition it was produced from."""

    async def __call__(
        self,
        source: InputPartition,
        topic: str,
        key: bytes | None,
        value: bytes,
        partition: int | None,
    ) -> asyncio.Future[Any] | None:
        """The record's delivery future; None when the source's transaction is gone."""
        ...


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
        self,
        futures: list[asyncio.Future[Any]],
        drain: Callable[[], Awaitable[None]],
        held: list[Held] | None = None,
        transactional: Transactional | None = None,
    ) -> None:
        self._futures = futures
        self._drain = drain
        self._held = held or []
        self._transactional = transactional
        self.dropped = 0  # held records whose source's transaction was gone

    def __bool__(self) -> bool:
        return bool(self._futures or self._held)

    async def wait(self) -> None:
        """Send the held records in their sources' transactions, hand Faust's buffer on, then
        wait for every acknowledgement; OutputLost if one failed."""
        if self._held and self._transactional is not None:
            held, self._held = self._held, []
            for source, topic, key, value, partition in held:
                fut = await self._transactional(source, topic, key, value, partition)
                if fut is None:
                    self.dropped += 1  # revoked meanwhile: its next owner produces it again
                else:
                    self._futures.append(fut)
        if not self._futures:
            return
        await self._drain()  # a record still in Faust's buffer has no acknowledgement coming
        await wait_all(self._futures, "a record produced before the commit failed")


class CommitGate:
    """The input records processed and the records produced from them, per checkpoint."""

    def __init__(
        self, drain: Callable[[], Awaitable[None]], transactional: Transactional | None = None
    ) -> None:
        self._drain = drain  # hands Faust's producer buffer on (drain_producer_buffer)
        self._transactional = transactional  # exactly-once: records held to the checkpoint
        self._held: list[Held] = []
        # The offset after the last record processed, per partition: the detection agent
        # writes it directly for each record (`read` is the same, for one).
        self.read_to: dict[InputPartition, int] = {}
        self._sent: list[asyncio.Future[Any]] = []
        self._prune_at = _PRUNE_AT

    def send(
        self,
        channel: Any,
        key: bytes | None,
        value: bytes,
        partition: int | None = None,
        *,
        source: InputPartition,
    ) -> None:
        """Produce one record on a Faust topic, from a record of `source`; the next checkpoint
        waits for its delivery (under exactly-once, sends it: the module docstring)."""
        if self._transactional is not None:
            self._held.append((source, channel.get_topic_name(), key, value, partition))
            return
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
        held, self._held = self._held, []
        self._prune_at = _PRUNE_AT
        return dict(self.read_to), GateDelivery(sent, self._drain, held, self._transactional)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the offsets of partitions whose ownership changed, and the records held from
        them: they commit nothing, and produce nothing, until read again."""
        gone = set(partitions)
        for tp in [tp for tp in self.read_to if tp[1] in gone]:
            del self.read_to[tp]
        if self._held:  # read again from the committed offset, and produced again then
            self._held = [h for h in self._held if h[0][1] not in gone]
