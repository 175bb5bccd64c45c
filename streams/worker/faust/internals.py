"""Faust internals LoopGuard relies on, in one place: every private Faust (and aiokafka-inside-
Faust) name the worker touches is here, with why and the upstream issue where there is one.
faust-streaming is pinned to the minor release these are proven on (pyproject.toml), and
tests/unit/test_layers.py fails if another module reaches for a private Faust name.

- Consumer thread: Faust's aiokafka driver runs the AIOKafkaConsumer in a thread of its own
  and every fetch is a call across threads; `_InLoopConsumerThread` runs the same service in
  the worker's loop (loop_consumer.py; `LOOPGUARD_FAUST_CONSUMER_THREAD=true` brings the
  thread back).
- Consumer fetch wait: Faust builds the worker's AIOKafkaConsumer with `fetch_max_wait_ms`
  hard-coded to 1500 (faust/transport/drivers/aiokafka.py; no setting, no upstream issue
  found). Tansu holds every fetch for about half of it: ~400 ms on each verdict.
- Consumer prefetch backoff: aiokafka's Fetcher sends no fetch to a broker while records it
  fetched for any partition led by that broker are unread, for up to `_prefetch_backoff`
  (100 ms, not an AIOKafkaConsumer argument). Faust pauses a table's changelog partitions
  after recovery only in its own books and never reads them, so each checkpoint's changelog
  records, fetched back, held every tool-call fetch for 100 ms: the p99 of workload L
  (docs/performance.md). The worker sets it after the consumer starts
  (`fetch_prefetch_backoff_ms`, default 5 ms). Not 0: with no backoff the Fetcher sends the
  next fetch the moment a response arrives, without the partitions whose records the worker
  has not yet read, and aiokafka keeps one fetch in flight per broker, so a call arriving on
  such a partition waited for that fetch's long poll to end (the other partitions' next
  record, or the max-wait) before a fetch asked for it: 2 ms at the median at 1,000 calls/s,
  when the worker's loop is busy deciding the previous call. With a few milliseconds of
  backoff the next fetch waits for the worker to read what arrived (it wakes the Fetcher)
  and asks for every partition; unread changelog records hold it for 5 ms at most.
- Table recovery end offsets: Tansu under-reports the end of batched partitions, so Faust's
  recovery stopped early (streams/kafka/end_offsets.py probes past it). Under exactly-once
  Faust takes them from the last fetch (`last_stable_offset`), None for a partition not
  fetched since its assignment, which its recovery reads as -1: a standby partition that
  became active with its stored offset above that stopped the worker with a
  `ConsistencyError` (tests/chaos/test_fleet_outage.py at a 0.1 s commit interval). The
  worker asks the broker instead, as Faust does at-least-once.
- Seek with the flow stopped: faust-streaming/faust #596 (a race in recovery leaves gaps in
  acked offsets and blocks committing), #216 (recovery resumes fetching before seeking).
- Gap bookkeeping: faust-streaming/faust #606 (wrong offset commit in case of gaps).
- Acked offsets: Faust keeps every acked, uncommitted offset in a list and a set per partition
  (`Consumer._acked`, `_acked_index`), read by `ack` and `_new_offset` only (and dropped on
  revoke). The worker holds a checkpoint interval's worth of them, ~1.9 KB per active run in
  bench/memory.py; `_acked` holds `AckedOffsets` (acked.py, ranges) instead, and `ack`,
  `_new_offset` and the batch ack (batches.py) use it.
- Fast path: `Consumer._drain_messages` runs four tasks and an `asyncio.wait` per record
  (faust-streaming/faust #229, robinhood/faust #563); streams/worker/faust/drain.py replaces
  it, keeping what they protect. Off with `LOOPGUARD_FAUST_FAST_PATH=0`. Its bulks (bulk.py)
  track, reference and ack one Faust message for a partition's run of fetched records; off
  with `LOOPGUARD_FAUST_BULK_DELIVERY=0`.
- Commit hook: Faust has no public "before commit" hook; every commit path ends in
  `force_commit`, which we wrap. A hook may return offsets the commit may not pass: Faust
  commits "every acked offset up to the first break" (`Consumer._new_offset`), and the
  checkpoint writes states while the agent goes on acking batches whose states it has not
  taken (streams/worker/agent.py), so `_new_offset` is shown only the acked offsets below the
  limit; the ones above stay in Faust's list for the next commit.
- Producer: the started AIOKafkaProducer (`_ensure_producer`) and its buffer, for a full
  drain before a commit; the buffer's per-record fill check without a settings lookup
  (`size_producer_buffer`).
- Decisions producer: aiokafka keeps one produce request in flight per broker connection, so
  on Faust's producer a verdict waited behind the changelog records of a checkpoint and
  Faust's other sends (docs/performance.md). Faust's producer service builds a
  second AIOKafkaProducer with its own settings (`_new_producer`: same servers, acks, security)
  for the batches the agent builds itself (streams/processing/outbox.py), started and stopped
  with it. Exactly-once has none: its decisions go through the transactional producers by
  source (next).
- Transactional producers by source: under exactly-once Faust picks a record's transactional
  producer by the partition number the record goes *to* (`TransactionManager.send`:
  `{app id}-{topic group}-{destination partition}`), and commits each input partition's
  offsets with the producer of that partition's number. A record an agent produces from one
  input partition for another partition (a fleet contribution keyed by signature, a fleet
  signal written to every input partition, an OTLP span's event keyed by run id) then went
  into another partition's transaction, or, for a partition another worker owns, into none:
  `ProducerSendError: No transaction producer found` stopped the worker
  (tests/chaos/test_fleet_outage.py). `send_in_transaction` hands such a record to the
  transactional producer of the partition it was produced *from* (the driver's `send` with
  its `transactional_id`), so it commits or aborts with that partition's offsets. Faust also
  sends a record with no transaction at all when its consumer has no metadata for the topic
  (`Consumer.key_partition` returns None): the control topic, which the worker does not
  consume, so decisions go this way too (streams/worker/exactly_once.py).
- Transactional producers of revoked partitions: in a rebalance Faust stops the producer of
  each revoked partition only if the *new* assignment does not hold that partition as a
  standby (`TransactionManager.on_rebalance` maps partitions through `_tps_to_active_tpgs`,
  which drops standbys). A partition that moved to another worker while this one keeps its
  changelog as a standby kept its producer, which the new owner's producer then fenced. When
  the partition came back, Faust began a transaction on that fenced producer (its own state
  still IN_TRANSACTION: the warning "Invalid state transition") and the first commit failed
  with `ProducerFenced`: the worker stopped (tests/chaos/test_rebalance.py under exactly-once).
  `_TunedTransactionManager` stops the producer of every revoked partition this worker no
  longer owns, standby or not; the next assignment of it starts a fresh one.
- Commit on revocation: under exactly-once Faust does not commit when partitions are revoked:
  it drops their acked offsets, and after the rebalance every assigned partition, kept ones
  included (the eager protocol revokes them all), is read again from its committed offset.
  Records a checkpoint had already sent into a kept partition's open transaction stayed in it,
  while the run states of the same checkpoint that the revocation stopped it from writing were
  read back older: the events were decided again and their decisions committed twice (the
  join-and-leave scenario of tests/chaos/test_rebalance.py at a 0.1 s commit interval: 5 and
  7 duplicates in 2 runs of 5). As Kafka Streams does, the worker commits before Faust
  revokes: the checkpoint and the transactions of every partition, so nothing is read again.
  From then until the new assignment it commits nothing (Kafka Streams suspends the tasks): a
  checkpoint during the revocation would write the states of events processed after that
  commit into the local store and into a transaction no offsets close (Faust drops a revoked
  partition's acked and committed offsets) and the new owner's producer aborts. It did not
  remove a lost state write the same scenario shows in about one run of fifteen
  (docs/reliability.md, "Known limit"), whose cause is not found.
- Livelock detector's position read: every 2.5 commit intervals Faust's consumer thread checks
  each assigned partition (`verify_event_path`) and reads its position unguarded; aiokafka
  asserts it is set, and it is not between an assignment or seek and the first fetch. At a
  0.1 s commit interval the check fell into that gap and crashed the consumer right after
  "Worker ready" (tests/chaos/test_kafka_faults.py); the worker skips a partition with no
  position yet (there is nothing to verify before its first fetch).
- Committed offsets: Faust's own record (`_committed_offset`), read by
  streams/worker/broker_watch.py.
- Seek with nothing assigned: after a rebalance Faust's recovery seeks "all assigned
  partitions" to their committed offsets (`Consumer.perform_seek`), and aiokafka's
  `seek_to_committed()` asserts that there is at least one. A group whose topics are gone (a
  broker that lost its data, topics deleted) is assigned none, so the worker crashed with an
  `AssertionError` before the broker watch could say what happened (tests/chaos,
  test_broker_restart.py on Kafka). With nothing assigned there is nothing to seek.
- Worker spinner: at WARN and above Faust keeps a spinner and sets the root logger to DEBUG.
- Table routing: a Faust table picks the partition of a read or write from the *current
  event* (`faust.streams._current_event`, a context variable), and offers no public way to
  name the partition. The worker reads and writes run states outside Faust's per-event stream
  (a batch, a checkpoint, a sweep), so `TableStore` sets that variable to an event of the
  partition around each access. Upstream: faust-streaming/faust #497 ("Writing into Table with
  Stream.take() not allowed": `Cannot modify table key from outside of stream iteration`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiokafka
import faust
from faust.streams import _current_event
from faust.transport.consumer import TransactionManager
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import AppT
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from loopguard_fleet.streams.kafka.end_offsets import probe_end_offsets
from loopguard_fleet.streams.worker.faust.acked import AckedOffsets
from loopguard_fleet.streams.worker.faust.batches import ack_offset
from loopguard_fleet.streams.worker.faust.delivery import buffer_over_limit
from loopguard_fleet.streams.worker.faust.drain import drain_messages
from loopguard_fleet.streams.worker.faust.loop_consumer import InLoop

__all__ = [
    "CommitHook",
    "LoopGuardApp",
    "QuietWorker",
    "TableStore",
    "committed_offsets",
    "decisions_producer",
    "drain_producer_buffer",
    "seek_assigned_to_committed",
    "size_producer_buffer",
]


# A before-commit hook; what it returns, if not None, bounds the commit: per (topic, partition)
# the offset it may not pass, and a partition it does not name commits nothing.
CommitHook = Callable[[], Awaitable[Mapping[tuple[str, int], int] | None]]


class TableStore:
    """A Faust table as the processing core's `StateStore`, routed by partition."""

    def __init__(self, table: Any) -> None:
        self._table = table
        self._anchors: dict[int, Any] = {}  # partition -> a Faust event of it (routing)

    def anchor(self, partition: int, event: Any) -> None:
        """Remember an event of `partition`: table accesses for it are routed through it."""
        self._anchors[partition] = event

    def forget(self, partition: int) -> None:
        """Drop the anchor of a partition this worker no longer owns."""
        self._anchors.pop(partition, None)

    def get(self, partition: int, key: bytes) -> bytes | None:
        """The stored state of a run, or None."""
        _current_event.set(weakref.ref(self._anchors[partition]))
        value: bytes | None = self._table.get(key)
        return value

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        """Write a run's state (a changelog record at the next producer flush)."""
        token = _current_event.set(weakref.ref(self._anchors[partition]))
        try:
            self._table[key] = value
        finally:
            _current_event.reset(token)

    def delete(self, partition: int, key: bytes) -> None:
        """Delete a run's state if present."""
        token = _current_event.set(weakref.ref(self._anchors[partition]))
        try:
            if key in self._table:
                del self._table[key]
        finally:
            _current_event.reset(token)


async def seek_assigned_to_committed(consumer: aiokafka.AIOKafkaConsumer) -> Mapping[Any, int]:
    """aiokafka's `seek_to_committed()` for every assigned partition, or {} if none is."""
    # Runs in the consumer's thread (call_thread), where assignments change: no race.
    if not consumer.assignment():
        return {}
    committed: Mapping[Any, int] = await consumer.seek_to_committed()
    return committed


class _TunedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with a configurable fetch max-wait and prefetch backoff.

    We let Faust build the consumer exactly as usual and only replace `fetch_max_wait_ms`
    before the consumer starts (aiokafka hands it to its Fetcher in `start()`), and the
    Fetcher's prefetch backoff once it exists (module docstring).
    """

    async def on_start(self) -> None:
        """Start Faust's consumer, then set its Fetcher's prefetch backoff."""
        await super().on_start()
        app = self.app
        if isinstance(app, LoopGuardApp):
            fetcher = self._ensure_consumer()._fetcher  # built by start(): see docstring
            fetcher._prefetch_backoff = app.fetch_prefetch_backoff_ms / 1000

    def _create_worker_consumer(
        self, transport: faust_aiokafka.Transport
    ) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        app = self.app
        if isinstance(app, LoopGuardApp):
            consumer._fetch_max_wait_ms = app.fetch_max_wait_ms  # read by start(): see docstring
        return consumer

    def verify_event_path(self, now: float, tp: Any) -> None:
        """Faust's livelock check of a partition, skipped before it has a position."""
        consumer = self._ensure_consumer()
        assignment = consumer._fetcher._subscriptions.subscription.assignment  # module docstring
        state = assignment.state_value(aiokafka.TopicPartition(tp.topic, tp.partition))
        if state is None or not state.has_valid_position:
            return None  # nothing fetched yet: aiokafka asserts on the position (docstring)
        return super().verify_event_path(now, tp)

    async def seek_to_committed(self) -> Mapping[Any, int]:
        """Seek the assigned partitions to their committed offsets; none assigned: nothing."""
        committed: Mapping[Any, int] = await self.call_thread(
            seek_assigned_to_committed, self._ensure_consumer()
        )
        return committed

    async def _highwaters(self, partitions: list[Any]) -> Any:
        """End offsets for table recovery, probed past what the broker reports.

        Tansu under-reports the end of batched partitions, so Faust's recovery stopped early
        and workers resumed with stale run states (streams/kafka/end_offsets.py; tests/chaos).
        """
        app = self.app
        if isinstance(app, LoopGuardApp) and app.in_transaction:
            # The last stable offsets, asked of the broker (a `read_committed` consumer's
            # end offsets): reading on past them would count the records of open
            # transactions. Tansu has no transactions, so nothing to probe. Faust reads them
            # from the last fetch, None for a partition not fetched since its assignment.
            return await self._ensure_consumer().end_offsets(partitions)
        reported = await super()._highwaters(partitions)
        if not isinstance(app, LoopGuardApp) or not app.bootstrap_servers:
            return reported
        return await probe_end_offsets(app.bootstrap_servers, reported)


class _InLoopConsumerThread(InLoop, _TunedConsumerThread):
    """The tuned consumer thread run in the worker's event loop (loop_consumer.py)."""


class _TunedConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer: tuned thread, pre-commit hook, seek and gap fixes, fast path."""

    flow_epoch: int = 0  # suspensions of the flow so far (streams/worker/faust/drain.py)
    commit_limits: Mapping[tuple[str, int], int] | None = None  # while a commit picks offsets
    revoking: bool = False  # exactly-once: from the commit before a revocation to the assignment
    # Faust's `list[int]` values become `AckedOffsets`: only the methods overridden here (and
    # `ack_all`, batches.py) read or write them; Faust itself only pops and lists the keys.
    _acked: defaultdict[Any, AckedOffsets]  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Acked offsets as ranges (acked.py); Faust's per-offset index is then never filled.
        self._acked = defaultdict(AckedOffsets)

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        """Under exactly-once, commit what was processed first, then nothing more until the
        next assignment (module docstring, "Commit on revocation"); then Faust's revocation."""
        if self.in_transaction and revoked:
            await self.maybe_wait_for_commit_to_finish()
            try:
                await self.commit()
            except Exception:  # the rebalance goes on: the records are read again
                self.log.exception("Commit before revocation failed")
            self.revoking = True
        await super().on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[Any], generation_id: int = 0) -> None:
        """Commits resume with the new assignment (its partitions are read from their
        committed offsets); then Faust's assignment."""
        self.revoking = False
        await super().on_partitions_assigned(assigned, generation_id)

    def stop_flow(self) -> None:
        """Suspend the flow and count it: the fast path drops what was fetched before."""
        self.flow_epoch += 1
        super().stop_flow()

    async def _drain_messages(self, fetcher: Any) -> None:
        """Feed fetched records to the conductor: the fast path unless the app turned it off."""
        app = self.app
        if isinstance(app, LoopGuardApp) and not app.faust_fast_path:
            await super()._drain_messages(fetcher)
            return
        try:
            bulk_max = app.bulk_max_records if isinstance(app, LoopGuardApp) else 0
            await drain_messages(self, fetcher, bulk_max=bulk_max)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return  # the broker stopped the consumer because we are stopping (as Faust)
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception:
            self.log.exception("Drain messages raised")
            raise

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        app = self.app
        in_loop = not isinstance(app, LoopGuardApp) or not app.faust_consumer_thread
        thread_class = _InLoopConsumerThread if in_loop else _TunedConsumerThread
        return thread_class(self, loop=self.loop, beacon=self.beacon)

    async def force_commit(self, topics: Any = None, start_new_transaction: bool = True) -> bool:
        """Run the app's `before_commit` hooks, then commit (every commit path ends here).

        The agent persists run states in these hooks and returns how far they reach; offsets
        acked so far, below those limits, are picked after the hooks return, without an await
        in between (Faust picks them before its first await), so none is committed ahead of
        its state.
        """
        if self.revoking:  # module docstring, "Commit on revocation"
            return False
        app = self.app
        limits: dict[tuple[str, int], int] | None = None
        if isinstance(app, LoopGuardApp):
            for hook in app.before_commit:
                bound = await hook()
                if bound is not None:
                    limits = _tighter(limits, bound)
        self.commit_limits = limits
        try:
            return bool(
                await super().force_commit(topics, start_new_transaction=start_new_transaction)
            )
        finally:
            self.commit_limits = None

    def _new_offset(self, tp: Any) -> int | None:
        """The next offset to commit for `tp`: the end of the lowest run of consecutive acked
        offsets, holes filled in, below the commit's limit (Faust's `_new_offset`, on ranges).

        Faust's own walks a sorted list of every acked offset; ours reads `AckedOffsets`
        (streams/worker/faust/acked.py). The rules are Faust's: the holes its gap tree holds
        up to the highest acked offset below the limit count as acked (and leave the tree),
        and nothing is committed while the lowest acked offset is more than one past the
        committed one. The acked offsets at or above the limit stay for the next commit.
        """
        limits = self.commit_limits
        below: int | None = None
        if limits is not None:
            below = limits.get(tp)
            if below is None:
                return None  # nothing of this partition is known to be written
        acked = self._acked[tp]
        highest = acked.highest(below)
        if highest is None:
            return None
        gaps = self._gap[tp]
        if gaps:
            holes = sorted(gaps.overlap(0, highest), key=lambda hole: hole.begin)
            if holes:
                for hole in holes:
                    acked.add_range(hole.begin, hole.end)
                gaps.chop(0, max(holes[-1].end - 1, highest + 1))
        committed = self._committed_offset[tp]
        if committed and acked.lowest() - committed > 1:
            return None
        return acked.take_first_run(below)

    def ack(self, message: Any) -> bool:
        """Mark a record acked (Faust's `Consumer.ack`, on `AckedOffsets`)."""
        with ack_lock:  # as Faust: the test-and-set and the bookkeeping are one step
            if message.acked:
                return False
            message.acked = True
            if not self.app.topics.acks_enabled_for(message.topic):
                return False
            try:
                if ack_offset(self, message):
                    self._n_acked += 1
                    return True
                return False
            finally:
                notify(self._waiting_for_ack)

    async def seek_to_committed(self) -> Any:
        """Seek each partition to its committed offset; an input partition without one (or at
        0) to its beginning, the worker's reset policy (`consumer_auto_offset_reset`, app.py).

        In a rebalance Faust drops what a fetch returns for a paused or stopped partition and
        relies on this seek to read it again (#216 above). aiokafka seeks only partitions with a
        committed offset above 0: one the group had not committed yet kept its position past
        the dropped records, which no worker then processed (a second worker joining before
        the first commit: 7-19 events per input partition skipped, runs left with stale
        states; docs/reliability.md). Changelog partitions are left to the table's recovery.
        """
        committed = await super().seek_to_committed()
        changelogs = self.app.tables.changelog_topics
        fresh = [tp for tp, off in committed.items() if not off and tp.topic not in changelogs]
        if fresh:
            await self._thread.seek_to_beginning(*fresh)
        return committed

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


def _tighter(
    limits: dict[tuple[str, int], int] | None, bound: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Two hooks' limits as one: the partitions both name, at the lower offset."""
    if limits is None:
        return dict(bound)
    return {tp: min(offset, bound[tp]) for tp, offset in limits.items() if tp in bound}


class _TunedProducer(faust_aiokafka.Producer):
    """Faust's aiokafka producer plus a producer of the agent's decisions (module docstring)."""

    _decisions: aiokafka.AIOKafkaProducer | None = None

    async def on_start(self) -> None:
        """Start Faust's producer, then, at least once, the decisions producer beside it."""
        await super().on_start()
        if not self.app.in_transaction:
            decisions = self._decisions = self._new_producer()
            await decisions.start()

    async def on_stop(self) -> None:
        """Stop the decisions producer (it sends what it holds first), then Faust's."""
        decisions, self._decisions = self._decisions, None
        if decisions is not None:
            await decisions.stop()
        await super().on_stop()


class _TunedTransactionManager(TransactionManager):
    """Faust's transaction manager, stopping the producer of every partition the worker no
    longer owns (module docstring, "Transactional producers of revoked partitions")."""

    async def on_rebalance(
        self, assigned: set[Any], revoked: set[Any], newly_assigned: set[Any]
    ) -> None:
        """Stop the revoked partitions' producers, standbys now included; then Faust's."""
        gone = self._transactional_ids(revoked) - self._tps_to_transactional_ids(assigned)
        if gone:
            # Faust's own stop (below) pops the producer it finds: these are gone by then.
            await self._stop_transactions(sorted(gone))
        await super().on_rebalance(assigned, revoked, newly_assigned)

    def _transactional_ids(self, tps: set[Any]) -> set[str]:
        """The transactional ids of `tps`, standby or active alike."""
        ids = set()
        for tp in tps:
            try:
                ids.add(transactional_id(self.app, tp.topic, tp.partition))
            except KeyError:  # a topic of no agent's group (none has a producer)
                continue
        return ids


class _TunedTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport, building the tuned consumer, producer and transaction
    manager."""

    Consumer = _TunedConsumer
    Producer = _TunedProducer
    TransactionManager = _TunedTransactionManager


class LoopGuardApp(faust.App):
    """A Faust app whose worker consumer honours its fetch settings (set per app, not global)."""

    fetch_max_wait_ms: int = 1500
    fetch_prefetch_backoff_ms: int = 100  # aiokafka's own
    faust_fast_path: bool = True  # streams/worker/faust/drain.py instead of Faust's drain loop
    # The fast path's bulks (streams/worker/faust/bulk.py): records per bulk at most, 0 = off.
    bulk_max_records: int = 0
    faust_consumer_thread: bool = False  # Faust's consumer thread, not loop_consumer.py
    bootstrap_servers: tuple[str, ...] = ()  # for probing true end offsets (end_offsets.py)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Awaited before every offset commit (the agent's state checkpoint, CommitHook).
        self.before_commit: list[CommitHook] = []

    def _new_transport(self) -> Any:
        return _TunedTransport(self.conf.broker_consumer, self)


class QuietWorker(faust.Worker):
    """Faust's worker without the terminal spinner.

    With a log level of WARN or above, Faust keeps a progress spinner and, to feed it, sets
    the root logger to DEBUG: every library's debug call (aiokafka logs several per produce
    request) then builds a LogRecord. Without the spinner the configured level applies.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spinner = None


def decisions_producer(app: faust.App) -> aiokafka.AIOKafkaProducer:
    """The started AIOKafkaProducer for the agent's hand-built decision batches.

    The worker's own (module docstring); Faust's, when there is none (exactly-once, or an app
    whose transport is not ours).
    """
    own: aiokafka.AIOKafkaProducer | None = getattr(app.producer, "_decisions", None)
    if own is not None:
        return own
    producer: aiokafka.AIOKafkaProducer = app.producer._ensure_producer()  # type: ignore[attr-defined]  # private (module docstring)
    return producer


def size_producer_buffer(app: faust.App, max_messages: int) -> None:
    """Let Faust's producer buffer hold `max_messages` before it stops the conductor.

    The conductor awaits the buffer's `wait_until_ebb` for every record, and Faust's reads
    `app.conf.producer_threaded` (a settings object with a slow `__getattribute__`) each
    time: 5 % of the worker's time on workload P (docs/performance.md). The same check, with
    that setting read once, replaces it before the conductor compiles its handlers (it binds
    the method then); a threaded producer keeps Faust's.
    """
    buffer = app.producer.buffer
    buffer.max_messages = max_messages
    if app.conf.producer_threaded:
        return
    over = buffer_over_limit(app)

    async def wait_until_ebb() -> None:
        if over():
            await buffer.flush_atmost(buffer.max_messages)

    buffer.wait_until_ebb = wait_until_ebb  # type: ignore[method-assign]  # see the docstring


class _BufferMark:
    """A no-op entry of Faust's producer buffer: `reached` once its sender gets to it."""

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.message = self.channel = self  # the buffer calls fut.message.channel.publish_message

    async def publish_message(self, fut: Any, wait: bool = False) -> None:
        """Called by the buffer's sender in queue order: everything queued before is sent."""
        self.reached.set()


async def drain_producer_buffer(app: faust.App) -> None:
    """Wait until every message queued in Faust's producer buffer was handed to the producer.

    The buffer's sender task takes a message off the queue before it hands it on, so "queue
    empty" (what `buffer.flush` waits for) left the last one in flight: under exactly-once it
    then joined the transaction after the commit, which nothing committed once the input
    ended (a run's last state write missing, docs/reliability.md). A mark queued behind the
    messages is reached only once all of them were handed over.
    """
    mark = _BufferMark()
    app.producer.buffer.pending.put_nowait(mark)
    await mark.reached.wait()


def transactional_id(app: AppT, topic: str, partition: int) -> str:
    """The transactional id Faust commits an input topic-partition's offsets with."""
    return f"{app.conf.id}-{app.assignor.group_for_topic(topic)}-{partition}"


async def send_in_transaction(
    app: faust.App,
    transactional_id: str,
    topic: str,
    key: bytes | None,
    value: bytes,
    partition: int | None,
) -> asyncio.Future[Any] | None:
    """Send one record through the transactional producer `transactional_id`; its delivery
    future, or None when this worker has no such producer (its partition was revoked)."""
    producer = app.producer  # the transport's driver: its `send` takes the transactional id
    if transactional_id not in producer._transaction_producers:  # type: ignore[attr-defined]  # private (module docstring)
        return None
    fut = await producer.send(
        topic, key, value, partition, None, None, transactional_id=transactional_id
    )
    return fut  # type: ignore[return-value]  # typed Awaitable: aiokafka's is a Future


def committed_offsets(app: faust.App) -> dict[Any, int]:
    """Faust's record of the offsets this worker committed, per topic-partition."""
    return dict(app.consumer._committed_offset)  # type: ignore[attr-defined]  # private (module docstring)
