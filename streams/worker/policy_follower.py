"""Follow the policy topic: each valid new version decides from the agent's next batch.

The worker reads the topic to its end before it starts (`initial_policy`: the last valid
record wins over LOOPGUARD_POLICY_FILE), then `PolicyFollower` reads each record as it comes
and hands a valid one to the agent (`RunProcessor.set_policy`, between two batches). An
invalid record never replaces the last good version: it is dead-lettered with its reason,
counted in `loopguard_events_rejected_total{reason}` and logged in one line
(docs/policy.md, "Changing the policy").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from loopguard_fleet.config import Policy
from loopguard_fleet.config.policy_record import PolicyRecordError, read_policy_record
from loopguard_fleet.detectors.profiles import Semantics
from loopguard_fleet.streams.kafka.security import ClientSecurity
from loopguard_fleet.streams.kafka.topic_reader import TopicRecord
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.wire.codec import encode
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter

__all__ = ["PolicyFollower", "initial_policy"]

log = logging.getLogger(__name__)

#: How long one fetch waits for a new record: the bound on a new version's delay.
FETCH_WAIT_MS = 200


def initial_policy(
    records: Sequence[TopicRecord], fallback: Policy, semantics: Semantics
) -> tuple[Policy, int]:
    """The policy to start with (the topic's last valid record, else `fallback`) and the
    offset to follow the topic from."""
    start = records[-1].offset + 1 if records else 0
    for record in reversed(records):
        try:
            return read_policy_record(record.value).with_semantics(semantics), start
        except PolicyRecordError as exc:
            log.warning(
                "policy record at offset %d refused (%s): %s", record.offset, exc.reason, exc
            )
    return fallback, start


class PolicyFollower:
    """Reads the policy topic from an offset and applies each valid version as it comes."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        start: int,
        *,
        semantics: Semantics,
        apply: Callable[[Policy], Awaitable[None]],
        dead_letter: Callable[[bytes | None, bytes], None],
        metrics: Metrics,
        prefix_bytes: int,
        security: ClientSecurity,
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._start = start
        self._semantics = semantics
        self._apply = apply
        self._dead_letter = dead_letter
        self._metrics = metrics
        self._prefix_bytes = prefix_bytes
        self._security = security

    async def run(self) -> None:
        """Follow the topic until cancelled (the worker stopping)."""
        tp = TopicPartition(self._topic, 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self._bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=FETCH_WAIT_MS,
            **self._security.aiokafka_kwargs(),
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, self._start)
            while True:
                batch = await consumer.getmany(tp, timeout_ms=FETCH_WAIT_MS)
                for record in batch.get(tp, ()):
                    await self.take(record)
        finally:
            await asyncio.shield(consumer.stop())

    async def take(self, record: Any) -> None:
        """Apply one policy record, or refuse it (dead letter, counter, one log line)."""
        try:
            policy = read_policy_record(record.value).with_semantics(self._semantics)
        except PolicyRecordError as exc:
            detail = str(exc).replace("\n", "; ")[:300]
            log.warning(
                "policy record at offset %d refused (%s), keeping the last good version: %s",
                record.offset,
                exc.reason,
                detail,
            )
            origin = Origin(self._topic, 0, record.offset, record.timestamp, record.key)
            letter = dead_letter(
                origin, record.value, exc.reason, detail, prefix_bytes=self._prefix_bytes
            )
            self._dead_letter(record.key, encode(letter))
            self._metrics.count_rejected(exc.reason)
            return
        await self._apply(policy)
        log.info("policy %s from offset %d decides from now on", policy.version, record.offset)
