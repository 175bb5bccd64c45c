"""The shard processes of `replay --jobs N` (streams/audit/replay_jobs.py starts and merges
them): a shard fed rounds of lines, a shard that reads the file itself, and the thread that
sends a shard's answers. One round is `ROUND_LINES` input lines in every shard, so the parent
merges round by round in input order.

A policy switch record (and a topic's partition start) applies to every run that follows it,
so every shard applies it; only shard 0 answers for it (its rejection, if any) and counts it.
"""

from __future__ import annotations

import pickle
import queue
import signal
import threading
import zlib
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from loopguard_fleet.config import Policy
from loopguard_fleet.detectors import Decision
from loopguard_fleet.streams.audit.inputs import FileInput, InputError, PartitionStart
from loopguard_fleet.streams.audit.replay import (
    LineResult,
    Rejected,
    Replayer,
    event_time_ms,
    rendered,
)
from loopguard_fleet.streams.collector import set_batch_thresholds
from loopguard_fleet.streams.processing.policy_switch import EVERY_POLICY_TOPIC, SWITCH_TYPE
from loopguard_fleet.streams.wire.codec import InputRejected, decode_object

__all__ = [
    "EVERY",
    "ROUND_LINES",
    "SEND_AHEAD",
    "ReplaySpec",
    "Sender",
    "child_start",
    "make_replayer",
    "reader_main",
    "route",
    "shard_main",
    "shard_of",
]

ROUND_LINES = 4096  # lines per round: the unit the feeder sends and the merger orders
SEND_AHEAD = 32  # rounds a shard may be ahead of the merge (~0.5 MB of output each on P)
EVERY = -1  # the "shard" of a line every shard applies (a policy switch, a partition start)


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Everything a shard needs to replay: picklable, so it crosses to a child process."""

    policy: Policy
    table: bool = False  # render table rows instead of control-message JSON
    idle_ttl_ms: int | None = None
    max_line_bytes: int = 1_048_576
    follows: str | None = EVERY_POLICY_TOPIC  # the policy topic whose switch records apply


def make_replayer(spec: ReplaySpec) -> Replayer:
    """The offline replayer a shard (or `--jobs 1`) replays with."""
    return Replayer(
        spec.policy,
        idle_ttl_ms=spec.idle_ttl_ms,
        max_line_bytes=spec.max_line_bytes,
        follows=spec.follows,
    )


def _answer(
    out: list[tuple[int, bytes, Rejected | None]],
    pos: int,
    got: list[Decision] | Rejected,
    table: bool,
    published: list[bytes],
) -> None:
    """Add one fed line's answer: its output if it decided something, or its rejection."""
    if type(got) is list:
        if got:
            out.append((pos, rendered(table, got, published), None))
    else:
        assert isinstance(got, Rejected)
        out.append((pos, b"", got))


def _uncount(replayer: Replayer, got: LineResult) -> None:
    """A line every shard applied: its rejection is shard 0's to count (and answer)."""
    if isinstance(got, Rejected):
        stats = replayer.stats
        stats.rejected -= 1
        stats.rejected_reasons[got.reason] -= 1
        if not stats.rejected_reasons[got.reason]:
            del stats.rejected_reasons[got.reason]


def route(obj: dict[str, Any], jobs: int) -> int:
    """The shard of a decoded line: by the crc32 of its run id (shard 0 without one); EVERY
    for a policy switch."""
    run_id = obj.get("run_id")
    if type(run_id) is not str:
        return EVERY if obj.get("type") == SWITCH_TYPE else 0
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass")) % jobs


def shard_of(raw: bytes, jobs: int, max_bytes: int) -> tuple[int, int | None]:
    """(shard, the line's ts) of a line: by its run id; undecodable lines go to shard 0."""
    if isinstance(raw, PartitionStart):
        return EVERY, None
    try:
        obj = decode_object(raw, max_bytes)
    except InputRejected:
        return 0, None
    return route(obj, jobs), event_time_ms(obj.get("ts"))


class Sender(threading.Thread):
    """Sends a shard's answers from a thread of its own, up to `SEND_AHEAD` rounds behind.

    Without it a shard stops at each round until the parent has read the round (an answer
    is larger than a pipe's buffer), so the shards ran in lockstep with each other and with
    the parent's merge, and a shard that the host's scheduler held back held back all.
    `send_bytes` drops the GIL while it writes, so the shard goes on replaying meanwhile."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(name="replay-sender", daemon=True)
        self.conn = conn
        self.queue: queue.Queue[bytes | None] = queue.Queue(SEND_AHEAD)
        self.is_broken = False
        self.start()

    def put(self, msg: object) -> None:
        """Queue one answer (pickled here, written by the thread)."""
        self.queue.put(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))

    def run(self) -> None:
        """Write each queued answer to the parent, until `close`."""
        while (data := self.queue.get()) is not None:
            if self.is_broken:
                continue  # the parent went away: drain, so that `put` never blocks
            try:
                self.conn.send_bytes(data)
            except OSError:  # BrokenPipeError: the parent stopped early (--strict, Ctrl-C)
                self.is_broken = True

    def close(self) -> None:
        """Send what is queued, then stop."""
        self.queue.put(None)
        self.join()


def child_start(parent_ends: tuple[Connection, ...]) -> None:
    """A shard's first step: ignore Ctrl-C (the parent stops us), take the offline collector
    settings (a spawned shard does not inherit them) and close the parent's pipe ends a fork
    copied here, so that the parent closing them is seen (EOF, a broken pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_batch_thresholds()
    for conn in parent_ends:
        conn.close()


def shard_main(
    spec: ReplaySpec, inbox: Connection, outbox: Connection, parent_ends: tuple[Connection, ...]
) -> None:
    """A shard process: replay each round it is sent, answer with that round's outputs."""
    child_start(parent_ends)
    replayer = make_replayer(spec)
    feed, published, table = replayer.feed_line, replayer.outputs.decisions, spec.table
    sender = Sender(outbox)
    try:
        while (batch := inbox.recv()) is not None and not sender.is_broken:
            out: list[tuple[int, bytes, Rejected | None]] = []
            for pos, raw, now, answers in batch:
                if now is not None:
                    replayer.stream_ms = now
                got = feed(pos, raw)
                if answers:
                    _answer(out, pos, got, table, published)
                else:
                    _uncount(replayer, got)
            sender.put(("out", None, out))
        sender.put(("stats", replayer.stats))
    except EOFError:
        pass  # the parent went away (stopped early, --strict): nothing left to answer
    sender.close()


def reader_main(
    spec: ReplaySpec,
    path: str,
    shard: int,
    jobs: int,
    outbox: Connection,
    parent_ends: tuple[Connection, ...],
) -> None:
    """A shard process that reads the file itself: every line decoded once, to route it and
    to move stream time; its own lines replayed from that decoded object (`Replayer.feed_line`
    with `obj`), the others' only read for their `ts`. One answer per round of `ROUND_LINES`
    lines (the same rounds in every shard), with the file's bytes read so far."""
    child_start(parent_ends)
    replayer = make_replayer(spec)
    feed, published, table = replayer.feed_line, replayer.outputs.decisions, spec.table
    advance = replayer.advance_time if replayer.idle_ttl_ms is not None else None
    max_bytes = spec.max_line_bytes
    source = FileInput(path)
    sender = Sender(outbox)
    out: list[tuple[int, bytes, Rejected | None]] = []
    count = 0
    try:
        for pos, raw in source:
            obj: dict[str, Any] | None
            try:
                obj = decoded = decode_object(raw, max_bytes)
            except InputRejected:
                obj, to = None, 0  # decoded again by the driver of shard 0, to refuse it
            else:
                to = route(decoded, jobs)
            if to == shard:
                _answer(out, pos, feed(pos, raw, obj), table, published)
            elif to == EVERY:
                got = feed(pos, raw, obj)
                if shard == 0:
                    _answer(out, pos, got, table, published)
                else:
                    _uncount(replayer, got)
            elif advance is not None and obj is not None:
                ts = obj.get("ts")
                if ts is not None:  # another shard's line: only its time counts here
                    advance(ts)
            count += 1
            if count >= ROUND_LINES:
                sender.put(("out", source.done_bytes(), out))
                out, count = [], 0
                if sender.is_broken:
                    break
        else:
            if count:
                sender.put(("out", source.done_bytes(), out))
            sender.put(("stats", replayer.stats))
    except InputError as exc:
        sender.put(("error", str(exc)))
    sender.close()
