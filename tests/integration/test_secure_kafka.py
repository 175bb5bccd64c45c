"""LoopGuard on a locked-down Kafka: SASL_SSL, SCRAM users and least-privilege ACLs.

The broker is `KafkaBroker(secure=True)` (the session's on LOOPGUARD_TEST_BROKER=kafka-secure,
else this module's own). Each test's topics get the ACLs of docs/security.md; the worker runs
as `loopguard-worker`, agent runtimes as `agent-runtime`, and `outsider` logs in with no ACL.
Every claim of docs/security.md names the test here that backs it.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from loopguard_fleet.streams.cli_errors import EXIT_BROKER_REFUSED
from loopguard_fleet.streams.client.runtime import RuntimeClient
from loopguard_fleet.streams.embedded import KafkaBroker
from loopguard_fleet.streams.embedded.child import free_port
from loopguard_fleet.streams.embedded.kafka import _secure_ready
from loopguard_fleet.streams.embedded.kafka_security import (
    ADMIN,
    OPERATOR,
    OUTSIDER,
    RUNTIME,
    WORKER,
    create_acls,
    loopguard_acls,
    make_ca,
)
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.kafka.security import ClientSecurity, diagnose_refusal

from ..worker_process import REPO, WorkerLauncher
from .conftest import PARTITIONS, KafkaIO, TopicSet, broker_kind, grant_topic_set, security_settings

pytestmark = pytest.mark.integration

POLICY = {"tools": {"loopDetection": {"enabled": True}}}


@pytest.fixture(scope="module")
def secure_broker(request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    """The secured broker: the session's on kafka-secure, else one of this module's own."""
    if broker_kind() == "kafka-secure":
        yield request.getfixturevalue("broker")
        return
    broker = KafkaBroker(secure=True).start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
async def secure_topics(secure_broker: KafkaBroker) -> TopicSet:
    """This test's topics, created by the operator, with the least-privilege ACLs granted."""
    ts = TopicSet.fresh("s")
    admin = secure_broker.credentials(ADMIN)
    await create_topics(secure_broker.bootstrap, ts.names, PARTITIONS, security=admin)
    await grant_topic_set(secure_broker, ts)
    return ts


def _worker_env(
    broker: KafkaBroker, ts: TopicSet, tmp_path: Path, security: ClientSecurity
) -> dict[str, object]:
    policy = tmp_path / "openclaw.json"
    policy.write_bytes(orjson.dumps(POLICY))
    return {
        "broker": broker.url,
        "partitions": ts.partitions,
        "topic_tool_calls": ts.tool_calls,
        "topic_compactions": ts.compactions,
        "topic_control": ts.control,
        "topic_dead_letter": ts.dead_letter,
        "app_id": ts.group_id,
        "data_dir": tmp_path / "data",
        "policy_file": policy,
        "broker_wait_seconds": 5,  # a refusal must not be retried: a regression shows as 69
        **security_settings(security),
    }


def _secrets(broker: KafkaBroker) -> list[str]:
    setup = broker.secure_setup
    return [*setup.passwords.values(), setup.store_password]


async def test_worker_and_runtime_work_with_least_privilege_and_never_show_a_secret(
    secure_broker: KafkaBroker, secure_topics: TopicSet, tmp_path: Path
) -> None:
    b, ts = secure_broker, secure_topics
    launcher = WorkerLauncher(_worker_env(b, ts, tmp_path, b.credentials(WORKER)), tmp_path)
    try:
        worker = launcher.start()
        await worker.wait_until("/healthz", lambda body: body == "ok\n", 90)
        decisions = []
        async with RuntimeClient(b.bootstrap, topics=ts, security=b.credentials(RUNTIME)) as rt:
            run = rt.run("secure-run-1", agent_id="main")
            for _ in range(22):
                cid = await run.tool_call("read", {"path": "/missing"}, want_verdict=True)
                reply = await run.verdict(cid, timeout=30)
                assert not reply.is_timeout, worker.log_tail()
                decisions.append(reply.decision)
                await run.tool_result(cid, "read", {"path": "/missing"}, error="File not found")
        assert decisions[0] == "allow" and "warn" in decisions
        assert decisions[-1] == "block"
        # A malformed event from the runtime is dead-lettered by the worker.
        await _produce(b, RUNTIME, ts.tool_calls, b"not json at all")
        operator = KafkaIO(b.bootstrap, b.credentials(ADMIN))
        dead = await operator.consume_count(ts.dead_letter, 1, deadline=60)
        control = await operator.consume_count(ts.control, len(decisions), deadline=30)
        assert len(dead) == 1 and dead[0].json["reason"] == "not_json"
        _, metrics = await asyncio.to_thread(worker.get, "/metrics")
        assert "loopguard_events_total" in metrics
        assert worker.terminate() == 0
    finally:
        launcher.stop_all()
    seen = {
        "worker log": worker.log.read_text(errors="replace"),
        "/metrics": metrics,
        "dead letters": b"".join(m.value or b"" for m in dead).decode(errors="replace"),
        "control topic": b"".join(m.value or b"" for m in control).decode(errors="replace"),
    }
    for where, text in seen.items():
        for secret in _secrets(b):
            assert secret not in text, f"a secret appears in the {where}"


async def _produce(broker: KafkaBroker, user: str, topic: str, value: bytes) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        request_timeout_ms=10_000,
        **broker.credentials(user).aiokafka_kwargs(),
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"forged-run")
    finally:
        await producer.stop()


async def _can_write(broker: KafkaBroker, user: str, topic: str, value: bytes) -> bool:
    try:
        await _produce(broker, user, topic, value)
    except TopicAuthorizationFailedError:
        return False
    return True


async def _can_read(broker: KafkaBroker, user: str, topic: str) -> bool:
    """True when `user` reads the record the operator put in partition 0 of `topic`."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        request_timeout_ms=5000,  # a refused offset lookup is retried until this timeout
        **broker.credentials(user).aiokafka_kwargs(),
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        loop = asyncio.get_running_loop()
        end = loop.time() + 4.0
        while loop.time() < end:  # refused reads raise, or aiokafka logs and returns nothing
            if (await consumer.getmany(tp, timeout_ms=200)).get(tp):
                return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        await consumer.stop()
    return False


async def _operator_writes(broker: KafkaBroker, topic: str) -> None:
    """One record in partition 0, so that a read that gets nothing was refused."""
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        **broker.credentials(ADMIN).aiokafka_kwargs(),
    )
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", partition=0)
    finally:
        await producer.stop()


COMMAND = orjson.dumps({"type": "command", "command": "abort_run", "run_id": "forged-run"})


@pytest.mark.parametrize(
    ("user", "action", "topic"),
    [
        pytest.param(RUNTIME, "write", "control", id="runtime-cannot-forge-commands"),
        pytest.param(RUNTIME, "write", "dead_letter", id="runtime-cannot-write-dead-letters"),
        pytest.param(RUNTIME, "read", "tool_calls", id="runtime-cannot-read-other-runs-events"),
        pytest.param(OUTSIDER, "write", "tool_calls", id="outsider-cannot-publish-events"),
        pytest.param(OUTSIDER, "read", "control", id="outsider-cannot-read-commands"),
        pytest.param(OUTSIDER, "write", "control", id="outsider-cannot-forge-commands"),
    ],
)
async def test_a_principal_is_refused_what_its_acls_do_not_grant(
    secure_broker: KafkaBroker, secure_topics: TopicSet, user: str, action: str, topic: str
) -> None:
    name = getattr(secure_topics, topic)
    if action == "write":
        assert not await _can_write(secure_broker, user, name, COMMAND)
    else:
        await _operator_writes(secure_broker, name)
        assert not await _can_read(secure_broker, user, name)


async def test_the_granted_principals_may_do_their_jobs(
    secure_broker: KafkaBroker, secure_topics: TopicSet
) -> None:
    """The same calls succeed where the recipe grants them (the refusals above are ACLs)."""
    ts = secure_topics
    assert await _can_write(secure_broker, RUNTIME, ts.tool_calls, b"{}")
    assert await _can_write(secure_broker, WORKER, ts.control, COMMAND)
    assert await _can_write(secure_broker, WORKER, ts.dead_letter, b"{}")
    await _operator_writes(secure_broker, ts.control)
    assert await _can_read(secure_broker, RUNTIME, ts.control)
    assert await _can_read(secure_broker, WORKER, ts.tool_calls)


def _run_worker(env_settings: dict[str, object]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
    env.update({f"LOOPGUARD_{k.upper()}": str(v) for k, v in env_settings.items()})
    env["LOOPGUARD_WEB_PORT"] = str(free_port())
    proc = subprocess.run(
        [sys.executable, "-m", "loopguard_fleet.streams.main", "worker"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


WRONG_PASSWORD = "not-the-password-Xy9"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param(
            "wrong-password",
            [
                "refused the login as SASL_SSL, SCRAM-SHA-512 as 'loopguard-worker', CA ",
                ": wrong user name or password (LOOPGUARD_SASL_USERNAME, LOOPGUARD_SASL_PASSWORD)",
            ],
            id="wrong-password",
        ),
        pytest.param(
            "untrusted-ca",
            [
                ": its TLS certificate is not trusted (",
                "other-ca/ca.pem): set LOOPGUARD_SSL_CA_FILE to the CA that signed it",
            ],
            id="untrusted-ca",
        ),
        pytest.param(
            "missing-acl",
            [
                "the broker refused creating topic ",
                ": topic authorization failed for SASL_SSL, SCRAM-SHA-512 as 'outsider', CA ",
                "(missing ACL; see docs/security.md)",
            ],
            id="missing-acl",
        ),
    ],
)
def test_a_refused_worker_stops_at_start_up_with_one_line_and_exit_77(
    secure_broker: KafkaBroker,
    secure_topics: TopicSet,
    tmp_path: Path,
    case: str,
    expected: list[str],
) -> None:
    b = secure_broker
    setup = b.secure_setup
    if case == "wrong-password":
        security = setup.client(WORKER, password=WRONG_PASSWORD)
    elif case == "untrusted-ca":
        other_ca = make_ca(tmp_path / "other-ca", name="not-the-brokers-ca")
        security = ClientSecurity(**{**_fields(setup.client(WORKER)), "ca_file": other_ca})
    else:
        security = setup.client(OUTSIDER)  # logs in, holds no ACL
    code, output = _run_worker(_worker_env(b, secure_topics, tmp_path, security))
    lines = output.strip().splitlines()
    assert (code, len(lines)) == (EXIT_BROKER_REFUSED, 1), output
    assert lines[0].startswith("loopguard worker: ")
    assert all(part in lines[0] for part in expected), lines[0]
    for secret in [*_secrets(b), WRONG_PASSWORD]:
        assert secret not in output


def _fields(security: ClientSecurity) -> dict[str, object]:
    return {name: getattr(security, name) for name in security.__dataclass_fields__}


async def test_replay_reads_a_topic_over_sasl_ssl_and_a_bad_login_is_one_line(
    secure_broker: KafkaBroker, secure_topics: TopicSet, tmp_path: Path
) -> None:
    b, ts = secure_broker, secure_topics
    async with RuntimeClient(
        b.bootstrap, topics=ts, security=b.credentials(RUNTIME), is_listening=False
    ) as rt:
        run = rt.run("replayed-run", agent_id="main")
        for _ in range(12):
            cid = await run.tool_call("read", {"path": "/missing"})
            await run.tool_result(cid, "read", {"path": "/missing"}, error="File not found")
    policy = tmp_path / "policy.json"
    policy.write_bytes(orjson.dumps(POLICY))

    def replay(security: ClientSecurity) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
        env.update(
            {f"LOOPGUARD_{k.upper()}": str(v) for k, v in security_settings(security).items()}
        )
        return subprocess.run(
            [sys.executable, "-m", "loopguard_fleet.streams.cli", "replay",
             "--topic", ts.tool_calls, "--broker", b.bootstrap, "--policy", str(policy), "--quiet"],
            capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
        )  # fmt: skip

    done = await asyncio.to_thread(replay, b.credentials(ADMIN))
    decisions = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr
    assert decisions and {d.get("detector") for d in decisions} == {"generic_repeat"}
    refused = await asyncio.to_thread(replay, b.secure_setup.client(ADMIN, password=WRONG_PASSWORD))
    assert refused.returncode == EXIT_BROKER_REFUSED, refused.stderr
    assert refused.stderr.startswith("loopguard replay: broker ") and "refused the login" in (
        refused.stderr
    )
    assert len(refused.stderr.strip().splitlines()) == 1 and WRONG_PASSWORD not in refused.stderr


class _SlowBrokerProxy:
    """A TCP proxy on 127.0.0.1 that holds back everything the broker sends by `delay` s:
    the broker of a loaded host, slow to answer a TLS close as anything else."""

    def __init__(self, target: str, delay: float) -> None:
        self._target = target
        self._delay = delay
        self._handlers: set[asyncio.Task[None]] = set()
        self.bootstrap = ""

    async def __aenter__(self) -> _SlowBrokerProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.bootstrap = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()
        await self._server.wait_closed()
        if self._handlers:  # each ends when both of its sides have closed
            await asyncio.wait_for(asyncio.gather(*self._handlers), 30)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        host, _, port = self._target.rpartition(":")
        broker_r, broker_w = await asyncio.open_connection(host, int(port))
        await asyncio.gather(
            self._pipe(client_r, broker_w, 0.0), self._pipe(broker_r, client_w, self._delay)
        )

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        try:
            while data := await src.read(65536):
                await asyncio.sleep(delay)
                dst.write(data)
                await dst.drain()
        except ConnectionError:
            pass
        finally:
            dst.close()


def _resource_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    gc.collect()  # a socket left open by a closed loop warns when it is collected
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


# Slower than the fixed waits (0.2 s, 0.3 s) that used to stand in for "the close is done".
_BROKER_DELAY_S = 0.6


async def test_the_readiness_probe_closes_its_socket_before_its_loop_ends(
    secure_broker: KafkaBroker,
) -> None:
    """The broker's readiness probe (its own short loop) leaves no TLS socket open, however
    slow the broker is to answer the close: a leaked one errs a later test (filterwarnings)."""
    async with _SlowBrokerProxy(secure_broker.bootstrap, _BROKER_DELAY_S) as proxy:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            admin = secure_broker.credentials(ADMIN)
            assert await asyncio.to_thread(_secure_ready, proxy.bootstrap, admin)
            assert _resource_warnings(caught) == []


async def test_a_refused_login_is_diagnosed_and_its_socket_closed_before_the_loop_ends(
    secure_broker: KafkaBroker,
) -> None:
    """`loopguard` commands diagnose a refused login in a loop that ends right after."""
    wrong = secure_broker.secure_setup.client(ADMIN, password=WRONG_PASSWORD)
    async with _SlowBrokerProxy(secure_broker.bootstrap, _BROKER_DELAY_S) as proxy:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            refused = await asyncio.to_thread(asyncio.run, diagnose_refusal(proxy.bootstrap, wrong))
            assert refused is not None and "wrong user name or password" in str(refused)
            assert _resource_warnings(caught) == []


async def test_a_client_started_and_stopped_at_once_leaves_no_socket_open(
    secure_broker: KafkaBroker,
) -> None:
    """aiokafka drops its bootstrap connection closing; a client stopped right after its
    start, in a loop that then ends (Faust's consumer thread, a short command), must not leave
    that socket behind (streams/kafka/connection.py)."""
    admin = secure_broker.credentials(ADMIN)

    async def start_and_stop(bootstrap: str) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **admin.aiokafka_kwargs())
        await producer.start()
        await producer.stop()

    async with _SlowBrokerProxy(secure_broker.bootstrap, _BROKER_DELAY_S) as proxy:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await asyncio.to_thread(asyncio.run, start_and_stop(proxy.bootstrap))
            assert _resource_warnings(caught) == []


async def test_only_the_operator_principal_may_push_a_policy(
    secure_broker: KafkaBroker, secure_topics: TopicSet, tmp_path: Path
) -> None:
    b, ts = secure_broker, secure_topics
    topic = f"{ts.group_id}.policy"
    acls = loopguard_acls(
        tool_calls=ts.tool_calls, compactions=ts.compactions, control=ts.control,
        dead_letter=ts.dead_letter, app_id=ts.group_id,
        changelog=f"{ts.group_id}-loopguard-runs-changelog", policy=topic,
    )  # fmt: skip
    await create_acls(b.bootstrap, b.credentials(ADMIN), [a for a in acls if a.name == topic])

    def push(user: str, mode: str) -> subprocess.CompletedProcess[str]:
        policy = tmp_path / f"{mode}.json"
        policy.write_bytes(orjson.dumps({**POLICY, "loopguard": {"mode": mode}}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPGUARD_")}
        settings = security_settings(b.credentials(user))
        env.update({f"LOOPGUARD_{k.upper()}": str(v) for k, v in settings.items()})
        return subprocess.run(
            [sys.executable, "-m", "loopguard_fleet.streams.cli", "policy", "push", str(policy),
             "--broker", b.bootstrap, "--topic", topic],
            capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
        )  # fmt: skip

    pushed = await asyncio.to_thread(push, OPERATOR, "enforce")
    assert pushed.returncode == 0, pushed.stderr
    refused = await asyncio.to_thread(push, WORKER, "observe")  # it may read it, not write it
    assert refused.returncode == EXIT_BROKER_REFUSED, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "not authorized: writing to" in refused.stderr
