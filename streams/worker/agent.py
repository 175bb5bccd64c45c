"""The detection agent: Faust's glue around the processing core (streams/processing/).

Each batch of Faust events goes through `RunDriver.apply` (decode ▸ load ▸ engine ▸ publish ▸
sweep); decisions leave once per batch as one produce batch per partition, so a verdict never
waits for a batch to fill or a linger. A checkpoint runs right before every offset commit
(`before_commit`), and batches go on while it writes (at-least-once):

1. under the agent's lock, between two batches (~1 µs a changed run): take every changed run's
   state, the control batches sent so far and, per input partition, the offset after the last
   event processed: the state taken is exactly what the events below that offset produced;
   the same step takes, from the commit gate (streams/worker/commit_gate.py), the offsets
   the worker's other agents processed and everything sent through it (contributions, fleet
   signals, dead letters), and the states those agents keep beside the runs (`Snapshots`);
2. without the lock: wait until those control batches and gate records are acknowledged,
   write the taken states in slices of a few milliseconds with Faust's producer buffer
   drained after each, so the agent's batches run in between, then evict idle runs;
3. Faust commits, but no further than the offsets taken in 1 (`commit_limits`, applied by the
   consumer in streams/worker/faust/internals.py): an event processed while the checkpoint
   wrote is committed by the next one, after its state is written.

So a record's offset is committed, whichever agent read it, only after everything produced
from it was acknowledged and the state it produced was handed to the changelog producer, and
a redelivered event is dropped by the engine (docs/reliability.md). Exactly-once keeps the
whole checkpoint under the lock (streams/worker/exactly_once.py). The core's cache is dropped
on every revoke and assign, so a rebalance never leaves a stale copy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from time import monotonic, perf_counter, time
from typing import Any

from loopguard_fleet.config import Policy
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.collector import freeze_startup_heap
from loopguard_fleet.streams.processing import DriverLimits, RunDriver
from loopguard_fleet.streams.processing.driver import TakenRun
from loopguard_fleet.streams.processing.fleet_partition import PartitionFleet
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.processing.outbox import FaustOutbox, Outbox
from loopguard_fleet.streams.worker.app import Wiring
from loopguard_fleet.streams.worker.commit_gate import CommitGate, InputPartition, Snapshots
from loopguard_fleet.streams.worker.exactly_once import transactional_sender
from loopguard_fleet.streams.worker.faust.batches import take_batches
from loopguard_fleet.streams.worker.faust.bulk import Bulk, messages_of, records_in
from loopguard_fleet.streams.worker.faust.internals import (
    TableStore,
    drain_producer_buffer,
    size_producer_buffer,
)
from loopguard_fleet.streams.worker.fleet import FleetLink

__all__ = ["RunProcessor", "install_agent"]

log = logging.getLogger(__name__)

# The checkpoint writes taken states for this long, then lets the agent's batches run (each
# slice's changelog records then cost Faust's producer about as long again: docs/performance.md).
WRITE_SLICE_S = 0.002


class _FaustOutputs:
    """Decisions to the outbox (under exactly-once through the commit gate, in the transaction
    of the input partition they came from), dead letters to Faust's dead-letter topic."""

    def __init__(
        self, outbox: Outbox, wiring: Wiring, gate: CommitGate, *, transactional: bool
    ) -> None:
        self._outbox = outbox
        self._control = wiring.control
        self._dead_letter = wiring.dead_letter
        self._gate = gate
        self._transactional = transactional

    def decision(self, key: bytes, value: bytes, source: tuple[str, int]) -> None:
        if self._transactional:  # streams/worker/exactly_once.py
            self._gate.send(self._control, key, value, source=source)
        else:
            self._outbox.add(key, value)

    def dead_letter(self, key: bytes | None, value: bytes, source: tuple[str, int]) -> None:
        self._gate.send(self._dead_letter, key, value, source=source)


def driver_limits(settings: Settings) -> DriverLimits:
    """The processing core's limits from the worker's settings."""
    return DriverLimits(
        max_message_bytes=settings.max_message_bytes,
        dead_letter_prefix_bytes=settings.dead_letter_prefix_bytes,
        run_idle_ttl_ms=int(settings.run_idle_ttl_seconds * 1000),
        run_cache_idle_ms=int(settings.run_cache_idle_seconds * 1000),
        hot_runs=settings.run_cache_hot_runs,
    )


class RunProcessor:
    """Feeds batches of Faust events to the processing core; checkpoints before commits."""

    def __init__(
        self,
        wiring: Wiring,
        settings: Settings,
        policy: Policy,
        metrics: Metrics,
        outbox: Outbox | None = None,
        *,
        base_document: Mapping[str, Any] | None = None,
    ):
        self._w = wiring
        self._outbox: Outbox = outbox if outbox is not None else FaustOutbox(wiring)
        self._store = TableStore(wiring.table)
        # What every agent of the worker processed and produced (streams/worker/commit_gate.py),
        # and the states other agents keep beside the runs (the fleet task's windows).
        # Under exactly-once the gate holds records to the checkpoint and sends each in the
        # transaction of the input partition it came from (streams/worker/exactly_once.py).
        exactly_once = settings.processing_guarantee == "exactly_once"
        self.gate = CommitGate(
            lambda: drain_producer_buffer(wiring.app),
            transactional_sender(wiring.app) if exactly_once else None,
        )
        self.snapshots: list[Snapshots] = []
        # Fleet signals on: the partitions' firing sets and the contributions to send
        # (streams/worker/fleet.py sets `fleet_link` when it installs the fleet task).
        self.fleet = PartitionFleet(policy.fleet) if policy.fleet.enabled else None
        self.fleet_link: FleetLink | None = None
        self.driver = RunDriver(
            policy.with_channel_tools(settings.channel_tools),
            driver_limits(settings),
            self._store,
            _FaustOutputs(self._outbox, wiring, self.gate, transactional=exactly_once),
            metrics,
            fleet=self.fleet,
            follows=settings.policy_topic,  # its group's switch records only (docs/policy.md)
            base_document=base_document,  # the start-up policy, stored with the first switch
            v1_topic=settings.topic_tool_calls,  # stored switches of the first format: its own
        )
        self._metrics = metrics
        self._lock = asyncio.Lock()  # a batch and a checkpoint's taking never interleave
        self._checkpointing = asyncio.Lock()  # one checkpoint at a time (they write in order)
        # Exactly-once keeps the lock while it writes (streams/worker/exactly_once.py).
        self._writes_under_lock = settings.processing_guarantee == "exactly_once"
        self._limits: dict[InputPartition, int] = {}  # what the running commit may commit

    async def process(self, events: Sequence[Any]) -> None:
        """Process one batch of Faust events and bulks (streams/worker/faust/bulk.py); never
        raises for bad input or engine bugs."""
        async with self._lock:
            started = perf_counter()
            wall, mono = time(), monotonic()
            read_to = self.gate.read_to
            held = 0
            for event in events:  # the last event of each partition routes its table access
                msg = event.message  # a bulk's is its last record's
                self._store.anchor(msg.partition, event.event if type(event) is Bulk else event)
                read_to[msg.topic, msg.partition] = msg.offset + 1
                held += records_in(event)
            has_verdict = self.driver.apply(messages_of(events))
            if self.fleet_link is not None:
                await self.fleet_link.send()
            decided = perf_counter()
            await self._outbox.send(urgent=has_verdict)
            sent = perf_counter()
            self._metrics.observe_batch(sent - started, held)
            if has_verdict:  # where a verdict's time goes (docs/performance.md)
                self._time_verdict(events, (wall, mono), decided - started, sent - decided, sent)

    def _time_verdict(
        self,
        events: Sequence[Any],
        start: tuple[float, float],
        engine: float,
        send: float,
        sent: float,
    ) -> None:
        """Observe a verdict batch's stages (`start`: its wall and monotonic time), its
        acknowledgement's when it comes. The fetch's time is the monotonic stamp the drain
        loop gives each message (streams/worker/faust/drain.py)."""
        wall, mono = start
        stamped = [(m.timestamp, m.time_in) for e in events if (m := e.message).timestamp]
        fetch = queue = 0.0
        if stamped:
            ts, fetched = min(stamped, key=itemgetter(0))  # the oldest record
            waited = max(0.0, wall - ts)
            queue = waited if fetched is None else min(waited, max(0.0, mono - fetched))
            fetch = waited - queue
        metrics = self._metrics
        metrics.observe_verdict_batch(fetch, queue, engine, send)
        futures = self._outbox.sent_last()
        if futures:
            futures[-1].add_done_callback(
                lambda _: metrics.observe_verdict_ack(perf_counter() - sent)
            )

    async def before_commit(self) -> Mapping[InputPartition, int]:
        """Checkpoint: outputs delivered, then every changed run's state written once.

        Returns the offsets the commit that follows may not pass, per input partition (the
        module docstring); partitions forgotten meanwhile leave it, so they commit nothing.
        """
        async with self._checkpointing:
            if self._writes_under_lock:
                async with self._lock:
                    writers = self._take_snapshots()
                    self._limits, sent = self.gate.take()
                    try:
                        if self.driver.has_dirty:
                            await self._outbox.wait_delivered()
                            self.checkpoint()
                        await sent.wait()
                        if sent.dropped:
                            log.info("%d records from revoked partitions not sent", sent.dropped)
                        for write in writers:
                            write()
                        await drain_producer_buffer(self._w.app)
                    except BaseException:
                        self._untake_snapshots()
                        raise
                return self._limits
            async with self._lock:
                taken = self.driver.take_dirty()
                writers = self._take_snapshots()
                limits, sent = self.gate.take()
                self._limits = limits
                if not taken and not sent and not writers:  # nothing produced or changed
                    return limits
                # No run changed: no decision was sent since the last checkpoint.
                delivery = self._outbox.delivery() if taken else None
            written = 0
            try:
                if delivery is not None:
                    await delivery.wait()
                await sent.wait()
                for written in self._write(taken):  # noqa: B007  # read in `finally`
                    await drain_producer_buffer(self._w.app)  # the agent's batches run meanwhile
                for write in writers:
                    write()
                if writers:
                    await drain_producer_buffer(self._w.app)
            except BaseException:
                self._untake_snapshots()
                raise
            finally:
                # Cancelled (the worker stopping) or outputs lost: what was not written is the
                # next checkpoint's, or a later commit would pass its events without it.
                self.driver.untake(taken[written:])
            self.driver.evict_idle()
            return limits

    def _take_snapshots(self) -> list[Callable[[], None]]:
        """Under the lock: the other agents' states to write before this commit."""
        return [w for s in self.snapshots if (w := s.take_snapshots()) is not None]

    def _untake_snapshots(self) -> None:
        for s in self.snapshots:
            s.untake_snapshots()

    def _write(self, taken: list[TakenRun]) -> Iterator[int]:
        """Write the taken runs in slices of WRITE_SLICE_S; after each (and the last), yield
        how many are written: the caller drains Faust's producer buffer then, so the slice's
        changelog records are handed on before the next and no offset is committed ahead of
        its state."""
        write = self.driver.write_taken
        slice_end = perf_counter() + WRITE_SLICE_S
        for n, run in enumerate(taken, 1):
            write(run)
            if perf_counter() >= slice_end:
                yield n
                slice_end = perf_counter() + WRITE_SLICE_S
        yield len(taken)

    @property
    def store(self) -> TableStore:
        """The run table, routed by partition (the fleet task keeps its state in it too)."""
        return self._store

    def checkpoint(self) -> None:
        """Write each changed run's state to the table, then evict the idle ones from memory."""
        self.driver.checkpoint()

    def forget_partitions(self, partitions: Iterable[int]) -> None:
        """Drop everything held for partitions whose ownership changed (revoke or assign)."""
        partitions = set(partitions)
        self.driver.forget(partitions)
        if self.fleet is not None:
            self.fleet.forget(partitions)
        for p in partitions:
            self._store.forget(p)
        # Their offsets leave the running commit too: what a checkpoint took of them may not
        # be written any more (RunDriver.write_taken), and their records are read again.
        self.gate.forget(partitions)
        for tp in [tp for tp in self._limits if tp[1] in partitions]:
            del self._limits[tp]


def install_agent(wiring: Wiring, processor: RunProcessor, settings: Settings) -> None:
    """Register the detection agent (concurrency 1: it owns the table) and its hooks."""
    app = wiring.app
    within = settings.batch_within_ms / 1000
    app.before_commit.append(processor.before_commit)
    # A checkpoint queues one changelog record per changed run (~1,000 on workload P) at once;
    # with Faust's default (100) the conductor would stop delivering input until they drain.
    size_producer_buffer(app, max(10_000, 4 * settings.batch_max_events))

    @app.agent(wiring.inputs, name="loopguard-detect", concurrency=1)
    async def detect(stream: Any) -> None:
        """Consume both input topics in batches (the fast path: what is queued, no timer)."""
        freeze_startup_heap()
        batches = (
            take_batches(stream, settings.batch_max_events)
            if settings.faust_fast_path
            else stream.take_events(settings.batch_max_events, within=within)
        )
        async for events in batches:
            await processor.process(events)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def on_revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop the cache of partitions that may move to another worker."""
        revoked = args[0] if args else kwargs.get("revoked", ())
        processor.forget_partitions({tp.partition for tp in revoked})

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # mode types receivers as sync
    async def on_assigned(sender: Any, *args: Any, **kwargs: Any) -> None:
        """Drop any cache of newly assigned partitions: their table state is authoritative."""
        assigned = args[0] if args else kwargs.get("assigned", ())
        processor.forget_partitions({tp.partition for tp in assigned})
