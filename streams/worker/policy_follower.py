"""Follow the policy topic: each valid version becomes a switch record of every input
topic-partition (docs/policy.md, "Where a switch applies").

The topic's one partition is consumed by one Faust agent of the worker group, so one worker
owns it; `PolicySwitches` writes each valid record as a `policy_switch` record to every
partition of both input topics (tool calls and compactions: each topic-partition switches at
its own offset, so a compaction event's policy does not depend on how far the worker had
read the tool-calls partition), where each worker applies it in offset order
(streams/processing/policy_switch.py), as fleet signals are (streams/worker/fleet.py); before
a partition's first switch, LOOPGUARD_POLICY_FILE's policy (else the defaults) decides it. An
invalid record never replaces the last good version: it is dead-lettered with its reason,
counted in `loopguard_events_rejected_total{reason}` and logged in one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from loopguard_fleet.config.policy_record import (
    POLICY_KEY,
    PolicyRecordError,
    read_policy_record,
)
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.profiles import Semantics
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.policy_switch import encode_switch
from loopguard_fleet.streams.wire.codec import encode
from loopguard_fleet.streams.wire.deadletter import Origin, dead_letter
from loopguard_fleet.streams.worker.app import Wiring
from loopguard_fleet.streams.worker.commit_gate import CommitGate
from loopguard_fleet.streams.worker.faust.batches import take_batches
from loopguard_fleet.streams.worker.faust.bulk import messages_of
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema

__all__ = ["PolicySwitches", "install_policy_switches"]

log = logging.getLogger(__name__)


class PolicySwitches:
    """The policy topic's owner: each valid record to `send` as a switch record, each invalid
    one dead-lettered."""

    def __init__(
        self,
        topic: str,
        *,
        semantics: Semantics,
        send: Callable[[bytes], None],
        dead_letter: Callable[[bytes | None, bytes], None],
        metrics: Metrics,
        prefix_bytes: int,
    ) -> None:
        self._topic = topic
        self._semantics = semantics
        self._send = send
        self._dead_letter = dead_letter
        self._metrics = metrics
        self._prefix_bytes = prefix_bytes

    def take(self, offset: int, value: bytes | None, key: bytes | None, ts_ms: int | None) -> None:
        """Send one policy record on as a switch record, or refuse it (dead letter, counter,
        one log line)."""
        try:
            policy = read_policy_record(value).with_semantics(self._semantics)
        except PolicyRecordError as exc:
            detail = str(exc).replace("\n", "; ")[:300]
            log.warning(
                "policy record at offset %d refused (%s), keeping the last good version: %s",
                offset,
                exc.reason,
                detail,
            )
            origin = Origin(self._topic, 0, offset, ts_ms, key)
            letter = dead_letter(origin, value, exc.reason, detail, prefix_bytes=self._prefix_bytes)
            self._dead_letter(key, encode(letter))
            self._metrics.count_rejected(exc.reason)
            return
        assert value is not None  # read_policy_record refuses an empty record
        self._send(encode_switch(policy.version, json.loads(value), self._topic, offset))
        log.info(
            "policy %s from offset %d sent to every input topic-partition", policy.version, offset
        )


def install_policy_switches(
    wiring: Wiring, settings: Settings, gate: CommitGate, metrics: Metrics
) -> None:
    """Register the agent that owns the policy topic in the worker group. `gate`: the
    detection agent's, so that a commit passes a policy record only once its switches and
    dead letters are delivered."""
    assert settings.policy_topic is not None
    app = wiring.app
    raw = RawSchema()
    topic = app.topic(settings.policy_topic, partitions=1, schema=raw)
    inputs = [
        app.topic(name, partitions=settings.partitions, schema=raw)
        for name in (settings.topic_tool_calls, settings.topic_compactions)
    ]
    dead_letters = wiring.dead_letter

    source = (settings.policy_topic, 0)  # what it sends, it sends from the one partition

    def send(value: bytes) -> None:
        for topic in inputs:  # each input topic-partition applies it in its own order
            for p in range(settings.partitions):
                gate.send(topic, POLICY_KEY, value, p, source=source)

    switches = PolicySwitches(
        settings.policy_topic,
        semantics=settings.semantics,
        send=send,
        dead_letter=lambda key, value: gate.send(dead_letters, key, value, source=source),
        metrics=metrics,
        prefix_bytes=settings.dead_letter_prefix_bytes,
    )

    @app.agent(topic, name="loopguard-policy", concurrency=1)
    async def policy_owner(stream: Any) -> None:
        """Send each policy record on as switch records (batches as the detection agent's)."""
        async for events in take_batches(stream, settings.batch_max_events):
            for msg in messages_of(events):
                ts_ms = None if msg.timestamp is None else int(msg.timestamp * 1000)
                switches.take(msg.offset, msg.value, msg.key, ts_ms)
                gate.read(msg.topic, msg.partition, msg.offset)
