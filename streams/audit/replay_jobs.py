"""Replay in one process or sharded by run id over N processes, with the same bytes out.

Both paths yield `LineOutput`s in input order: the rendered decisions of one input line, or
its rejection. With `jobs > 1` each line is decoded once more only to route it (crc32 of its
run id, so a run's events all go to one shard), in rounds of `ROUND_LINES` lines, and the
caller's thread merges each round's results back in line order. A file is read by every shard
itself (no line crosses a pipe: the parent only merges outputs); stdin and topics are read
once, by a feeder thread that sends each shard its lines. Stream time (for the idle TTL) is
computed over all lines, by each reader or by the feeder, exactly as one process computes it,
so `--jobs 4` output is byte-identical to `--jobs 1` (tests/property/test_replay_jobs.py,
tests/unit/test_replay_shards.py).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from loopguard.config import Policy
from loopguard.detectors import Decision
from loopguard.streams.audit.inputs import FileInput, InputError
from loopguard.streams.audit.replay import Rejected, Replayer, ReplayStats, event_time_ms
from loopguard.streams.wire.codec import InputRejected, decode_object

__all__ = ["LineOutput", "ReplaySpec", "render_table", "replay_local", "replay_sharded"]

ROUND_LINES = 4096  # lines per round: the unit the feeder sends and the merger orders


@dataclass(frozen=True, slots=True)
class ReplaySpec:
    """Everything a shard needs to replay: picklable, so it crosses to a child process."""

    policy: Policy
    table: bool = False  # render table rows instead of control-message JSON
    idle_ttl_ms: int | None = None
    max_line_bytes: int = 1_048_576


class LineOutput(NamedTuple):
    """What one input line produced: rendered decisions, or its rejection."""

    pos: int
    data: bytes
    rejected: Rejected | None = None


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


def _outputs(
    replayer: Replayer, table: bool, items: Iterable[tuple[int, bytes, int | None]]
) -> Iterator[LineOutput]:
    """Replay (pos, raw, stream time or None) items; only lines with output are yielded.

    JSON output is the bytes the driver published (the worker's control messages); a table
    is rendered from the decisions."""
    feed, published = replayer.feed_line, replayer.outputs.decisions
    for pos, raw, now in items:
        if now is not None:
            replayer.stream_ms = now
        got = feed(pos, raw)
        if isinstance(got, Rejected):
            yield LineOutput(pos, b"", got)
            continue
        if got:
            if table:
                data = "".join([render_table(d) + "\n" for d in got]).encode()
            else:
                data = b"\n".join(published) + b"\n"
            yield LineOutput(pos, data)


def replay_local(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]]
) -> tuple[Iterator[LineOutput], ReplayStats]:
    """Replay in this process; the stats fill in as the iterator is consumed."""
    replayer = _replayer(spec)
    return _outputs(replayer, spec.table, ((p, r, None) for p, r in items)), replayer.stats


def _shard_of(raw: bytes, jobs: int, max_bytes: int) -> tuple[int, int | None]:
    """(shard, the line's ts) of a line: by its run id; undecodable lines go to shard 0."""
    try:
        obj = decode_object(raw, max_bytes)
    except InputRejected:
        return 0, None
    run_id = obj.get("run_id")
    ts = event_time_ms(obj.get("ts"))
    if not isinstance(run_id, str):
        return 0, ts
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass")) % jobs, ts


def _shard_main(spec: ReplaySpec, inbox: Connection, outbox: Connection) -> None:
    """A shard process: replay each round it is sent, answer with that round's outputs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us on Ctrl-C
    replayer = _replayer(spec)
    try:
        while True:
            batch = inbox.recv()
            if batch is None:
                break
            outbox.send(
                [(o.pos, o.data, o.rejected) for o in _outputs(replayer, spec.table, batch)]
            )
        outbox.send(("stats", replayer.stats))
    except (EOFError, BrokenPipeError):
        return  # the parent went away (stopped early, --strict): nothing left to answer


def _reader_main(spec: ReplaySpec, path: str, shard: int, jobs: int, outbox: Connection) -> None:
    """A shard process that reads the file itself: every line routed, its own lines replayed;
    one answer per round of `ROUND_LINES` lines (the same rounds in every shard)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us on Ctrl-C
    replayer = _replayer(spec)
    ttl, max_bytes = spec.idle_ttl_ms is not None, spec.max_line_bytes
    mine: list[tuple[int, bytes, int | None]] = []
    now: int | None = None
    count = 0
    try:
        try:
            for pos, raw in FileInput(path):
                to, ts = _shard_of(raw, jobs, max_bytes)
                if ttl and ts is not None and (now is None or ts > now):
                    now = ts
                if to == shard:
                    mine.append((pos, raw, now))
                count += 1
                if count >= ROUND_LINES:
                    outbox.send([tuple(o) for o in _outputs(replayer, spec.table, mine)])
                    mine, count = [], 0
        except InputError as exc:
            outbox.send(("error", str(exc)))
            return
        if count:
            outbox.send([tuple(o) for o in _outputs(replayer, spec.table, mine)])
        outbox.send(("stats", replayer.stats))
    except (EOFError, BrokenPipeError):
        return  # the parent went away (stopped early, --strict): nothing left to answer


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
    outboxes: list[Connection], stats: ReplayStats, on_round: Callable[[], None]
) -> Iterator[LineOutput]:
    """Each round's outputs of every shard, merged in input order, until all sent their stats."""
    jobs = len(outboxes)
    done = [False] * jobs
    while not all(done):
        round_out: list[tuple[int, bytes, Rejected | None]] = []
        for i, outbox in enumerate(outboxes):
            if done[i]:
                continue
            msg = outbox.recv()
            if isinstance(msg, tuple) and msg[0] == "stats":
                stats.add(msg[1])
                done[i] = True
            elif isinstance(msg, tuple) and msg[0] == "error":
                raise InputError(msg[1])
            else:
                round_out.extend(msg)
        round_out.sort(key=lambda o: o[0])  # each shard's part is sorted: a cheap merge
        for pos, data, rejected in round_out:
            yield LineOutput(pos, data, rejected)
        on_round()


def _stop(procs: list[Any], conns: Iterable[Connection]) -> None:
    for conn in conns:
        conn.close()
    for proc in procs:
        proc.join(timeout=0.5)
        if proc.is_alive():
            proc.terminate()  # our own child, by its PID
            proc.join()


def _context() -> Any:
    return mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")


def _merged_readers(
    spec: ReplaySpec, source: FileInput, jobs: int, stats: ReplayStats
) -> Iterator[LineOutput]:
    """Shards that read the file themselves; this process follows along (progress only)."""
    ctx = _context()
    procs, outboxes = [], []
    for shard in range(jobs):
        out_r, out_w = ctx.Pipe(duplex=False)
        args = (spec, source.path, shard, jobs, out_w)
        proc = ctx.Process(target=_reader_main, args=args, daemon=True)
        proc.start()
        out_w.close()
        procs.append(proc)
        outboxes.append(out_r)
    # Reading the lines again here costs little and keeps `source.done_bytes` (the progress
    # bar) moving with the merged rounds.
    follow = iter(source) if source.total_bytes else iter(())

    def follow_round() -> None:
        deque(islice(follow, ROUND_LINES), maxlen=0)

    try:
        yield from _merge(outboxes, stats, follow_round)
    finally:
        close = getattr(follow, "close", None)
        if close is not None:
            close()
        _stop(procs, outboxes)


def _merged(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]], jobs: int, stats: ReplayStats
) -> Iterator[LineOutput]:
    """Shards fed by a feeder thread that reads the input once (stdin, topics, lists)."""
    ctx = _context()
    procs, inboxes, outboxes = [], [], []
    for _ in range(jobs):
        in_r, in_w = ctx.Pipe(duplex=False)
        out_r, out_w = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_shard_main, args=(spec, in_r, out_w), daemon=True)
        proc.start()
        in_r.close()
        out_w.close()
        procs.append(proc)
        inboxes.append(in_w)
        outboxes.append(out_r)
    feeder = _Feeder(items, inboxes, spec)
    feeder.start()
    try:
        yield from _merge(outboxes, stats, lambda: None)
        feeder.join()
        if feeder.error is not None:
            raise feeder.error
    finally:
        feeder.stop.set()
        _stop(procs, (*inboxes, *outboxes))
