"""Exactly-once: every record the worker produces is held until the commit, and sent in the
transaction of the input partition it came from.

With `LOOPGUARD_PROCESSING_GUARANTEE=exactly_once`, Faust writes through one transactional
producer per input partition and commits each transaction together with the offsets acked so
far (faust/transport/consumer.py, `TransactionManager.commit`). The worker writes a run's state
only at the checkpoint before that commit (streams/worker/agent.py), so a decision sent as soon
as it is made could be committed in a transaction that holds neither its state nor its event's
offset; after a crash the event is processed again from the older state and the decision is
published a second time (tests/chaos/test_kafka_faults.py). So decisions, like everything the
other agents produce (fleet contributions and signals, policy switches, OTLP events, dead
letters), go through the commit gate (streams/worker/commit_gate.py): held to the checkpoint,
then sent by `transactional_sender` in the transaction of their source partition, which the
commit closes with offsets that cover the record they came from and nothing after; a redelivered
event is then dropped by the engine's seq watermark and publishes nothing. The price is
latency: a verdict waits for the next commit (the commit interval).

Faust's own routing cannot be used for any of them. It picks a record's transaction by the
partition number the record goes *to*, and only for a topic its consumer has metadata for: the
control topic, which the worker does not consume, has none, and Faust sent every decision
outside any transaction, visible at once (found with a 0.1 s commit interval: 99 decisions of
a SIGKILLed worker published again by its successor). A record for another partition would go
into that partition's transaction, or, on a worker that does not own it, into none
(`ProducerSendError: No transaction producer found` stopped the worker:
tests/chaos/test_fleet_outage.py).

The checkpoint keeps the agent's lock for its whole length here (streams/worker/agent.py): a
batch processed while it writes would send its records into the transaction that the commit
closes with offsets that do not include that batch's events.
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
    """The outbox under exactly-once: decisions go through the commit gate instead
    (streams/worker/agent.py, `_FaustOutputs`), so there is nothing here to send or wait for."""

    def add(self, key: bytes, value: bytes) -> None:
        """Never called: a decision under exactly-once goes to the commit gate."""
        raise RuntimeError("under exactly-once, decisions go through the commit gate")

    async def send(self, *, urgent: bool) -> None:
        """Nothing to send before the checkpoint, verdicts included."""
        del urgent

    def sent_last(self) -> Sequence[asyncio.Future[Any]]:
        """Nothing is sent here."""
        return ()

    def delivery(self) -> _Nothing:
        """Nothing to deliver: the gate's delivery sends the decisions."""
        return _Nothing()

    async def wait_delivered(self) -> None:
        """Nothing to wait for: the gate's delivery sends the decisions."""


class _Nothing:
    """The empty delivery."""

    async def wait(self) -> None:
        """Nothing to wait for."""
