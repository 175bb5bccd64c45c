"""The one admin path: topics created explicitly, then verified from all-topics metadata.

Some brokers create a topic, with their own partition count, on any metadata request that
names it (Tansu always, Apache Kafka with `auto.create.topics.enable`; aiokafka asks with
`allow_auto_topic_creation=true`, streams/embedded/tansu.py). So every topic LoopGuard uses is
created here before a client touches it, and verified with a request that names no topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError

from loopguard_fleet.streams.errors import BrokerError
from loopguard_fleet.streams.kafka.security import (
    PLAINTEXT,
    ClientSecurity,
    authorization_refusal,
    diagnose_refusal,
)

__all__ = ["create_topics", "topic_partitions"]

_TOPIC_ALREADY_EXISTS: Final = 36


async def create_topics(
    bootstrap: str | list[str],
    names: Iterable[str],
    partitions: int,
    *,
    replication_factor: int = 1,
    configs: Mapping[str, Mapping[str, str]] | None = None,
    wait: float = 10.0,
    security: ClientSecurity = PLAINTEXT,
) -> None:
    """Create topics (existing ones are fine), wait up to `wait` s, verify partition counts.

    `configs` maps a topic name to its topic configs, e.g. `{"x": {"cleanup.policy": "compact"}}`.
    """
    wanted = list(dict.fromkeys(names))
    admin = await _started_admin(bootstrap, wait, security)
    try:
        configs = configs or {}
        new = [
            NewTopic(n, partitions, replication_factor, topic_configs=dict(configs.get(n, {})))
            for n in wanted
        ]
        response = await admin.create_topics(new, timeout_ms=int(wait * 1000))
        for topic, code, *rest in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                refused = authorization_refusal(code, f"creating topic {topic!r}", security)
                if refused is not None:
                    raise refused
                detail = rest[0] if rest else ""
                raise BrokerError(f"cannot create topic {topic!r}: error {code} {detail}".strip())
        found = await _wait_for_topics(admin, wanted, wait)
    finally:
        await admin.close()
    wrong = {n: found[n] for n in wanted if found[n] != partitions}
    if wrong:
        raise BrokerError(
            f"topics exist with the wrong partition count (want {partitions}): {wrong}; "
            "was one auto-created by a client before create_topics ran?"
        )


async def topic_partitions(
    bootstrap: str | list[str],
    names: Iterable[str],
    wait: float = 10.0,
    *,
    security: ClientSecurity = PLAINTEXT,
    request_timeout: float | None = None,
) -> dict[str, int]:
    """Partition count of each named topic, waiting up to `wait` seconds for all to exist
    (each broker request up to `request_timeout` seconds, by default `wait`)."""
    admin = await _started_admin(bootstrap, request_timeout or wait, security)
    try:
        return await _wait_for_topics(admin, list(dict.fromkeys(names)), wait)
    finally:
        await admin.close()


async def _started_admin(
    bootstrap: str | list[str], wait: float, security: ClientSecurity
) -> AIOKafkaAdminClient:
    """A started admin client; a broker that refuses us raises BrokerRefused with the cause."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(wait * 1000),
        **security.aiokafka_kwargs(),
    )
    try:
        await admin.start()
    except KafkaConnectionError:
        await admin.close()
        if security.protocol != "PLAINTEXT":
            refused = await diagnose_refusal(bootstrap, security)
            if refused is not None:
                raise refused from None
        raise
    except BaseException:  # cancelled (a probe whose owner stops), or failed: close its sockets
        await admin.close()
        raise
    return admin


async def _wait_for_topics(
    admin: AIOKafkaAdminClient, names: list[str], wait: float
) -> dict[str, int]:
    """Poll all-topics metadata (which never auto-creates) until every name shows up."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        # describe_topics() without names asks for all topics, so it cannot auto-create one.
        found = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
        missing = [n for n in names if n not in found]
        if not missing:
            return {n: found[n] for n in names}
        if loop.time() >= deadline:
            raise BrokerError(
                f"topics do not exist after {wait}s: {missing} "
                "(LoopGuard creates its topics explicitly; start a worker or `loopguard up` first)"
            )
        await asyncio.sleep(0.05)
