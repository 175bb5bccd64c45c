"""The Faust app of one worker: topics, the run-state table, web routes (its consumer tuning
lives with the other Faust internals in streams/worker/faust/internals.py).

`build_app(settings, metrics)` returns a `Wiring`: the app and the channels the agent uses.
It builds objects only; nothing connects to the broker until the worker starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import faust

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.kafka.security import ClientSecurity
from loopguard_fleet.streams.processing.metrics import CONTENT_TYPE_LATEST, Metrics
from loopguard_fleet.streams.worker.faust.internals import LoopGuardApp
from loopguard_fleet.streams.worker.faust.raw_schema import RawSchema
from loopguard_fleet.streams.worker.faust.readiness import is_consuming

__all__ = ["TABLE_NAME", "Wiring", "build_app", "changelog_topic"]

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
    """Build the app, its topics, the run-state table and its /metrics, /healthz, /readyz."""
    app = LoopGuardApp(
        settings.app_id,
        broker=settings.broker,
        broker_credentials=ClientSecurity.from_settings(settings).faust_credentials(),
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
        broker_commit_interval=settings.commit_interval,
        processing_guarantee=settings.processing_guarantee,  # exactly_once: Kafka only
        web_in_thread=False,
        # Table changelog and dead letters share produce requests (decisions bypass linger:
        # streams/processing/outbox.py); batches large enough for one agent batch's decisions.
        producer_linger=0.005,
        producer_max_batch_size=512 * 1024,
        stream_buffer_maxsize=max(4096, 2 * settings.batch_max_events),
        broker_max_poll_records=settings.fetch_max_records or settings.batch_max_events,
    )
    app.fetch_max_wait_ms = settings.fetch_max_wait_ms
    app.fetch_prefetch_backoff_ms = settings.fetch_prefetch_backoff_ms
    app.faust_fast_path = settings.faust_fast_path
    # A bulk holds at most one agent batch, so batches and the work redone after a crash stay
    # as large as LOOPGUARD_BATCH_MAX_EVENTS says (docs/performance.md).
    app.bulk_max_records = settings.batch_max_events if settings.faust_bulk_delivery else 0
    app.faust_consumer_thread = settings.faust_consumer_thread
    # The end-offset probe (streams/kafka/end_offsets.py) is for Tansu, which under-reports
    # and has no TLS/SASL; its consumer carries no credentials, so a secured worker skips it.
    is_plaintext = settings.security_protocol == "PLAINTEXT"
    app.bootstrap_servers = tuple(settings.bootstrap_servers) if is_plaintext else ()
    raw = RawSchema()  # bytes in, bytes out (streams/worker/faust/raw_schema.py)
    inputs = app.topic(*settings.input_topics, partitions=settings.partitions, schema=raw)
    control = app.topic(settings.topic_control, partitions=settings.partitions, schema=raw)
    dead_letter = app.topic(settings.topic_dead_letter, partitions=settings.partitions, schema=raw)
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

    @app.page("/readyz")
    async def readyz_page(self: faust.web.View, request: faust.web.Request) -> Any:
        """Readiness: 200 once the worker consumes its input partitions, 503 until then."""
        if is_consuming(app, settings.input_topics):
            return self.bytes(b"ready\n", content_type="text/plain")
        return self.bytes(b"not ready\n", content_type="text/plain", status=503)

    return Wiring(app, inputs, control, dead_letter, table)
