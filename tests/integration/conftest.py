"""Integration fixtures: one real broker per session, fresh topics and group per test.

The broker is the one `LOOPGUARD_TEST_BROKER` names: `tansu` (default, the embedded Tansu
of `streams/embedded/tansu.py`), `kafka` (Apache Kafka, `streams/embedded/kafka.py`; `make kafka`
installs its jars) or `kafka-secure` (the same Kafka with only a SASL_SSL listener, SCRAM users
and the standard authorizer: docs/security.md). Broker-specific worker settings come from
`worker_settings(broker)`, nowhere else.

On `kafka-secure` every test's topics get the least-privilege ACLs of docs/security.md
(`loopguard_acls`); workers run as `loopguard-worker` (their LOOPGUARD_SASL_* settings from
`worker_settings`); the tests' own clients act as the operator (the `admin` super user):
aiokafka clients built here without a `security_protocol` get the operator's credentials
(`_operator_clients`). What each principal may and may not do is tested in
tests/integration/test_secure_kafka.py.

    async def test_x(broker, topics, kafka):
        await kafka.produce_json(topics.tool_calls, [event], key=lambda e: e["run_id"])
        got = await kafka.consume_until(topics.control, lambda ms: len(ms) >= 1)

Reading is group-less (every partition assigned, from the beginning), so it starts at once;
a consumer group on Tansu takes about half its session timeout to join (CONSUMER_TIMEOUTS).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from loopguard_fleet.config.defaults import TOPIC_POLICY
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.embedded import KafkaBroker
from loopguard_fleet.streams.embedded.kafka_security import (
    ADMIN,
    WORKER,
    create_acls,
    loopguard_acls,
)
from loopguard_fleet.streams.embedded.tansu import EmbeddedBroker
from loopguard_fleet.streams.kafka.admin import create_topics, topic_partitions
from loopguard_fleet.streams.kafka.security import PLAINTEXT, ClientSecurity

PARTITIONS = 4
_HERE = Path(__file__).parent

BrokerKind = Literal["tansu", "kafka", "kafka-secure"]
_KINDS: tuple[BrokerKind, ...] = ("tansu", "kafka", "kafka-secure")
SessionBroker = EmbeddedBroker | KafkaBroker  # what the `broker` fixture yields


def broker_kind() -> BrokerKind:
    """The broker the suites run on: `LOOPGUARD_TEST_BROKER` (`tansu`, `kafka`, `kafka-secure`)."""
    kind = os.environ.get("LOOPGUARD_TEST_BROKER", "tansu") or "tansu"
    for known in _KINDS:
        if kind == known:
            return known
    raise pytest.UsageError(f"LOOPGUARD_TEST_BROKER={kind!r}: use tansu, kafka or kafka-secure")


def start_broker(kind: BrokerKind | None = None) -> SessionBroker:
    """Start a broker of this kind (the session's by default) on free loopback ports."""
    kind = kind or broker_kind()
    if kind == "tansu":
        return EmbeddedBroker().start()
    return KafkaBroker(secure=kind == "kafka-secure").start()


def is_secure(broker: SessionBroker) -> bool:
    """True for the locked-down Kafka (kafka-secure)."""
    return isinstance(broker, KafkaBroker) and broker.is_secure


def operator_security(broker: SessionBroker) -> ClientSecurity:
    """The tests' own clients: the super user on kafka-secure, no security elsewhere."""
    if isinstance(broker, KafkaBroker) and broker.is_secure:
        return broker.credentials(ADMIN)
    return PLAINTEXT


def security_settings(security: ClientSecurity) -> dict[str, object]:
    """LOOPGUARD_* settings (lower case, no prefix) of a client security; {} for plaintext."""
    env = security.settings_env()
    return {name.removeprefix("LOOPGUARD_").lower(): value for name, value in env.items()}


def lose_data(broker: SessionBroker) -> None:
    """Restart `broker` without its data: Tansu always loses it, Kafka here wipes its disk."""
    if isinstance(broker, KafkaBroker):
        broker.restart(keep_data=False)
    else:
        broker.restart()


def deployment_settings(
    broker: SessionBroker, topics: TopicSet, tmp_path: Path, policy_file: Path, **extra: object
) -> dict[str, object]:
    """A worker's LOOPGUARD_* settings for one test's topics, group, data dir and policy file
    (plus `extra`), on the session broker."""
    return {
        "broker": broker.url,
        "partitions": topics.partitions,
        "topic_tool_calls": topics.tool_calls,
        "topic_compactions": topics.compactions,
        "topic_control": topics.control,
        "topic_dead_letter": topics.dead_letter,
        "app_id": topics.group_id,
        "data_dir": tmp_path / "data",
        "policy_file": policy_file,
        **extra,
        **worker_settings(broker),
    }


def worker_settings(broker: SessionBroker) -> dict[str, object]:
    """LOOPGUARD_* settings a worker needs on this broker beyond the defaults a user gets.

    Tansu under-reports end offsets (streams/kafka/end_offsets.py), which trips Faust's recovery
    consistency check; on Apache Kafka the worker runs with the check on, as users do. On
    kafka-secure the worker logs in as `loopguard-worker`.
    """
    if isinstance(broker, EmbeddedBroker):
        return {"recovery_consistency_check": "false"}
    return security_settings(broker.credentials(WORKER)) if broker.is_secure else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration is an integration test."""
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@dataclass(frozen=True, slots=True)
class TopicSet:
    """One test's own topics (created, 4 partitions) and consumer group id."""

    tool_calls: str
    compactions: str
    control: str
    dead_letter: str
    group_id: str
    partitions: int = PARTITIONS

    @property
    def names(self) -> list[str]:
        """The four topic names."""
        return [self.tool_calls, self.compactions, self.control, self.dead_letter]

    @classmethod
    def fresh(cls, prefix: str) -> TopicSet:
        """Four new topic names and a new group id, all starting with `prefix`."""
        tag = f"{prefix}{uuid.uuid4().hex[:10]}"
        return cls(
            tool_calls=f"{tag}.tool-calls",
            compactions=f"{tag}.compactions",
            control=f"{tag}.control",
            dead_letter=f"{tag}.dead-letter",
            group_id=f"{prefix}g{tag}",
        )


def app_settings(
    broker: SessionBroker, topics: TopicSet, data_dir: Path, **overrides: object
) -> Settings:
    """A worker's settings for one test's topics on this broker (`worker_settings`), plus
    `overrides`: for tests that build the worker's Faust app in-process."""
    values = {**worker_settings(broker), **overrides}
    return Settings(
        broker=broker.url,
        topic_tool_calls=topics.tool_calls,
        topic_compactions=topics.compactions,
        topic_control=topics.control,
        topic_dead_letter=topics.dead_letter,
        app_id=topics.group_id,
        data_dir=data_dir,
        **values,  # type: ignore[arg-type]  # LOOPGUARD_* values, validated by Settings
    )


@dataclass(frozen=True, slots=True)
class Message:
    """One consumed record; `json` is the decoded value, or None if it is not JSON."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    json: Any


def _decode(value: bytes | None) -> Any:
    try:
        return orjson.loads(value) if value is not None else None
    except orjson.JSONDecodeError:
        return None


class KafkaIO:
    """Produce JSON lines and read topics back, with deadlines instead of sleeps."""

    def __init__(self, bootstrap: str, security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap
        self.security = security

    async def produce_raw(
        self, topic: str, values: Iterable[bytes], key: bytes | None = None
    ) -> None:
        """Send raw values (acks=all) and wait until all are acknowledged."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
            **self.security.aiokafka_kwargs(),
        )  # fmt: skip
        await producer.start()
        try:
            futures = [await producer.send(topic, v, key=key) for v in values]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    async def produce_json(
        self,
        topic: str,
        objects: Iterable[Any],
        key: Callable[[Any], str | None] | None = lambda o: o.get("run_id"),
    ) -> None:
        """Send objects as JSON lines, keyed by `key(obj)` (run_id by default), acks=all."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
            **self.security.aiokafka_kwargs(),
        )  # fmt: skip
        await producer.start()
        try:
            futures = []
            for obj in objects:
                k = key(obj) if key is not None else None
                kb = k.encode() if isinstance(k, str) else None
                futures.append(await producer.send(topic, orjson.dumps(obj), key=kb))
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    async def consume_until(
        self,
        topic: str,
        until: Callable[[Sequence[Message]], bool] = lambda _: False,
        deadline: float = 20.0,
    ) -> list[Message]:
        """Read `topic` from the beginning until `until(messages)` holds or `deadline` s pass.

        Returns what was read either way; assert on the result. With the default `until`,
        reads for the whole deadline ("everything that arrives in N seconds").
        """
        parts = (
            await topic_partitions(self.bootstrap, [topic], wait=deadline, security=self.security)
        )[topic]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
            fetch_max_wait_ms=100, auto_offset_reset="earliest",
            **self.security.aiokafka_kwargs(),
        )  # fmt: skip
        await consumer.start()
        got: list[Message] = []
        try:
            tps = [TopicPartition(topic, p) for p in range(parts)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            loop = asyncio.get_running_loop()
            end = loop.time() + deadline
            while not until(got) and loop.time() < end:
                wait_ms = max(1, min(200, int((end - loop.time()) * 1000)))
                batches = await consumer.getmany(timeout_ms=wait_ms)
                for records in batches.values():
                    got.extend(
                        Message(r.topic, r.partition, r.offset, r.key, r.value, _decode(r.value))
                        for r in records
                    )
        finally:
            await consumer.stop()
        return got

    async def consume_count(self, topic: str, count: int, deadline: float = 20.0) -> list[Message]:
        """Read until at least `count` messages arrived (or the deadline passed)."""
        return await self.consume_until(topic, lambda ms: len(ms) >= count, deadline)


def pytest_report_header() -> str:
    """Name the broker the suites run on at the top of the session."""
    return f"LOOPGUARD_TEST_BROKER: {broker_kind()}"


async def grant_workers(
    broker: SessionBroker,
    *,
    tool_calls: str,
    compactions: str,
    control: str,
    dead_letter: str,
    app_id: str,
    policy: str = TOPIC_POLICY,
    otlp_spans: str | None = None,
) -> None:
    """On kafka-secure, the least-privilege ACLs (docs/security.md) for one deployment's
    topics and group; elsewhere nothing (no authorizer)."""
    if not (isinstance(broker, KafkaBroker) and broker.is_secure):
        return
    acls = loopguard_acls(
        tool_calls=tool_calls,
        compactions=compactions,
        control=control,
        dead_letter=dead_letter,
        app_id=app_id,
        changelog=f"{app_id}-loopguard-runs-changelog",  # streams/worker/app.py
        policy=policy,
        otlp_spans=otlp_spans,
    )
    await create_acls(broker.bootstrap, broker.credentials(ADMIN), acls)


async def grant_topic_set(
    broker: SessionBroker,
    ts: TopicSet,
    *,
    policy: str = TOPIC_POLICY,
    otlp_spans: str | None = None,
) -> None:
    """`grant_workers` for one test's topic set (its group id is the worker's app id), with
    the policy and OTLP topics it names."""
    await grant_workers(
        broker,
        tool_calls=ts.tool_calls,
        compactions=ts.compactions,
        control=ts.control,
        dead_letter=ts.dead_letter,
        app_id=ts.group_id,
        policy=policy,
        otlp_spans=otlp_spans,
    )


@pytest.fixture(scope="session", autouse=True)
def _operator_clients(request: pytest.FixtureRequest) -> Iterator[None]:
    """On kafka-secure, the tests' own clients of the session broker log in as the operator.

    The tests' producers, readers and admin calls (here and in the test modules) and the
    `loopguard` commands they run play the operator; clients that pass `security_protocol`
    (the worker, a RuntimeClient given credentials, every LoopGuard client with security)
    are left as they are.
    """
    if broker_kind() != "kafka-secure":
        yield
        return
    import aiokafka
    import aiokafka.admin
    import aiokafka.client

    session_broker: KafkaBroker = request.getfixturevalue("broker")
    operator = session_broker.credentials(ADMIN).aiokafka_kwargs()
    patch = pytest.MonkeyPatch()
    for cls in (
        aiokafka.AIOKafkaProducer,
        aiokafka.AIOKafkaConsumer,
        aiokafka.admin.AIOKafkaAdminClient,
        aiokafka.client.AIOKafkaClient,
    ):
        init = _with_default_security(cls.__init__, session_broker.bootstrap, operator)
        patch.setattr(cls, "__init__", init)
    # `loopguard` commands the tests run (replay --topic) read it from the environment too;
    # workers get only their own LOOPGUARD_* (tests/worker_process.py drops the rest).
    for name, value in security_settings(session_broker.credentials(ADMIN)).items():
        patch.setenv(f"LOOPGUARD_{name.upper()}", str(value))
    try:
        yield
    finally:
        patch.undo()


def _with_default_security(
    init: Callable[..., None], bootstrap: str, defaults: dict[str, Any]
) -> Any:
    """`init`, adding `defaults` for clients of `bootstrap` that name no security protocol
    (tests that start plaintext brokers of their own keep theirs)."""

    def patched(self: Any, *args: Any, **kwargs: Any) -> None:
        servers = kwargs.get("bootstrap_servers")
        named = [servers] if isinstance(servers, str) else list(servers or [])
        if "security_protocol" not in kwargs and bootstrap in named:
            kwargs = {**defaults, **kwargs}
        init(self, *args, **kwargs)

    return patched


@pytest.fixture(scope="session")
def broker() -> Iterator[SessionBroker]:
    """One broker (LOOPGUARD_TEST_BROKER) for the whole session, stopped by PID at the end."""
    started = start_broker()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def topics(broker: SessionBroker) -> TopicSet:
    """Fresh topics (created explicitly, 4 partitions) and a fresh group id for one test."""
    ts = TopicSet.fresh("t")
    await create_topics(broker.bootstrap, ts.names, PARTITIONS, security=operator_security(broker))
    await grant_topic_set(broker, ts)
    return ts


@pytest.fixture
def kafka(broker: SessionBroker) -> KafkaIO:
    """Produce/consume helpers bound to the session broker."""
    return KafkaIO(broker.bootstrap, operator_security(broker))
