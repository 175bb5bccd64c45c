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
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from operator import itemgetter
from typing import Any

from loopguard_fleet.streams.audit.inputs import FileInput, InputError
from loopguard_fleet.streams.audit.replay import (
    LineOutput,
    Rejected,
    ReplayStats,
    line_outputs,
    render_table,
)
from loopguard_fleet.streams.audit.shards import (
    EVERY,
    ROUND_LINES,
    ReplaySpec,
    make_replayer,
    reader_main,
    shard_main,
    shard_of,
)

__all__ = [
    "ROUND_LINES",
    "LineOutput",
    "ReplaySpec",
    "render_table",
    "replay_local",
    "replay_sharded",
]

STOP_GRACE_S = 2.0  # a stopped replay's shards leave in milliseconds; this bounds a stuck one


def replay_local(
    spec: ReplaySpec, items: Iterable[tuple[int, bytes]]
) -> tuple[Iterator[LineOutput], ReplayStats]:
    """Replay in this process; the stats fill in as the iterator is consumed."""
    replayer = make_replayer(spec)
    return line_outputs(replayer, spec.table, items), replayer.stats


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
        batches: list[list[tuple[int, bytes, int | None, bool]]] = [[] for _ in range(jobs)]
        count = 0
        try:
            try:
                for pos, raw in self.items:
                    shard, ts = shard_of(raw, jobs, self.spec.max_line_bytes)
                    if ttl and ts is not None and (now is None or ts > now):
                        now = ts
                    if shard == EVERY:  # every shard applies it; shard 0 answers for it
                        for n, batch in enumerate(batches):
                            batch.append((pos, raw, now, n == 0))
                    else:
                        batches[shard].append((pos, raw, now, True))
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

    def _send(self, batches: list[list[tuple[int, bytes, int | None, bool]]]) -> None:
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
        proc = ctx.Process(target=reader_main, args=args, daemon=True)
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
        proc = ctx.Process(target=shard_main, args=(spec, in_r, out_w, ends), daemon=True)
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
