"""Run one worker: create the topics, build the app, and hand the loop to Faust's Worker.

`run_worker(settings)` blocks until the worker stops (SIGINT/SIGTERM) and returns its exit
code. It reads no environment: `streams/main.py` builds the `Settings`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from loopguard.config import Policy, load_policy
from loopguard.config.settings import Settings
from loopguard.streams.agent import RunProcessor, install_agent
from loopguard.streams.app import Wiring, build_app, changelog_topic
from loopguard.streams.broker_wait import BrokerUnreachable, retry_until_reachable
from loopguard.streams.broker_watch import (
    EXIT_BROKER_DATA_LOST,
    BrokerWatch,
    discard_orphaned_state,
)
from loopguard.streams.cli_errors import EXIT_BROKER_UNREACHABLE
from loopguard.streams.errors import StreamError
from loopguard.streams.exactly_once import TransactionalOutbox
from loopguard.streams.faust_internals import QuietWorker
from loopguard.streams.metrics import Metrics
from loopguard.streams.outbox import BatchOutbox, Outbox

__all__ = ["TopicSetupError", "assemble", "ensure_topics", "run_worker"]

log = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36
BROKER_WATCH_INTERVAL_S = 2.0


class TopicSetupError(StreamError, RuntimeError):
    """The worker's topics cannot be created or exist with the wrong partition count."""


async def ensure_topics(settings: Settings, wait_s: float = 15.0) -> None:
    """Create the input, output and changelog topics (existing ones are fine), then verify.

    Done before any consumer or producer touches them: some brokers (Tansu, Kafka with
    auto.create.topics.enable) would otherwise create them with their default partition count.
    """
    changelog = changelog_topic(settings)
    names = [*settings.input_topics, settings.topic_control, settings.topic_dead_letter]
    new = [NewTopic(n, settings.partitions, settings.replication_factor) for n in names]
    new.append(
        NewTopic(
            changelog,
            settings.partitions,
            settings.replication_factor,
            topic_configs={"cleanup.policy": "compact"},
        )
    )
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=int(wait_s * 1000)
    )
    await admin.start()
    try:
        response = await admin.create_topics(new, timeout_ms=int(wait_s * 1000))
        for topic, code, *rest in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                detail = rest[0] if rest else ""
                raise TopicSetupError(f"cannot create topic {topic!r}: error {code} {detail}")
        await _verify(admin, [*names, changelog], settings.partitions, wait_s)
    finally:
        await admin.close()


async def _verify(
    admin: AIOKafkaAdminClient, names: Iterable[str], partitions: int, wait_s: float
) -> None:
    """Wait until every topic is visible with `partitions` partitions (all-topics metadata)."""
    wanted = list(names)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        # describe_topics() without names lists all topics, so it never auto-creates one.
        found = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
        wrong = {n: found[n] for n in wanted if n in found and found[n] != partitions}
        if wrong:
            raise TopicSetupError(
                f"topics exist with a partition count other than {partitions}: {wrong}"
            )
        missing = [n for n in wanted if n not in found]
        if not missing:
            return
        if loop.time() >= deadline:
            raise TopicSetupError(f"topics not visible after {wait_s}s: {missing}")
        await asyncio.sleep(0.05)


def _policy(settings: Settings) -> Policy:
    """The loop-detection policy (the file's, or the defaults) under the chosen semantics."""
    policy = load_policy(settings.policy_file) if settings.policy_file else Policy.default()
    return policy.with_semantics(settings.semantics)


def assemble(settings: Settings, metrics: Metrics | None = None) -> tuple[Wiring, RunProcessor]:
    """Build the app with its agent installed (no broker connection yet)."""
    metrics = metrics if metrics is not None else Metrics()
    settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
    wiring = build_app(settings, metrics)
    # Exactly-once: decisions go through Faust's transactional producers at the checkpoint
    # (streams/exactly_once.py); BatchOutbox writes to the plain producer, outside them.
    outbox: Outbox = (
        TransactionalOutbox(wiring)
        if settings.processing_guarantee == "exactly_once"
        else BatchOutbox(wiring.app, settings.topic_control, settings.partitions)
    )
    processor = RunProcessor(wiring, settings, _policy(settings), metrics, outbox)
    install_agent(wiring, processor, settings)
    return wiring, processor


def run_worker(settings: Settings) -> int:
    """Create the topics and run a worker until it is stopped; returns the exit code."""
    policy_check = _policy(settings)  # fail before touching the broker
    del policy_check
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    discard_orphaned_state(settings.worker_data_dir)  # left by a broker that lost its data
    try:  # a broker started beside the worker may not be up yet (streams/broker_wait.py)
        loop.run_until_complete(
            retry_until_reachable(
                lambda: ensure_topics(settings), settings.broker, settings.broker_wait_seconds
            )
        )
    except BrokerUnreachable as exc:
        sys.stderr.write(f"loopguard worker: {exc}\n")
        return EXIT_BROKER_UNREACHABLE
    wiring, _ = assemble(settings)
    watch = _install_broker_watch(wiring, settings)
    worker = QuietWorker(
        wiring.app,
        loop=loop,
        loglevel=settings.log_level.upper(),  # never "warn": Faust turns that into debug
        # Faust's default redirects stdout into the log at WARN; keep the process's own.
        redirect_stdouts=False,
    )
    log.info(
        "worker %s: metrics at http://%s:%d/metrics",
        settings.app_id,
        settings.web_host,
        settings.web_port,
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if watch.lost is not None:
            return EXIT_BROKER_DATA_LOST  # a supervisor restarts the worker: it recovers
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


def _install_broker_watch(wiring: Wiring, settings: Settings) -> BrokerWatch:
    """Check every few seconds that the broker still has this worker's committed offsets."""
    watch = BrokerWatch(
        wiring.app,
        settings.app_id,
        settings.input_topics,
        settings.bootstrap_servers,
        settings.worker_data_dir,
    )

    @wiring.app.timer(interval=BROKER_WATCH_INTERVAL_S)  # type: ignore[untyped-decorator]  # Faust's timer decorator is untyped
    async def broker_watch() -> None:
        """See streams/broker_watch.py."""
        await watch.check()

    return watch
