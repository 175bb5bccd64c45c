"""Decisions under exactly-once: held until the commit, so they share its transaction.

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
"""

from __future__ import annotations

from typing import Any

__all__ = ["TransactionalOutbox"]


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
