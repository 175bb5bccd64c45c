"""Exactly-once: decisions and every other record held until the commit, so that each
shares the transaction of the input partition it came from.

With `LOOPGUARD_PROCESSING_GUARANTEE=exactly_once`, Faust writes through one transactional
producer per partition and commits each transaction together with the input offsets acked so
far (faust/transport/consumer.py, `TransactionManager.commit`). The worker writes a run's
state only at the checkpoint before that commit (streams/worker/agent.py), so a decision sent as
soon as it is made could be committed in a transaction that holds neither its state nor its
event's offset; after a crash the event is processed again from the older state and the
decision is published a second time (measured: 19 duplicates read by a `read_committed`
consumer after a worker SIGKILL, tests/chaos/test_kafka_faults.py). Holding decisions until
the checkpoint puts every decision in the transaction that holds its run's state: a
redelivered event is then dropped by the engine's seq watermark and publishes nothing. The
price is latency: a verdict waits for the next commit (Faust's commit interval).

The checkpoint keeps the agent's lock for its whole length here (streams/worker/agent.py): a
batch processed while it writes would send its dead letters into the transaction that the
commit closes with offsets that do not include that batch's events.

What the other agents produce (fleet contributions and signals, policy switches, OTLP
events, dead letters) is held by the commit gate the same way and sent by
`transactional_sender` in the transaction of the input partition it came from, wherever it
goes (streams/worker/commit_gate.py). Faust alone would pick the transaction of the partition
a record goes *to*: another partition's, or none on a worker that does not own that partition
(a fleet contribution keyed by signature stopped the worker when partitions moved:
tests/chaos/test_fleet_outage.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from loopguard_fleet.streams.worker.commit_gate import InputPartition, Transactional
from loopguard_fleet.streams.worker.faust.internals import send_in_transaction, transactional_id

__all__ = ["TransactionalOutbox", "transactional_sender"]


def transactional_sender(app: Any) -> Transactional:
    """Sends a record in the transaction of the input topic-partition it came from."""

    async def send(
        source: InputPartition, topic: str, key: bytes | None, value: bytes, partition: int | None
    ) -> asyncio.Future[Any] | None:
        tid = transactional_id(app, *source)
        return await send_in_transaction(app, tid, topic, key, value, partition)

    return send


class TransactionalOutbox:
    """Queues control messages and hands them to Faust only at the checkpoint."""

    def __init__(self, wiring: Any) -> None:
        self._control = wiring.control
        self._pending: list[tuple[bytes, bytes]] = []

    def add(self, key: bytes, value: bytes) -> None:
        """Queue one decision until the next checkpoint."""
        self._pending.append((key, value))

    async def send(self, *, urgent: bool) -> None:
        """Nothing before the checkpoint, verdicts included (see the module docstring)."""
        del urgent

    def sent_last(self) -> Sequence[asyncio.Future[Any]]:
        """Nothing is sent before the checkpoint."""
        return ()

    def delivery(self) -> _Queued:
        """At the checkpoint: queue every held decision in Faust's producer buffer.

        The checkpoint drains that buffer into the partitions' transactional producers before
        Faust commits their transactions with the offsets; the commit delivers them, so there
        is nothing more to wait for here.
        """
        pending, self._pending = self._pending, []
        for key, value in pending:
            self._control.send_soon(key=key, value=value)
        return _Queued()

    async def wait_delivered(self) -> None:
        """At the checkpoint: queue every held decision in Faust's producer buffer."""
        await self.delivery().wait()


class _Queued:
    """Decisions queued in Faust's buffer: the checkpoint's drain and the commit deliver them."""

    async def wait(self) -> None:
        """Nothing to wait for before the drain."""
