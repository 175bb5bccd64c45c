"""Replay inputs read as a stream: JSONL files (plain or gzip), stdin (`-`), or a topic.

Every source yields `(position, raw)` pairs in a deterministic order with bounded memory:
`position` is the 1-based line number of a file, or the 1-based index of a topic's message in
read order (partitions in order, each in offset order), and is what a rejected line names.
OTLP traces are read through one of these (streams/audit/otlp_input.py).
"""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO, Final, cast

from loopguard_fleet.detectors.jsjson import NotJSON, loads
from loopguard_fleet.streams.audit.lines import NumberedLines
from loopguard_fleet.streams.errors import StreamError

if TYPE_CHECKING:  # aiokafka is imported only for topics
    from loopguard_fleet.streams.kafka.security import ClientSecurity

__all__ = [
    "PARTITION_START",
    "Bound",
    "FileInput",
    "InputError",
    "InputItem",
    "PartitionStart",
    "Placed",
    "RefusedItem",
    "TopicInput",
    "file_items",
    "merge_by_seq",
    "open_input",
    "parse_bound",
    "topic_items",
]

InputItem = tuple[int, bytes]
#: How long an audit waits for a topic to exist. It reads what was recorded, so a topic that
#: is missing is a typo or the wrong cluster, not a worker still creating it: say so at once
#: (the second covers a topic created a moment ago whose metadata is still spreading).
AUDIT_TOPIC_WAIT_S: Final = 1.0
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"


class InputError(StreamError):
    """An input that cannot be read: a missing file, a corrupt gzip stream, a bad bound."""


class RefusedItem(bytes):
    """An item its source refused before the replay saw it (an OTLP span that cannot become
    events): empty bytes, so every decoder rejects it, carrying the source's reason. The
    replay counts and shows it as a rejected line with that reason and detail."""

    reason: str
    detail: str

    def __new__(cls, reason: str, detail: str) -> RefusedItem:
        """An empty item with its refusal."""
        item = super().__new__(cls, b"")
        item.reason, item.detail = reason, detail
        return item

    def __reduce__(self) -> tuple[type[RefusedItem], tuple[str, str]]:
        """Pickled as its refusal (replay shards receive items through pipes)."""
        return (RefusedItem, (self.reason, self.detail))


class PartitionStart(bytes):
    """The item a topic's reader puts before each partition's records (when asked to): the
    replay's partition decides with the policy it started with until its first policy switch
    record (docs/policy.md, "Where a switch applies"). Empty: it is no input line."""

    def __reduce__(self) -> tuple[type[PartitionStart], tuple[()]]:
        """Pickled as itself (replay shards receive items through pipes)."""
        return (PartitionStart, ())


PARTITION_START: Final = PartitionStart()


class Placed(bytes):
    """A topic's message with where it was read: its topic-partition (`place`, e.g.
    `loopguard.tool-calls[3]`) and offset. A merged replay of both input topics decides each
    event with the switch in force at its own topic-partition's offset, as the worker
    (docs/policy.md, "Where a switch applies"), whatever the seq order puts before it."""

    place: str
    offset: int

    def __new__(cls, value: bytes, place: str, offset: int) -> Placed:
        """A message's value with its topic-partition and offset."""
        item = super().__new__(cls, value)
        item.place, item.offset = place, offset
        return item

    def __reduce__(self) -> tuple[type[Placed], tuple[bytes, str, int]]:
        """Pickled with its place (replay shards receive items through pipes)."""
        return (Placed, (bytes(self), self.place, self.offset))


def place_of(topic: str, partition: int) -> str:
    """The name of an input topic-partition in a replay (a `Placed` item's `place`)."""
    return f"{topic}[{partition}]"


def is_switch_record(value: bytes) -> bool:
    """Whether a message is a `policy_switch` record (those before a `--from` are read too)."""
    if b'"policy_switch"' not in value:  # most records: one search, no decoding
        return False
    try:
        obj = loads(value)
    except NotJSON:
        return False
    return isinstance(obj, dict) and obj.get("type") == "policy_switch"


@dataclass(frozen=True, slots=True)
class Bound:
    """A `--from` / `--to` position of a topic: an offset, or a time in epoch milliseconds."""

    offset: int | None = None
    time_ms: int | None = None

    def is_after(self, other: Bound) -> bool:
        """True when both are offsets, or both times, and this one comes later."""
        if self.offset is not None and other.offset is not None:
            return self.offset > other.offset
        if self.time_ms is not None and other.time_ms is not None:
            return self.time_ms > other.time_ms
        return False


def parse_bound(text: str) -> Bound:
    """`1200` is an offset (every partition); an RFC 3339 time is a record timestamp."""
    if text.isdigit():
        return Bound(offset=int(text))
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{text!r} is neither an offset (e.g. 1200) nor an RFC 3339 time "
            "(e.g. 2026-12-01T10:00:00Z)"
        ) from None
    if when.tzinfo is None:
        raise InputError(f"{text!r} has no time zone (add Z or +00:00)")
    return Bound(time_ms=int(when.timestamp() * 1000))


def open_input(path: str) -> BinaryIO:
    """A binary stream of `path` (`-` is stdin), gunzipped when it starts with gzip's magic."""
    return _open(path)[0]


def _open(path: str) -> tuple[BinaryIO, BinaryIO]:
    """(the decoded stream, the raw file under it, whose position tracks progress)."""
    try:
        raw: BinaryIO = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
    try:
        magic = buffered.peek(2)[:2]
    except OSError as exc:
        if path != "-":
            buffered.close()
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    stream = buffered
    if magic == _GZIP_MAGIC:
        unzipped = gzip.GzipFile(fileobj=buffered, mode="rb")
        stream = io.BufferedReader(cast(Any, unzipped), 1 << 16)
    try:
        if stream.peek(len(_BOM))[: len(_BOM)] == _BOM:
            stream.read(len(_BOM))  # a UTF-8 byte order mark starts the text, not line 1
    except (EOFError, gzip.BadGzipFile):
        pass  # a corrupt gzip stream is reported where its lines are read
    return stream, buffered


class FileInput:
    """Non-blank lines of a file or stdin with their 1-based line numbers, one at a time."""

    unit = "line"

    def __init__(self, path: str) -> None:
        self.path = path
        self.total_bytes: int | None = None
        if path != "-" and os.path.isfile(path):
            self.total_bytes = os.path.getsize(path)
        self._raw: BinaryIO | None = None
        self._followed: int | None = None

    def done_bytes(self) -> int:
        """Bytes of the file (compressed, for gzip) read so far, here or as last `follow`ed."""
        if self._followed is not None:
            return self._followed
        try:
            return self._raw.tell() if self._raw is not None else 0
        except OSError:
            return 0

    def follow(self, done_bytes: int) -> None:
        """Report the bytes another reader of the same file has read (replay shards read the
        file themselves; the progress bar follows them)."""
        self._followed = done_bytes

    def __iter__(self) -> Iterator[InputItem]:
        # Compiled (setup.py): the per-line loop of a file replay. Its items are InputItems.
        return cast(Iterator[InputItem], NumberedLines(self))

    def open(self) -> BinaryIO:
        """Open the file (or stdin) for one pass of `__iter__`."""
        stream, self._raw = _open(self.path)
        self._followed = None
        return stream

    def failed(self, exc: OSError | EOFError, line: int) -> InputError:
        """The error for a read that failed after line `line`."""
        if isinstance(exc, EOFError | gzip.BadGzipFile):
            return InputError(f"{self.path}: corrupt gzip stream after line {line}: {exc}")
        reason = exc.strerror or exc
        return InputError(f"cannot read {self.path} after line {line}: {reason}")

    def close(self, stream: Iterator[bytes]) -> None:
        """End a pass: what was read is kept for `done_bytes`, the file is closed."""
        self._followed = self.done_bytes()  # what was read, once the file is closed
        if self.path != "-":
            cast(BinaryIO, stream).close()
            if self._raw is not None:
                self._raw.close()  # a GzipFile leaves the file it was given open


def file_items(path: str) -> Iterator[InputItem]:
    """`FileInput(path)` as a plain iterator."""
    return iter(FileInput(path))


def topic_items(
    bootstrap: str,
    topic: str,
    start: Bound | None = None,
    end: Bound | None = None,
    wait_s: float = 10.0,
    idle_s: float = 0.5,
    security: ClientSecurity | None = None,
    marks: bool = False,
    placed: bool = False,
) -> Iterator[InputItem]:
    """A topic's message values from `start` (inclusive) to `end` (exclusive), streamed.

    Partitions are read one after the other, each in offset order; `marks`: each partition's
    records follow a `PARTITION_START` (at the position of the record before it); `placed`:
    each value is a `Placed` item. With `marks` or `placed`, the `policy_switch` records
    before `start` are read too (the partition is read from its beginning for them), so that
    the first events replayed are decided by the switch in force at their offsets. Without
    `end`, a partition is read until its reported end and then quiet for `idle_s` (Tansu
    reports too low an end offset for partitions written in batches:
    streams/kafka/topic_reader.py).
    """
    from loopguard_fleet.streams.kafka.broker_wait import (
        retry_until_reachable,  # aiokafka: only for topics
    )

    loop = asyncio.new_event_loop()
    try:
        reader = _TopicReader(bootstrap, topic, wait_s, idle_s, security, marks or placed)
        loop.run_until_complete(retry_until_reachable(reader.start, bootstrap, 0.0))
        try:
            n = 0
            for partition in range(reader.partitions):
                first, last = loop.run_until_complete(reader.span(partition, start, end))
                if marks:
                    yield n, PARTITION_START
                place = place_of(topic, partition)
                while True:
                    batch = loop.run_until_complete(reader.fetch(partition, first, last))
                    if batch is None:
                        break
                    for offset, value in batch:
                        n += 1
                        yield n, Placed(value, place, offset) if placed else value
        finally:
            loop.run_until_complete(reader.stop())
    finally:
        loop.close()


class _TopicReader:
    """One group-less consumer reading one partition at a time between two offsets."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        wait_s: float,
        idle_s: float,
        security: ClientSecurity | None = None,
        switches_before: bool = False,
    ) -> None:
        from loopguard_fleet.streams.kafka.security import PLAINTEXT

        self.switches_before = switches_before  # read the switch records before a start
        self.security = security or PLAINTEXT  # TLS/SASL (streams/kafka/security.py)
        self.bootstrap = bootstrap
        self.topic = topic
        self.wait_s = wait_s
        self.idle_s = idle_s
        self.partitions = 0
        self._consumer: Any = None  # aiokafka ships no type hints
        self._next = 0
        self._quiet_since = 0.0
        self._reported_end = 0
        self._from_ms: int | None = None  # skip records older than this (a --from time)
        self._from_offset = 0  # skip records before this offset (a --from offset)
        self._to_ms: int | None = None  # stop at the first record this old (a --to time)
        self._done = False

    async def start(self) -> None:
        """Connect and learn the partition count (the topic must exist)."""
        from aiokafka import AIOKafkaConsumer

        from loopguard_fleet.streams.kafka.admin import topic_partitions

        self.partitions = (
            await topic_partitions(
                self.bootstrap,
                [self.topic],
                AUDIT_TOPIC_WAIT_S,
                security=self.security,
                request_timeout=self.wait_s,
            )
        )[self.topic]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=4 * 1024 * 1024,
            request_timeout_ms=int(self.wait_s * 1000) + 1000,
            **self.security.aiokafka_kwargs(),
        )
        await consumer.start()
        self._consumer = consumer

    async def stop(self) -> None:
        """Close the consumer."""
        if self._consumer is not None:
            await self._consumer.stop()

    async def span(
        self, partition: int, start: Bound | None, end: Bound | None
    ) -> tuple[int, int | None]:
        """(first offset, exclusive last offset or None for "until quiet") of a partition.

        Time bounds follow Kafka's offsets-for-times (the first record at or after the time),
        checked on each record's own timestamp: Tansu answers offsets-for-times with offset 0,
        which is only a lower bound, so the broker's answer is a starting point, not the rule.
        """
        from aiokafka import TopicPartition

        c = self._consumer
        tp = TopicPartition(self.topic, partition)
        c.assign([tp])
        begin = (await c.beginning_offsets([tp]))[tp]
        self._reported_end = (await c.end_offsets([tp]))[tp]
        first = begin
        self._from_ms = self._to_ms = None
        self._from_offset = 0
        if start is not None and start.offset is not None:
            first = max(begin, start.offset)
        elif start is not None:
            self._from_ms = start.time_ms
            hint = (await c.offsets_for_times({tp: start.time_ms})).get(tp)
            first = self._reported_end if hint is None else max(begin, int(hint.offset))
        if self.switches_before and first > begin:
            # The switch records before the start decide its first events: read them too.
            self._from_offset, first = first, begin
        last = None
        if end is not None and end.offset is not None:
            last = end.offset
        elif end is not None:
            self._to_ms = end.time_ms
        c.seek(tp, first)
        self._next = first
        self._done = False
        self._quiet_since = asyncio.get_running_loop().time()
        return first, last

    async def fetch(
        self, partition: int, first: int, last: int | None
    ) -> list[tuple[int, bytes]] | None:
        """The next batch of (offset, value) of the partition, or None once it is done: the
        records from the start, and before it the switch records when `switches_before`."""
        from aiokafka import TopicPartition

        tp = TopicPartition(self.topic, partition)
        loop = asyncio.get_running_loop()
        if self._done or (last is not None and self._next >= last):
            return None
        got = await self._consumer.getmany(tp, timeout_ms=100, max_records=2000)
        records = got.get(tp, [])
        out: list[tuple[int, bytes]] = []
        for r in records:
            if last is not None and r.offset >= last:
                self._next = last
                break
            if self._to_ms is not None and r.timestamp >= self._to_ms:
                self._done = True
                break
            self._next = r.offset + 1
            value = r.value or b""
            if r.offset < self._from_offset:
                if is_switch_record(value):
                    out.append((r.offset, value))
                continue
            if self._from_ms is not None:
                if r.timestamp < self._from_ms:
                    if self.switches_before and is_switch_record(value):
                        out.append((r.offset, value))
                    continue
                self._from_ms = None  # from here on, every record counts (as in Kafka)
            out.append((r.offset, value))
        if records:
            self._quiet_since = loop.time()
        elif self._next >= self._reported_end and loop.time() - self._quiet_since >= self.idle_s:
            return None  # at (or asked past) the end and quiet: the partition is done
        return out


class TopicInput:
    """Topics' messages between two bounds, as `(index, value)` items.

    One topic streams in partition order (see topic_items). Several (the worker's two input
    topics) are read whole and merged the way the worker's decisions are defined: each run's
    events in seq order (docs/wire-format.md, "Ordering"); messages that name no run id and
    integer seq (which the replay rejects, and policy switches) come first, in the order
    read. Each is a `Placed` item: the replay decides an event with the switch in force at
    its own topic-partition's offset. The index is the message's place in that merged order.
    """

    unit = "message"
    total_bytes: int | None = None

    def __init__(
        self,
        bootstrap: str,
        topics: str | Sequence[str],
        start: Bound | None = None,
        end: Bound | None = None,
        security: ClientSecurity | None = None,
        *,
        marks_partitions: bool = False,
    ) -> None:
        self.security = security
        self.marks_partitions = marks_partitions  # one topic: PARTITION_START items
        self.bootstrap = bootstrap
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        self.start = start
        self.end = end

    def done_bytes(self) -> int:
        """Unknown for a topic: the progress bar counts events instead."""
        return 0

    def __iter__(self) -> Iterator[InputItem]:
        if len(self.topics) == 1:
            marks = self.marks_partitions
            return topic_items(
                self.bootstrap, self.topics[0], self.start, self.end, security=self.security,
                marks=marks,
            )  # fmt: skip
        streams = [
            topic_items(
                self.bootstrap, t, self.start, self.end, security=self.security, placed=True
            )
            for t in self.topics
        ]
        return enumerate(merge_by_seq(streams), start=1)


def merge_by_seq(streams: Sequence[Iterable[InputItem]]) -> list[bytes]:
    """Values of several inputs merged into each run's seq order (stable otherwise)."""
    keyed: list[tuple[tuple[int, str, int], int, bytes]] = []
    for value in (value for stream in streams for _, value in stream):
        keyed.append((_seq_key(value), len(keyed), value))
    keyed.sort(key=lambda k: (k[0], k[1]))
    return [value for _, _, value in keyed]


def _seq_key(value: bytes) -> tuple[int, str, int]:
    """(1, run_id, seq) of a well-formed event, (0, "", 0) for what the replay rejects."""
    try:
        event = loads(value)  # the replay's own parser: JavaScript's JSON.parse
    except NotJSON:
        return (0, "", 0)
    if not isinstance(event, dict):
        return (0, "", 0)
    run_id, seq = event.get("run_id"), event.get("seq")
    if not isinstance(run_id, str) or not isinstance(seq, int) or isinstance(seq, bool):
        return (0, "", 0)
    return (1, run_id, seq)
