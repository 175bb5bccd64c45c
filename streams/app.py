"""The Faust app of one worker: consumer tuning, topics, the run-state table, web routes.

`build_app(settings, metrics)` returns a `Wiring`: the app and the channels the agent uses.
It builds objects only; nothing connects to the broker until the worker starts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiokafka
import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from config.settings import Settings
from streams.end_offsets import probe_end_offsets
from streams.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["TABLE_NAME", "LoopGuardApp", "Wiring", "build_app", "changelog_topic"]

TABLE_NAME = "loopguard-runs"

# RocksDB options of the run-state table, per partition DB (faust/stores/rocksdb.py reads them
# from the table's `options`). Faust's defaults (64 MiB write buffer x 3, 2 GiB block cache)
# keep every state version written since the last flush in memtables: ~9 KB per active run
# after 15 calls in bench/memory.py, up to 4 x 64 MiB per worker later. A state is ~1 KB and
# read only on a cache miss, so small buffers and cache cost little. The memory store
# ignores them.
ROCKSDB_OPTIONS = {
    "write_buffer_size": 2 * 1024 * 1024,
    "max_write_buffer_number": 2,
    "block_cache_size": 1024 * 1024,
}


class _TunedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with a configurable fetch max-wait.

    Faust hard-codes `fetch_max_wait_ms=1500` when it builds the worker's AIOKafkaConsumer,
    and Tansu holds every fetch for about half of it, which puts ~400 ms on each verdict.
    We let Faust build the consumer exactly as usual and only replace that one value before
    the consumer starts (aiokafka hands it to its Fetcher in `start()`).
    """

    def _create_worker_consumer(
        self, transport: faust_aiokafka.Transport
    ) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        app = self.app
        if isinstance(app, LoopGuardApp):
            consumer._fetch_max_wait_ms = app.fetch_max_wait_ms  # read by start(): see docstring
        return consumer

    async def _highwaters(self, partitions: list[Any]) -> Any:
        """End offsets for table recovery, probed past what the broker reports.

        Tansu under-reports the end of batched partitions, so Faust's recovery stopped early
        and workers resumed with stale run states (streams/end_offsets.py; tests/chaos).
        """
        reported = await super()._highwaters(partitions)
        app = self.app
        if not isinstance(app, LoopGuardApp) or not app.bootstrap_servers:
            return reported
        if app.in_transaction:
            # Faust reports the last stable offset here; reading on past it would count the
            # records of open transactions. Tansu has no transactions, so nothing to probe.
            return reported
        return await probe_end_offsets(app.bootstrap_servers, reported)


class _TunedConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, using the tuned consumer thread and a pre-commit hook."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _TunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def force_commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        """Run the app's `before_commit` hooks, then commit (every commit path ends here).

        The agent persists run states in these hooks; offsets acked so far are picked after
        they return, without an await in between, so none is committed ahead of its state.
        """
        app = self.app
        if isinstance(app, LoopGuardApp):
            for hook in app.before_commit:
                await hook()
        return bool(await super().force_commit(topics, start_new_transaction=start_new_transaction))

    async def perform_seek(self) -> None:
        """Seek to the committed offsets with the flow stopped, so no fetch straddles the seek.

        Faust's recovery resumes the fetcher before it seeks the stream partitions. Records
        fetched before the seek kept flowing while it ran; the seek then rewound Faust's read
        offsets under them, its gap detector took the next record for a hole in the partition,
        and the phantom gap (which also repeats that record's offset, see `_add_gap`) held
        the partition's commits to one offset per commit interval: the restarted worker read
        everything and committed almost nothing (tests/chaos/test_crash.py, graceful
        restart). With the flow stopped, an in-flight `getmany` stops yielding and the next
        one waits; what it had fetched is read again from the committed offsets.
        """
        was_active = self.flow_active
        self.stop_flow()
        try:
            await super().perform_seek()
        finally:
            if was_active:
                self.resume_flow()

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        """Record a hole in a partition's offsets, without the offset of the record after it.

        Faust calls this with `offset_to` = the offset of the record that follows the hole,
        and stores `[offset_from, offset_to]` inclusive; that record is then acked as well, so
        its offset is in the acked list twice and `_new_offset` (which commits up to the first
        break in a run of consecutive offsets) advances one offset per commit from there on.
        The hole is `[offset_from, offset_to - 1]`.
        """
        await super()._add_gap(tp, offset_from, offset_to - 1)


class _TunedTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport, building the tuned consumer."""

    Consumer = _TunedConsumer


class LoopGuardApp(faust.App):
    """A Faust app whose worker consumer honours `fetch_max_wait_ms` (set per app, not global)."""

    fetch_max_wait_ms: int = 1500
    bootstrap_servers: tuple[str, ...] = ()  # for probing true end offsets (end_offsets.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Awaited before every offset commit (the agent's state checkpoint).
        self.before_commit: list[Callable[[], Awaitable[None]]] = []

    def _new_transport(self) -> Any:
        return _TunedTransport(self.conf.broker_consumer, self)


@dataclass(frozen=True, slots=True)
class Wiring:
    """The app and the channels of one worker."""

    app: LoopGuardApp
    inputs: Any  # faust TopicT over both input topics
    control: Any  # faust TopicT
    dead_letter: Any  # faust TopicT
    table: Any  # faust Table: run_id bytes -> RunState JSON bytes


def changelog_topic(settings: Settings) -> str:
    """Name of the run-state table's changelog topic (Faust's `{app id}-{table}-changelog`)."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def build_app(settings: Settings, metrics: Metrics) -> Wiring:
    """Build the app, its topics, the run-state table and the /metrics and /healthz routes."""
    app = LoopGuardApp(
        settings.app_id,
        broker=settings.broker,
        store=settings.store,
        datadir=str(settings.worker_data_dir),
        autodiscover=False,
        web_enabled=True,
        web_bind=settings.web_host,
        web_host=settings.web_host,
        web_port=settings.web_port,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        topic_disable_leader=True,  # no extra leader-election topic: one agent, no @app.timer
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.session_timeout_ms / 1000,
        broker_heartbeat_interval=settings.heartbeat_ms / 1000,
        broker_rebalance_timeout=settings.rebalance_timeout_ms / 1000,
        recovery_consistency_check=settings.recovery_consistency_check,
        processing_guarantee=settings.processing_guarantee,  # exactly_once: Kafka only
        web_in_thread=False,
        # Table changelog and dead letters share produce requests (decisions bypass linger:
        # streams/outbox.py); batches large enough for one agent batch's decisions.
        producer_linger=0.005,
        producer_max_batch_size=512 * 1024,
        stream_buffer_maxsize=max(4096, 2 * settings.batch_max_events),
    )
    app.fetch_max_wait_ms = settings.fetch_max_wait_ms
    app.bootstrap_servers = tuple(settings.bootstrap_servers)
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    inputs = app.topic(*settings.input_topics, partitions=settings.partitions, **raw)
    control = app.topic(settings.topic_control, partitions=settings.partitions, **raw)
    dead_letter = app.topic(settings.topic_dead_letter, partitions=settings.partitions, **raw)
    table = app.Table(
        TABLE_NAME,
        partitions=settings.partitions,
        key_type=bytes,
        value_type=bytes,
        options=dict(ROCKSDB_OPTIONS),  # a copy: Faust's rocksdb store pops keys from it
    )

    @app.page("/metrics")
    async def metrics_page(self: faust.web.View, request: faust.web.Request) -> Any:
        """Prometheus text exposition of this worker's registry."""
        # aiohttp refuses a charset inside content_type=, so the exact header goes in headers.
        return self.bytes(metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @app.page("/healthz")
    async def healthz_page(self: faust.web.View, request: faust.web.Request) -> Any:
        """Liveness: the web server answers while the worker's event loop runs."""
        return self.bytes(b"ok\n", content_type="text/plain")

    return Wiring(app, inputs, control, dead_letter, table)
