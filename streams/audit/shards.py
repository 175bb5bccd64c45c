"""The shard processes of `replay --jobs N` (streams/audit/replay_jobs.py starts and merges
them): a shard fed rounds of lines, a shard that reads the file itself, and the thread that
sends a shard's answers. One round is `ROUND_LINES` input lines in every shard, so the parent
merges round by round in input order.
"""

from __future__ import annotations

import pickle
import queue
import re
import signal
import threading
import zlib
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from loopguard.config import Policy
from loopguard.detectors import Decision
from loopguard.streams.audit.inputs import FileInput, InputError
from loopguard.streams.audit.replay import Rejected, Replayer, event_time_ms
from loopguard.streams.wire.codec import InputRejected, decode_object

__all__ = [
    "ROUND_LINES",
    "SEND_AHEAD",
    "ReplaySpec",
    "Sender",
    "child_start",
    "guess_shard",
    "guess_time",
    "make_replayer",
    "misguessed",
    "reader_main",
    "render_table",
    "rendered",
    "route",
    "shard_main",
    "shard_of",
]

ROUND_LINES = 4096  # lines per round: the unit the feeder sends and the merger orders
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


def make_replayer(spec: ReplaySpec) -> Replayer:
    """The offline replayer a shard (or `--jobs 1`) replays with."""
    return Replayer(spec.policy, idle_ttl_ms=spec.idle_ttl_ms, max_line_bytes=spec.max_line_bytes)


def rendered(table: bool, decisions: list[Decision], published: list[bytes]) -> bytes:
    """One line's output: the bytes the driver published, or table rows of its decisions."""
    if table:
        return "".join([render_table(d) + "\n" for d in decisions]).encode()
    return b"\n".join(published) + b"\n"


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


def route(obj: dict[str, Any], jobs: int) -> int:
    """The shard of a decoded line: by the crc32 of its run id (shard 0 without one)."""
    run_id = obj.get("run_id")
    if type(run_id) is not str:
        return 0
    return zlib.crc32(run_id.encode("utf-8", "surrogatepass")) % jobs


_RUN_ID = b'"run_id"'


def guess_shard(raw: bytes, jobs: int) -> int:
    """The shard a line's bytes name, without decoding it: the crc32 of the string after its
    first `"run_id":` (`route`'s shard when that is the object's own run id, as it is in
    every line that the runtime clients write), or -1 when there is none.

    A guess: the line's first `"run_id"` may be a nested key, a repeated key, or not the
    only spelling of the key (`"run\\u005fid"`). So the shard that the guess names checks
    it against the decoded line (`misguessed`), which it decodes anyway to replay it."""
    i = raw.find(_RUN_ID)
    if i < 0:
        return -1
    i += 8
    if raw.startswith(b':"', i):
        i += 2
    elif raw.startswith(b': "', i):
        i += 3
    else:
        return -1
    return zlib.crc32(raw[i : raw.find(b'"', i)]) % jobs


_TS = b'"ts"'
_INT = re.compile(rb"-?[0-9]+(?![0-9.eE])")  # an integer, not the head of a float


def guess_time(raw: bytes) -> tuple[bool, int | None]:
    """(True, the event time in epoch ms that the first `"ts":` of a line's bytes names, or
    None without one), or (False, None) when the bytes do not make it plain (null, a float, a
    string with an escape): then decode the line. A guess, like `guess_shard`: the `"ts"`
    may be nested or repeated, or the line may not decode; its own shard checks it."""
    i = raw.find(_TS)
    if i < 0:
        return True, None
    i += 4
    if raw.startswith(b": ", i):
        i += 2
    elif raw.startswith(b":", i):
        i += 1
    else:
        return False, None
    if raw.startswith(b'"', i):
        end = raw.find(b'"', i + 1)
        text = raw[i + 1 : end]
        if end < 0 or b"\\" in text:
            return False, None
        try:
            return True, event_time_ms(text.decode("utf-8"))
        except UnicodeDecodeError:
            return False, None
    number = _INT.match(raw, i)
    if number is None:
        return False, None
    return True, int(number.group())


def misguessed(obj: dict[str, Any] | None, raw: bytes, jobs: int, guess: int, ttl: bool) -> bool:
    """True when the other shards did not treat a line as one process would: its run is
    another shard's (they skipped it), or, with an idle TTL, the event time they took from
    its bytes (`guess_time`) is not the one the decoded line moves stream time to (None for
    a line that does not decode). `obj`: the line decoded, None if it does not decode. A
    line without a string run id is refused by any shard alike: where it went is no matter."""
    if obj is not None:
        run_id = obj.get("run_id")
        if (
            type(run_id) is str
            and zlib.crc32(run_id.encode("utf-8", "surrogatepass")) % jobs != guess
        ):
            return True
    if not ttl:
        return False
    known, ms = guess_time(raw)
    return known and ms != (None if obj is None else event_time_ms(obj.get("ts")))


def shard_of(raw: bytes, jobs: int, max_bytes: int) -> tuple[int, int | None]:
    """(shard, the line's ts) of a line: by its run id; undecodable lines go to shard 0."""
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
    """A shard's first step: ignore Ctrl-C (the parent stops us) and close the parent's pipe
    ends a fork copied here, so that the parent closing them is seen (EOF, a broken pipe)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
            for pos, raw, now in batch:
                if now is not None:
                    replayer.stream_ms = now
                _answer(out, pos, feed(pos, raw), table, published)
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
    exact: bool = False,
) -> None:
    """A shard process that reads the file itself and replays its own lines. One answer per
    round of `ROUND_LINES` lines (the same rounds in every shard), with the file's bytes
    read so far.

    A line goes to the shard its bytes name (`guess_shard`): that shard decodes it, checks
    the guess and replays it from the decoded object; the others only take its event time
    from its bytes (`guess_time`; they decode it when the bytes do not make that plain). A
    wrong guess of either (`misguessed`) ends the round with `("misguessed", line)` instead
    of an answer, and the parent replays the file again in `exact` mode, where every shard
    decodes every line to route it and read its time (the rounds before were right: a line
    changes nothing before itself). Lines without a guess are decoded by every shard."""
    child_start(parent_ends)
    replayer = make_replayer(spec)
    feed, published, table = replayer.feed_line, replayer.outputs.decisions, spec.table
    advance = replayer.advance_time if replayer.idle_ttl_ms is not None else None
    ttl = advance is not None
    max_bytes = spec.max_line_bytes
    source = FileInput(path)
    sender = Sender(outbox)
    out: list[tuple[int, bytes, Rejected | None]] = []
    count = 0
    obj: dict[str, Any] | None
    try:
        for pos, raw in source:
            to = -1 if exact else guess_shard(raw, jobs)
            if to == shard:
                try:
                    obj = decode_object(raw, max_bytes)
                except InputRejected:
                    obj = None  # refused by this shard's driver, as by one process
                if misguessed(obj, raw, jobs, to, ttl):
                    sender.put(("misguessed", pos))
                    break
                _answer(out, pos, feed(pos, raw, obj), table, published)
            elif to >= 0:
                if advance is not None:  # another shard's line: only its time counts here
                    known, ms = guess_time(raw)
                    if not known:
                        try:
                            ms = event_time_ms(decode_object(raw, max_bytes).get("ts"))
                        except InputRejected:
                            ms = None
                    if ms is not None:
                        advance(ms)
            else:
                try:
                    obj = decoded = decode_object(raw, max_bytes)
                except InputRejected:
                    obj, to = None, 0  # decoded again by the driver of shard 0, to refuse it
                else:
                    to = route(decoded, jobs)
                if to == shard:
                    _answer(out, pos, feed(pos, raw, obj), table, published)
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
