"""The policy topic on the broker: create it, read its records, publish a version.

The topic is compacted with one partition and one key (config/policy_record.py), so its
records are the policy's history, oldest first, and compaction keeps at least the latest.
"""

from __future__ import annotations

from aiokafka import AIOKafkaProducer
from aiokafka.errors import TopicAuthorizationFailedError

from loopguard_fleet.config.policy_record import POLICY_KEY
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.kafka.security import PLAINTEXT, BrokerRefused, ClientSecurity
from loopguard_fleet.streams.kafka.topic_reader import TopicRecord, read_topic_records

__all__ = ["ensure_policy_topic", "publish_policy", "read_policy_records"]

POLICY_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


async def ensure_policy_topic(
    bootstrap: str,
    topic: str,
    *,
    replication_factor: int = 1,
    wait: float = 15.0,
    security: ClientSecurity = PLAINTEXT,
) -> None:
    """Create the policy topic (compacted, one partition); an existing one is fine."""
    await create_topics(
        bootstrap,
        [topic],
        1,
        replication_factor=replication_factor,
        configs={topic: POLICY_TOPIC_CONFIGS},
        wait=wait,
        security=security,
    )


async def read_policy_records(
    bootstrap: str, topic: str, *, timeout_s: float = 15.0, security: ClientSecurity = PLAINTEXT
) -> list[TopicRecord]:
    """Every record of the policy topic, oldest first."""
    return await read_topic_records(bootstrap, topic, timeout_s, idle_s=0.3, security=security)


async def publish_policy(
    bootstrap: str, topic: str, value: bytes, *, security: ClientSecurity = PLAINTEXT
) -> int:
    """Publish one policy record and wait for the broker's acknowledgement; its offset."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", **security.aiokafka_kwargs()
    )
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value=value, key=POLICY_KEY, partition=0)
    except TopicAuthorizationFailedError as exc:
        what = f"writing to {topic!r} (push needs the operator principal: docs/security.md)"
        raise BrokerRefused(f"not authorized: {what}: {type(exc).__name__}") from exc
    finally:
        await producer.stop()
    return int(meta.offset)
