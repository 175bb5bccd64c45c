"""Run one worker: create the topics, build the app, and hand the loop to Faust's Worker.

`run_worker(settings)` blocks until the worker stops (SIGINT/SIGTERM) and returns its exit
code. It reads no environment: `streams/main.py` builds the `Settings`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from typing import Any

from loopguard_fleet.config import Policy, load_policy
from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.config.policy import read_policy_document
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.cli_errors import (
    EXIT_BROKER_REFUSED,
    EXIT_BROKER_UNREACHABLE,
    EXIT_USAGE,
)
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.kafka.broker_wait import BrokerUnreachable, retry_until_reachable
from loopguard_fleet.streams.kafka.policy_topic import ensure_policy_topic
from loopguard_fleet.streams.kafka.security import BrokerRefused, ClientSecurity
from loopguard_fleet.streams.otlp import OTLP_EXTRA
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import BatchOutbox, Outbox
from loopguard_fleet.streams.worker.agent import RunProcessor, install_agent
from loopguard_fleet.streams.worker.app import Wiring, build_app, changelog_topic
from loopguard_fleet.streams.worker.broker_watch import (
    EXIT_BROKER_DATA_LOST,
    BrokerWatch,
)
from loopguard_fleet.streams.worker.exactly_once import TransactionalOutbox
from loopguard_fleet.streams.worker.faust.internals import QuietWorker
from loopguard_fleet.streams.worker.fleet import install_fleet
from loopguard_fleet.streams.worker.memory import HeapTrimmer, fix_thresholds, glibc_malloc_trim
from loopguard_fleet.streams.worker.policy_follower import install_policy_switches
from loopguard_fleet.streams.worker.unclean_stop import close_store, open_store

__all__ = ["assemble", "ensure_topics", "run_worker", "worker_topics"]

log = logging.getLogger(__name__)

BROKER_WATCH_INTERVAL_S = 2.0


def worker_topics(settings: Settings, policy: Policy) -> list[str]:
    """The topics a worker creates: inputs, outputs, its changelog, and its fleet topic when
    the policy it starts with enables fleet signals (the fleet task is installed then)."""
    fleet = [fleet_topic_of(settings.app_id)] if policy.fleet.enabled else []
    return [
        *settings.input_topics,
        settings.topic_control,
        settings.topic_dead_letter,
        changelog_topic(settings),
        *fleet,
    ]


async def ensure_topics(
    settings: Settings, wait_s: float = 15.0, policy: Policy | None = None
) -> None:
    """Create the worker's topics for the policy it starts with (the file's by default;
    existing ones are fine), then verify.

    Done before any consumer or producer touches them: some brokers (Tansu, Kafka with
    auto.create.topics.enable) would otherwise create them with their default partition count.
    """
    changelog = changelog_topic(settings)
    await create_topics(
        settings.bootstrap_servers,
        worker_topics(settings, policy if policy is not None else _policy(settings)),
        settings.partitions,
        replication_factor=settings.replication_factor,
        configs={changelog: {"cleanup.policy": "compact"}},
        wait=wait_s,
        security=ClientSecurity.from_settings(settings),
    )


def _policy(settings: Settings) -> Policy:
    """The loop-detection policy (the file's, or the defaults) under the chosen semantics."""
    policy = load_policy(settings.policy_file) if settings.policy_file else Policy.default()
    return policy.with_semantics(settings.semantics)


async def ensure_policy_topic_of(settings: Settings) -> None:
    """Create the policy topic when it is missing (one partition, compacted), before the
    worker group subscribes to it."""
    assert settings.policy_topic is not None
    await ensure_policy_topic(
        ",".join(settings.bootstrap_servers),
        settings.policy_topic,
        replication_factor=settings.replication_factor,
        security=ClientSecurity.from_settings(settings),
    )


def _policy_document(settings: Settings) -> Mapping[str, Any]:
    """The document of the file's policy ({}: the defaults), stored with a partition's first
    switch (streams/processing/policy_switch.py)."""
    read = read_policy_document(settings.policy_file) if settings.policy_file else {}
    return read if isinstance(read, Mapping) else {}


def assemble(
    settings: Settings,
    metrics: Metrics | None = None,
) -> tuple[Wiring, RunProcessor]:
    """Build the app with its agent installed (no broker connection yet); with a policy
    topic, the agent that owns it too (its versions reach the partitions as switch records,
    the file's policy decides before the first)."""
    metrics = metrics if metrics is not None else Metrics()
    settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
    wiring = build_app(settings, metrics)
    # Exactly-once: decisions go through the commit gate, in their source partition's
    # transaction (streams/worker/exactly_once.py); BatchOutbox writes to the plain producer.
    outbox: Outbox = (
        TransactionalOutbox()
        if settings.processing_guarantee == "exactly_once"
        else BatchOutbox(wiring.app, settings.topic_control, settings.partitions)
    )
    policy = _policy(settings)
    followed = settings.policy_topic is not None
    document = _policy_document(settings) if followed else None
    metrics.set_policy(policy.version)
    processor = RunProcessor(wiring, settings, policy, metrics, outbox, base_document=document)
    install_agent(wiring, processor, settings)
    if followed:  # the policy topic's owner (streams/worker/policy_follower.py)
        install_policy_switches(wiring, settings, processor.gate, metrics)
    if processor.fleet is not None:  # fleet signals on (docs/fleet.md)
        processor.fleet_link, fleet_checkpoint = install_fleet(
            wiring,
            settings,
            policy.fleet,
            processor.fleet,
            processor.gate,
            processor.store,
            metrics,
            batched=settings.processing_guarantee != "exactly_once",
        )
        processor.snapshots.append(fleet_checkpoint)
    if settings.topic_otlp_spans:  # the live OTLP bridge (docs/audit.md); the [otlp] extra
        from loopguard_fleet.streams.worker.otlp_bridge import install_otlp_bridge

        install_otlp_bridge(wiring, settings, processor.gate, metrics)
    if settings.malloc_trim:  # last hook: after the checkpoint and its producer drain
        wiring.app.before_commit.append(HeapTrimmer(glibc_malloc_trim()).after_checkpoint)
    return wiring, processor


def _otlp_extra_installed() -> bool:
    """Whether the OTLP decoder (the [otlp] extra) imports."""
    try:
        import loopguard_fleet.streams.otlp.decode  # noqa: F401
    except ImportError:
        return False
    return True


def run_worker(settings: Settings) -> int:
    """Create the topics and run a worker until it is stopped; returns the exit code."""
    policy_check = _policy(settings)  # fail before touching the broker
    del policy_check
    if settings.topic_otlp_spans and not _otlp_extra_installed():
        sys.stderr.write(
            f"loopguard worker: LOOPGUARD_TOPIC_OTLP_SPANS needs the optional extra: {OTLP_EXTRA}\n"
        )
        return EXIT_USAGE
    if settings.malloc_trim:  # before the buffers it is for (streams/worker/memory.py)
        fix_thresholds()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:  # a broker started beside the worker may not be up yet (streams/kafka/broker_wait.py)
        loop.run_until_complete(
            retry_until_reachable(
                lambda: ensure_topics(settings), settings.broker, settings.broker_wait_seconds
            )
        )
    except BrokerUnreachable as exc:
        sys.stderr.write(f"loopguard worker: {exc}\n")
        return EXIT_BROKER_UNREACHABLE
    except BrokerRefused as exc:  # credentials, CA or ACL: retrying cannot help
        sys.stderr.write(f"loopguard worker: {exc}\n")
        return EXIT_BROKER_REFUSED
    if settings.policy_topic is not None:
        try:
            loop.run_until_complete(ensure_policy_topic_of(settings))
        except BrokerRefused as exc:
            sys.stderr.write(f"loopguard worker: {exc}\n")
            return EXIT_BROKER_REFUSED
    # Marked only now, before anything opens the store: a worker that never got this far (an
    # unreachable or refusing broker) wrote nothing, and its next start keeps the store.
    open_store(settings.worker_data_dir)  # one left by an unclean stop or a lost broker is emptied
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
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    if code != 0 and asyncio.run(watch.confirm_after_crash()):
        code = EXIT_BROKER_DATA_LOST  # a supervisor restarts the worker: it recovers
    if code == 0:
        close_store(settings.worker_data_dir)
    return code


def _install_broker_watch(wiring: Wiring, settings: Settings) -> BrokerWatch:
    """Check every few seconds that the broker still has this worker's committed offsets."""
    watch = BrokerWatch(
        wiring.app,
        settings.app_id,
        settings.input_topics,
        settings.bootstrap_servers,
        settings.worker_data_dir,
        security=ClientSecurity.from_settings(settings),
    )

    @wiring.app.timer(interval=BROKER_WATCH_INTERVAL_S)  # type: ignore[untyped-decorator]  # Faust's timer decorator is untyped
    async def broker_watch() -> None:
        """See streams/worker/broker_watch.py."""
        await watch.check()

    return watch
