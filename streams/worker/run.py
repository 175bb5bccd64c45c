"""Run one worker: create the topics, build the app, and hand the loop to Faust's Worker.

`run_worker(settings)` blocks until the worker stops (SIGINT/SIGTERM) and returns its exit
code. It reads no environment: `streams/main.py` builds the `Settings`.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from loopguard_fleet.config import Policy, load_policy
from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.cli_errors import (
    EXIT_BROKER_REFUSED,
    EXIT_BROKER_UNREACHABLE,
    EXIT_USAGE,
)
from loopguard_fleet.streams.kafka.admin import create_topics
from loopguard_fleet.streams.kafka.broker_wait import BrokerUnreachable, retry_until_reachable
from loopguard_fleet.streams.kafka.policy_topic import ensure_policy_topic, read_policy_records
from loopguard_fleet.streams.kafka.security import BrokerRefused, ClientSecurity
from loopguard_fleet.streams.otlp import OTLP_EXTRA
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import BatchOutbox, Outbox
from loopguard_fleet.streams.worker.agent import RunProcessor, install_agent
from loopguard_fleet.streams.worker.app import Wiring, build_app, changelog_topic
from loopguard_fleet.streams.worker.broker_watch import (
    EXIT_BROKER_DATA_LOST,
    BrokerWatch,
    discard_orphaned_state,
)
from loopguard_fleet.streams.worker.exactly_once import TransactionalOutbox
from loopguard_fleet.streams.worker.faust.internals import QuietWorker
from loopguard_fleet.streams.worker.fleet import install_fleet
from loopguard_fleet.streams.worker.memory import HeapTrimmer, fix_mmap_threshold, glibc_malloc_trim
from loopguard_fleet.streams.worker.policy_follower import PolicyFollower, initial_policy

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


async def read_initial_policy(settings: Settings) -> tuple[Policy, int]:
    """The policy topic's last valid version (else the file's) and the offset to follow from;
    creates the topic when it is missing."""
    assert settings.policy_topic is not None
    security = ClientSecurity.from_settings(settings)
    bootstrap = ",".join(settings.bootstrap_servers)
    await ensure_policy_topic(
        bootstrap,
        settings.policy_topic,
        replication_factor=settings.replication_factor,
        security=security,
    )
    records = await read_policy_records(bootstrap, settings.policy_topic, security=security)
    return initial_policy(records, _policy(settings), settings.semantics)


def assemble(
    settings: Settings,
    metrics: Metrics | None = None,
    followed: tuple[Policy, int] | None = None,
) -> tuple[Wiring, RunProcessor]:
    """Build the app with its agent installed (no broker connection yet); `followed`: the
    policy topic's version and the offset to follow it from (`read_initial_policy`)."""
    metrics = metrics if metrics is not None else Metrics()
    settings.worker_data_dir.mkdir(parents=True, exist_ok=True)
    wiring = build_app(settings, metrics)
    # Exactly-once: decisions go through Faust's transactional producers at the checkpoint
    # (streams/worker/exactly_once.py); BatchOutbox writes to the plain producer, outside them.
    outbox: Outbox = (
        TransactionalOutbox(wiring)
        if settings.processing_guarantee == "exactly_once"
        else BatchOutbox(wiring.app, settings.topic_control, settings.partitions)
    )
    policy = _policy(settings) if followed is None else followed[0]
    metrics.set_policy(policy.version)
    processor = RunProcessor(wiring, settings, policy, metrics, outbox)
    install_agent(wiring, processor, settings)
    if followed is not None:
        _install_policy_follower(wiring, settings, processor, metrics, followed[1])
    if processor.fleet is not None:  # fleet signals on (docs/fleet.md)
        processor.fleet_link, fleet_checkpoint = install_fleet(
            wiring,
            settings,
            policy.fleet,
            processor.fleet,
            processor.gate,
            processor.store,
            metrics,
        )
        processor.snapshots.append(fleet_checkpoint)
    if settings.topic_otlp_spans:  # the live OTLP bridge (docs/audit.md); the [otlp] extra
        from loopguard_fleet.streams.worker.otlp_bridge import install_otlp_bridge

        install_otlp_bridge(wiring, settings, processor.note_read, metrics)
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
        fix_mmap_threshold()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    discard_orphaned_state(settings.worker_data_dir)  # left by a broker that lost its data
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
    followed = None
    if settings.policy_topic is not None:
        try:
            followed = loop.run_until_complete(read_initial_policy(settings))
            # The policy topic's version, not the file's, decides whether the fleet task runs:
            # its topic too (created above only if the file's enables fleet signals).
            if followed[0].fleet.enabled:
                loop.run_until_complete(ensure_topics(settings, policy=followed[0]))
        except BrokerRefused as exc:
            sys.stderr.write(f"loopguard worker: {exc}\n")
            return EXIT_BROKER_REFUSED
    wiring, _ = assemble(settings, followed=followed)
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
    return code


def _install_policy_follower(
    wiring: Wiring, settings: Settings, processor: RunProcessor, metrics: Metrics, start: int
) -> None:
    """Follow the policy topic from `start` for as long as the worker runs."""
    assert settings.policy_topic is not None
    dead_letters = wiring.dead_letter
    follower = PolicyFollower(
        ",".join(settings.bootstrap_servers),
        settings.policy_topic,
        start,
        semantics=settings.semantics,
        apply=processor.set_policy,
        dead_letter=lambda key, value: dead_letters.send_soon(key=key, value=value),
        metrics=metrics,
        prefix_bytes=settings.dead_letter_prefix_bytes,
        security=ClientSecurity.from_settings(settings),
    )

    @wiring.app.task  # type: ignore[untyped-decorator]  # Faust's task decorator is untyped
    async def follow_policy() -> None:
        """See streams/worker/policy_follower.py."""
        await follower.run()


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
