"""Replay in one process or sharded by run id over N processes, with the same bytes out.

Both paths yield `LineOutput`s in input order: the rendered decisions of one input line, or
its rejection. With `jobs > 1` a run's events all go to one shard (the crc32 of its run id),
in rounds of `ROUND_LINES` lines, and the caller's thread merges each round's results back
in line order. A file is read by every shard itself (no line crosses a pipe: the parent only
merges outputs), and each line is decoded once: to route it, and by its own shard to replay
it from that object. Stdin and topics are read once, by a feeder thread that routes each
line and sends each shard its lines. Stream time (for the idle TTL) is computed over all
lines, by each reader or by the feeder, exactly as one process computes it, so `--jobs 4`
output is byte-identical to `--jobs 1` (tests/property/test_replay_jobs.py,
tests/unit/test_replay_shards.py).
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import signal
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from operator import itemgetter
from typing import Any

from loopguard.config import Policy
from loopguard.detectors import Decision
from loopguard.streams.audit.inputs import FileInput, InputError
from loopguard.streams.audit.replay import (
    LineOutput,
    Rejected,
    Replayer,
    ReplayStats,
    event_time_ms,
)
from loopguard.streams.wire.codec import InputRejected, decode_object

__all__ = ["LineOutput", "ReplaySpec", "render_table", "replay_local", "replay_sharded"]

ROUND_LINES = 4096  # lines per round: the unit the feeder sends and the merger orders
STOP_GRACE_S = 2.0  # a stopped replay's shards leave in milliseconds; this bounds a stuck one
SEND_AHEAD = 32  # rounds a shard may be ahead of the merge (~0.5 MB of output each on P)


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Everything a shard needs to replay: picklable, so it crosses to a child process."""

    policy: Policy
    table: bool = False  # render table rows instead of control-message JSON
    idle_ttl_ms: int | None = None
    max_line_bytes: int = 1_048_576


def render_table(d: Decision) -> str:
    """One decision as a fixed-width table row."""
    p = d.to_wire()
    if d.kind == "loop_event":
        pub = "" if p["published"] else " (unpublished)"
        return (
            f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} {p['action']!s:<6} {p['detector']!s:<26} "
            f"{p['count']!s:>4}  {p['tool']}{pub}"
        )
    if d.kind == "command":
        return f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} → {p['command']} ({p['detector']})"
    return f"{p['seq']!s:>6}  {p['run_id']!s:<20.20} verdict {p['decision']} {p['tool_call_id']}"


def _replayer(spec: ReplaySpec) -> Replayer:
    return Replayer(spec.policy, idle_ttl_ms=spec.idle_ttl_ms, max_line_bytes=spec.max_line_bytes)


def _rendered(table: bool, decisions: list[Decision], published: list[bytes]) -> bytes:
    """One line's output: the bytes the driver published, or table rows of its decisions."""
    if table:
        return "".join([render_table(d) + "\n" for d in decisions]).encode()
    return b"\n".join(published) + b"\n"


def _outputs(
    replayer: Replayer, table: bool, items: Iterable[tuple[int, bytes]]
) -> Iterator[LineOutput]:
    """Replay (pos, raw) items; only lines with output are yielded.

    JSON output is the bytes the driver published (the worker's control messages); a table
    is rendered from the decisions."""
    feed, published = replayer.feed_line, replayer.outputs.decisions
    for pos, raw in items:
        got = feed(pos, raw)
        if type(got) is list:
            if got:
                yield LineOutput(pos, _rendered(table, got, published))
        else:
            assert isinstance(got, Rejected)
            yield LineOutput(pos, b"", got)


def replay_local(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]]
) -> tuple[Iterator[LineOutput], ReplayStats]:
    """Replay in this process; the stats fill in as the iterator is consumed."""
    replayer = _replayer(spec)
    return _outputs(replayer, spec.table, items), replayer.stats


def _route(obj: dict[str, Any], jobs: int) -> int:
    """The shard of a decoded line: by the crc32 of its run id (shard 0 without one)."""
    run_id = obj.get("run_id")
    if type(run_id) is not str:
        return 0
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass")) % jobs


def _shard_of(raw: bytes, jobs: int, max_bytes: int) -> tuple[int, int | None]:
    """(shard, the line's ts) of a line: by its run id; undecodable lines go to shard 0."""
    try:
        obj = decode_object(raw, max_bytes)
    except InputRejected:
        return 0, None
    return _route(obj, jobs), event_time_ms(obj.get("ts"))


class _Sender(threading.Thread):
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


def _child_start(parent_ends: tuple[Connection, ...]) -> None:
    """A shard's first step: ignore Ctrl-C (the parent stops us) and close the parent's pipe
    ends a fork copied here, so that the parent closing them is seen (EOF, a broken pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for conn in parent_ends:
        conn.close()


def _shard_main(
    spec: ReplaySpec, inbox: Connection, outbox: Connection, parent_ends: tuple[Connection, ...]
) -> None:
    """A shard process: replay each round it is sent, answer with that round's outputs."""
    _child_start(parent_ends)
    replayer = _replayer(spec)
    feed, published, table = replayer.feed_line, replayer.outputs.decisions, spec.table
    sender = _Sender(outbox)
    try:
        while (batch := inbox.recv()) is not None and not sender.is_broken:
            out: list[tuple[int, bytes, Rejected | None]] = []
            for pos, raw, now in batch:
                if now is not None:
                    replayer.stream_ms = now
                got = feed(pos, raw)
                if type(got) is list:
                    if got:
                        out.append((pos, _rendered(table, got, published), None))
                else:
                    assert isinstance(got, Rejected)
                    out.append((pos, b"", got))
            sender.put(("out", None, out))
        sender.put(("stats", replayer.stats))
    except EOFError:
        pass  # the parent went away (stopped early, --strict): nothing left to answer
    sender.close()


def _reader_main(
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
    _child_start(parent_ends)
    replayer = _replayer(spec)
    feed, published, table = replayer.feed_line, replayer.outputs.decisions, spec.table
    advance = replayer.advance_time if replayer.idle_ttl_ms is not None else None
    max_bytes = spec.max_line_bytes
    source = FileInput(path)
    sender = _Sender(outbox)
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
                to = _route(decoded, jobs)
            if to == shard:
                got = feed(pos, raw, obj)
                if type(got) is list:
                    if got:
                        out.append((pos, _rendered(table, got, published), None))
                else:
                    assert isinstance(got, Rejected)
                    out.append((pos, b"", got))
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


class _Feeder(threading.Thread):
    """Reads the input, routes each line to its shard, sends one batch per shard per round."""

    def __init__(
        self, items: Iterable[tuple[int, bytes]], inboxes: list[Connection], spec: ReplaySpec
    ) -> None:
        super().__init__(name="replay-feeder", daemon=True)
        self.items = items
        self.inboxes = inboxes
        self.spec = spec
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        jobs = len(self.inboxes)
        ttl = self.spec.idle_ttl_ms is not None
        now: int | None = None
        batches: list[list[tuple[int, bytes, int | None]]] = [[] for _ in range(jobs)]
        count = 0
        try:
            try:
                for pos, raw in self.items:
                    shard, ts = _shard_of(raw, jobs, self.spec.max_line_bytes)
                    if ttl and ts is not None and (now is None or ts > now):
                        now = ts
                    batches[shard].append((pos, raw, now))
                    count += 1
                    if count >= ROUND_LINES:
                        self._send(batches)
                        batches = [[] for _ in range(jobs)]
                        count = 0
                        if self.stop.is_set():
                            return
            except Exception as exc:  # noqa: BLE001 - handed to the merging thread, re-raised there
                self.error = exc
            if count:
                self._send(batches)
            for inbox in self.inboxes:
                inbox.send(None)
        except (BrokenPipeError, OSError):
            return  # a shard was stopped: the merging thread is already leaving

    def _send(self, batches: list[list[tuple[int, bytes, int | None]]]) -> None:
        for inbox, batch in zip(self.inboxes, batches, strict=True):
            inbox.send(batch)


def replay_sharded(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]], jobs: int
) -> tuple[Iterator[LineOutput], ReplayStats]:
    """Replay over `jobs` processes; outputs in input order, stats complete at the end."""
    stats = ReplayStats()
    if isinstance(items, FileInput) and items.path != "-":
        return _merged_readers(spec, items, jobs, stats), stats
    return _merged(spec, items, jobs, stats), stats


def _merge(
    outboxes: list[Connection], stats: ReplayStats, on_round: Callable[[int], None]
) -> Iterator[LineOutput]:
    """Each round's outputs of every shard, merged in input order, until all sent their stats;
    `on_round` gets the bytes of the file that shard 0 had read at the end of the round."""
    jobs = len(outboxes)
    done = [False] * jobs
    read = 0
    while not all(done):
        round_out: list[tuple[int, bytes, Rejected | None]] = []
        for i, outbox in enumerate(outboxes):
            if done[i]:
                continue
            msg = outbox.recv()
            if msg[0] == "out":
                round_out.extend(msg[2])
                if i == 0 and msg[1] is not None:
                    read = msg[1]
            elif msg[0] == "stats":
                stats.add(msg[1])
                done[i] = True
            else:
                raise InputError(msg[1])
        round_out.sort(key=itemgetter(0))  # each shard's part is sorted: a cheap merge
        for pos, data, rejected in round_out:
            yield LineOutput(pos, data, rejected)
        on_round(read)


def _stop(procs: list[Any], conns: Iterable[Connection]) -> None:
    """Close our pipe ends (each shard then sees EOF or a broken pipe and leaves within a
    round); a shard still running after `STOP_GRACE_S` is terminated."""
    for conn in conns:
        conn.close()
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.terminate()  # our own child, by its PID
            proc.join()


def _context() -> Any:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def _merged_readers(
    spec: ReplaySpec, source: FileInput, jobs: int, stats: ReplayStats
) -> Iterator[LineOutput]:
    """Shards that read the file themselves; this process only merges (the progress bar
    follows the bytes shard 0 has read)."""
    ctx = _context()
    procs: list[Any] = []
    outboxes: list[Connection] = []
    for shard in range(jobs):
        out_r, out_w = ctx.Pipe(duplex=False)
        args = (spec, source.path, shard, jobs, out_w, (*outboxes, out_r))
        proc = ctx.Process(target=_reader_main, args=args, daemon=True)
        proc.start()
        out_w.close()
        procs.append(proc)
        outboxes.append(out_r)
    try:
        yield from _merge(outboxes, stats, source.follow)
    finally:
        _stop(procs, outboxes)


def _merged(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]], jobs: int, stats: ReplayStats
) -> Iterator[LineOutput]:
    """Shards fed by a feeder thread that reads the input once (stdin, topics, lists)."""
    ctx = _context()
    procs: list[Any] = []
    inboxes: list[Connection] = []
    outboxes: list[Connection] = []
    for _ in range(jobs):
        in_r, in_w = ctx.Pipe(duplex=False)
        out_r, out_w = ctx.Pipe(duplex=False)
        ends = (*inboxes, *outboxes, in_w, out_r)
        proc = ctx.Process(target=_shard_main, args=(spec, in_r, out_w, ends), daemon=True)
        proc.start()
        in_r.close()
        out_w.close()
        procs.append(proc)
        inboxes.append(in_w)
        outboxes.append(out_r)
    feeder = _Feeder(items, inboxes, spec)
    feeder.start()
    try:
        yield from _merge(outboxes, stats, lambda _read: None)
        feeder.join()
        if feeder.error is not None:
            raise feeder.error
    finally:
        feeder.stop.set()
        _stop(procs, (*inboxes, *outboxes))
