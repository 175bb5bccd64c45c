"""Per-run state (`RunState`) and its exact, compact JSON form.

The serialised form interns every tool name and hash in one table and writes 64-hex-digit
digests as base64 of their raw bytes, so a 30-record looping run stays near 1 KB. The
round-trip is exact: `RunState.from_json(s.to_json()) == s`, dict order included. Format 2
added the records' result event ids and the held life events; format 3 dropped the stream
layer's event time (`stamp`), which now travels beside the state in the worker's table value
(docs/wire-format.md, "Table values"); formats 1 and 2 still load, and `legacy_stamp_ms`
reads their stamp for that envelope's migration. A row's eighth cell holds the openclaw-2026.9
outcome facts, only when a record has some, and `r` the run's critical verdicts (the
openclaw-2026.9 recovery allowance), only when there were some, so states of the configurable
profile are written exactly as before.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from loopguard_fleet.detectors.errors import InvalidState
from loopguard_fleet.detectors.hashkeys import HashKey, hash_key, hash_text
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads
from loopguard_fleet.detectors.sharing import share
from loopguard_fleet.detectors.values import Record

if TYPE_CHECKING:
    from loopguard_fleet.detectors.tally import Tally

FORMAT_VERSION = 3
_READABLE_VERSIONS = frozenset({1, 2, 3})
# The last 64 characters, exactly (an earlier `^(.*?)([0-9a-f]{64})$` also matched before a
# trailing newline and dropped it: a string ending in a digest and "\n" did not round-trip).
_HEX64 = re.compile(r"[0-9a-f]{64}")
_URLSAFE = bytes.maketrans(b"+/", b"-_")  # base64's URL-safe alphabet (RFC 4648 §5)

GuardObservation = tuple[str, str, str]  # (tool, args_hash, result_hash)
# The policy an armed post-compaction guard keeps until it ends: (windowSize, enforce,
# policy version) of the compaction that armed it (detectors/compaction_guard.py).
GuardPolicy = tuple[int, bool, str | None]
LifeKind = Literal["compaction", "run_end"]
# (seq, type, guard policy) of a life event waiting for its place; the policy is a held
# compaction's (None: a run_end, or a compaction held by a state stored before they kept it).
HeldEvent = tuple[int, LifeKind, GuardPolicy | None]
_LIFE_KINDS: tuple[LifeKind, ...] = ("compaction", "run_end")
# RunState.save's tuple: the fields in declaration order
SavedState = tuple[
    list[Record],
    dict[str, int],
    str | None,
    int,
    int | None,
    list[GuardObservation],
    GuardPolicy | None,
    int | None,
    int | None,
    int | None,
    int | None,
    list[HeldEvent],
    int,
]


class _Derived:
    """What the engine derives from a run's state and keeps beside it: a slot of a base class,
    so it is no field (never stored, saved, compared or shown) and a state's value is its
    fields alone."""

    __slots__ = ("tally",)
    tally: Tally | None  # the history's window counts (detectors/tally.py), or None

    # Set here: mypy's dataclass plugin sees only the subclass's slots.
    def keep_tally(self, tally: Tally | None) -> None:
        """Keep `tally` as the state's window counts (detectors/tally.py)."""
        self.tally = tally


@dataclass(slots=True)
class RunState(_Derived):
    """Everything LoopGuard remembers about one run: history, buckets, guard, watermarks."""

    history: list[Record] = field(default_factory=list)
    buckets: dict[str, int] = field(default_factory=dict)  # short warning-key id → bucket
    agent_id: str | None = None
    guard_remaining: int = 0
    guard_seq: int | None = None  # seq of the compaction that armed the guard
    guard_obs: list[GuardObservation] = field(default_factory=list)
    guard_policy: GuardPolicy | None = None  # the armed guard's policy, None when unarmed
    tool_seq: int | None = None  # highest seq seen on tool_call/tool_result events
    life_seq: int | None = None  # highest seq seen on compaction/run_end events (held too)
    ended_seq: int | None = None  # set by run_end: the state is then a tombstone
    life_done: int | None = None  # seq of the last life event applied
    held: list[HeldEvent] = field(default_factory=list)  # life events ahead of the tool events
    # openclaw-2026.9: critical verdicts so far, for the runner's recovery allowance
    # (detectors/runner_2026_9.py); the configurable profile leaves it 0.
    critical_loops: int = 0

    def __post_init__(self) -> None:
        self.keep_tally(None)

    def save(self) -> SavedState:
        """The state's values, out of reach of the engine's in-place update (`restore` puts
        them back): containers copied, their immutable records and observations shared.

        The stream worker saves each run before each event, so that an engine bug costs that
        event only: a tuple of the fields, ~0.5 µs, half of building a `RunState`."""
        return (
            self.history.copy(),
            self.buckets.copy(),
            self.agent_id,
            self.guard_remaining,
            self.guard_seq,
            self.guard_obs.copy(),
            self.guard_policy,
            self.tool_seq,
            self.life_seq,
            self.ended_seq,
            self.life_done,
            self.held.copy(),
            self.critical_loops,
        )

    def restore(self, saved: SavedState) -> None:
        """Put back the values `save` took (in place)."""
        (
            self.history,
            self.buckets,
            self.agent_id,
            self.guard_remaining,
            self.guard_seq,
            self.guard_obs,
            self.guard_policy,
            self.tool_seq,
            self.life_seq,
            self.ended_seq,
            self.life_done,
            self.held,
            self.critical_loops,
        ) = saved
        self.keep_tally(None)  # it counted the history replaced

    @property
    def is_ended(self) -> bool:
        """True once the run's `run_end` was processed (the state is a tombstone)."""
        return self.ended_seq is not None

    def to_json(self) -> str:
        """Serialise to compact JSON (hashes interned and base64-packed)."""
        return dumps(self.to_doc()).decode()

    def to_doc(self) -> dict[str, Any]:
        """The JSON document `to_json` writes, for embedding in a larger one."""
        # The checkpoint writes every changed run with the worker's batches waiting, so this
        # loop is written for speed: `table.setdefault(s, len(table))` interns a string in one
        # call, and the rare cells (event id, pending call id, unknown tool, 2026.9 facts) are
        # looked at only when present. The table's order is the order of first use, as before.
        # Its entries are hash keys (detectors/hashkeys.py): one per distinct text, as records
        # hold them; any other text goes in through `hash_key` too (a tool name, an event id
        # prefix or an identity could end in 64 hex digits and equal a hash's text).
        table: dict[HashKey, int] = {}
        ref = table.setdefault
        rows: list[list[Any]] = []
        prev_seq = 0
        for r in self.history:
            rhash, seq, tool = r.result_key, r.seq, r.tool
            row: list[Any] = [
                ref(tool if len(tool) < 64 else hash_key(tool), len(table)),
                ref(_canonical(r.args_hash), len(table)),
                -1 if rhash is None else ref(rhash, len(table)),
                seq - prev_seq,  # delta-coded: seqs grow without bound, gaps stay small
            ]
            prev_seq = seq
            rows.append(row)
            if not r.has_rare:  # the common case: no call id, unknown tool or 2026.9 facts
                eref = _event_ref(r, table)
                if eref is not None:
                    row.append(eref)
                continue
            tcid = r.tool_call_id if rhash is None else None
            unknown = r.unknown_tool_name
            if r.outcome_kind is None and r.failure_identity is None and not r.no_progress:
                if unknown is not None:
                    row += (_event_ref(r, table), tcid, unknown)
                elif tcid is not None:
                    row += (_event_ref(r, table), tcid)
                elif (eref := _event_ref(r, table)) is not None:
                    row.append(eref)
                continue
            facts = _facts_cell(r, table)  # interns the identity before the event id's prefix
            row += (_event_ref(r, table), tcid, unknown, facts)
        doc: dict[str, Any] = {"v": FORMAT_VERSION}
        if rows:
            doc["h"] = rows
        if self.buckets:
            doc["b"] = [[k, b] for k, b in self.buckets.items()]
        if self.agent_id is not None:
            doc["a"] = self.agent_id
        if self.guard_remaining or self.guard_seq is not None or self.guard_obs:
            doc["g"] = [
                self.guard_remaining,
                self.guard_seq,
                [
                    [
                        ref(hash_key(t), len(table)),
                        ref(hash_key(a), len(table)),
                        ref(hash_key(h), len(table)),
                    ]
                    for t, a, h in self.guard_obs
                ],
            ]
        if self.guard_policy is not None:  # a key of its own: readers before it ignore it
            doc["gp"] = list(self.guard_policy)
        marks = [self.tool_seq, self.life_seq, self.ended_seq, self.life_done]
        if any(m is not None for m in marks):
            doc["s"] = marks
        if self.held:
            doc["q"] = [
                [seq, _LIFE_KINDS.index(kind)] + ([] if policy is None else [list(policy)])
                for seq, kind, policy in self.held
            ]
        if self.critical_loops:
            doc["r"] = self.critical_loops
        if table:
            doc["t"] = [_pack(s) for s in table]
        return doc

    @classmethod
    def from_json(cls, raw: str | bytes) -> RunState:
        """Restore a state written by `to_json`; raises InvalidState on anything else."""
        try:
            doc = loads(raw)
        except NotJSON as e:
            raise InvalidState(f"corrupt RunState: {e}") from e
        return cls.from_doc(doc)

    @classmethod
    def from_doc(cls, doc: object) -> RunState:
        """Restore a state from the document `to_doc` wrote; raises InvalidState otherwise."""
        if not isinstance(doc, dict) or doc.get("v") not in _READABLE_VERSIONS:
            raise InvalidState("not a RunState of format 1, 2 or 3")
        extra = 1 if doc["v"] >= 2 else 0  # format 2 rows carry the event id at index 4
        try:
            keys = [share(_unpack(s)) for s in doc.get("t", [])]  # shared by runs
            history = []
            prefixes: dict[int, tuple[str]] = {}
            seq = 0
            for row in doc.get("h", []):
                t, a, r, delta = row[:4]
                seq += delta
                eid, cell = _event_cell(row[4] if extra and len(row) > 4 else None)
                tcid = row[4 + extra] if len(row) > 4 + extra else None
                unk = row[5 + extra] if len(row) > 5 + extra else None
                result = None if r < 0 else keys[r]
                kind, identity, no_progress = _facts(row[7] if len(row) > 7 else None, keys)
                rec = Record(
                    _text(keys[t]), _text(keys[a]), tcid, result, unk, seq, eid, kind, identity,
                    no_progress,
                )  # fmt: skip
                if cell is not None:  # `<prefix><seq>`: the prefix, shared by the run's records
                    shared = prefixes.get(cell)
                    if shared is None:
                        shared = prefixes[cell] = (_text(keys[cell]),)
                    rec._eid = shared  # what Record.completed makes (detectors/values.py)
                history.append(rec)
            remaining, gseq, obs = doc.get("g", [0, None, []])
            marks = doc.get("s", [None] * 4)
            if doc["v"] < 3:  # formats 1-2 kept the stamp fourth (legacy_stamp_ms)
                marks = marks[:3] + marks[4:5]
            tool_seq, life_seq, ended_seq = marks[:3]
            life_done = marks[3] if len(marks) > 3 else None
            return cls(
                history=history,
                buckets={k: b for k, b in doc.get("b", [])},
                agent_id=doc.get("a"),
                guard_remaining=remaining,
                guard_seq=gseq,
                guard_obs=[(_text(keys[t]), _text(keys[a]), _text(keys[h])) for t, a, h in obs],
                guard_policy=_guard_policy(doc.get("gp")),
                tool_seq=tool_seq,
                life_seq=life_seq,
                ended_seq=ended_seq,
                life_done=life_done,
                held=[
                    (row[0], _LIFE_KINDS[row[1]], _guard_policy(row[2] if len(row) > 2 else None))
                    for row in doc.get("q", [])
                ],
                critical_loops=_count(doc.get("r", 0)),
            )
        except (AttributeError, TypeError, ValueError, IndexError) as e:
            raise InvalidState(f"corrupt RunState: {e}") from e


def _guard_policy(cell: object) -> GuardPolicy | None:
    """An armed guard's policy cell (absent in states written before guards kept theirs)."""
    if cell is None:
        return None
    if not isinstance(cell, list) or len(cell) != 3:
        raise ValueError(f"guard policy {cell!r}")
    window, enforce, version = cell
    if type(enforce) is not bool or not (version is None or isinstance(version, str)):
        raise ValueError(f"guard policy {cell!r}")
    return _count(window), enforce, version


def _count(value: object) -> int:
    """A non-negative integer cell (a bool or a float is corrupt)."""
    if type(value) is not int or value < 0:
        raise ValueError(f"count {value!r}")
    return value


def legacy_stamp_ms(doc: object) -> int | None:
    """The stream layer's event time a format-1 or -2 state document kept inside it (its
    fourth mark); None for format 3, which no longer holds it."""
    if not isinstance(doc, dict) or doc.get("v") not in (1, 2):
        return None
    marks = doc.get("s")
    stamp = marks[3] if isinstance(marks, list) and len(marks) > 3 else None
    return stamp if type(stamp) is int else None


# The 2026.9 facts cell: [flags, failure identity ref or -1]; flags 1 no progress, 2 veto,
# 4 terminal exec failure.
_KIND_FLAGS = {"tool-loop-veto": 2, "terminal-exec-failure": 4}
_FLAG_KINDS = {flag: kind for kind, flag in _KIND_FLAGS.items()}


# An args hash as a table entry: its key, as the results go in (a small memo: a run's texts
# recur in its writes; each entry keeps a text and its key, ~0.2 KB).
_canonical = lru_cache(maxsize=1 << 10)(hash_key)


def _text(key: HashKey) -> str:
    """A table entry's text (a tool name, an event id prefix, an identity or a hash)."""
    return key if type(key) is str else hash_text(key)


def _facts_cell(r: Record, table: dict[HashKey, int]) -> list[int]:
    """A record's 2026.9 outcome facts as written (its failure identity interned in `table`)."""
    flags = (1 if r.no_progress else 0) | _KIND_FLAGS.get(r.outcome_kind or "", 0)
    identity = r.failure_identity
    return [flags, -1 if identity is None else table.setdefault(hash_key(identity), len(table))]


def _facts(cell: list[int] | None, table: list[HashKey]) -> tuple[str | None, str | None, bool]:
    if cell is None:
        return None, None, False
    flags, identity = cell
    text = None if identity < 0 else _text(table[identity])
    return _FLAG_KINDS.get(flags & 6), text, bool(flags & 1)


def _event_cell(cell: object) -> tuple[str | None, int | None]:
    """(the event id, or the table index of its prefix) of a row's event id cell."""
    if cell is None or isinstance(cell, str):
        return cell, None
    if type(cell) is int:
        return None, cell
    raise TypeError(f"event id cell {cell!r}")


def _event_ref(r: Record, table: dict[HashKey, int]) -> int | str | None:
    """A record's event id as written: the interned prefix when it is `<prefix><seq>` (the
    runtime client's `<run_id>:<seq>`), so a run's ids cost one table entry; else the id."""
    prefix = r.event_prefix
    if prefix is None:
        event_id = r.event_id
        if event_id is None:
            return None
        tail = str(r.seq)
        if not event_id.endswith(tail):
            return event_id
        prefix = event_id[: -len(tail)]
    return table.setdefault(prefix if len(prefix) < 64 else hash_key(prefix), len(table))


# Hashes recur across a run's records and across runs: memoising the pure (un)packing makes
# serialisation cost a dict lookup per string instead of a regex and a base64 round trip.
# Only the stream worker (de)serialises, at checkpoints and on cache misses; the engine never
# does. 4,096 entries keep tool names and the recurring hashes; 65,536 cost 1.1-1.9 KB of RSS
# per active run at 10,000 runs (each entry also keeps its hash string alive); a miss ~1.5 µs.
_MEMO_SIZE = 1 << 12


@lru_cache(maxsize=_MEMO_SIZE)
def _pack(s: HashKey) -> str:
    """'h' + prefix + base64(digest) for '<prefix><64 lowercase hex>' (or its hash key), else
    's' + s."""
    if type(s) is bytes:
        prefix = s[:-32].decode("utf-8", "surrogatepass")
        b64 = binascii.b2a_base64(s[-32:], newline=False)[:43].translate(_URLSAFE).decode()
        return "h" + prefix + b64
    assert isinstance(s, str)
    n = len(s)
    if n < 64 or _HEX64.fullmatch(s, n - 64) is None:
        return "s" + s
    raw = bytes.fromhex(s[-64:])
    return "h" + s[:-64] + binascii.b2a_base64(raw, newline=False)[:43].translate(_URLSAFE).decode()


@lru_cache(maxsize=_MEMO_SIZE)
def _unpack(s: str) -> HashKey:
    """A table entry's hash key (`_pack`'s inverse, up to `hash_text`)."""
    if s[:1] == "s":
        return hash_key(s[1:])
    if s[:1] == "h" and len(s) >= 44:
        digest = base64.urlsafe_b64decode(s[-43:] + "=")
        return s[1:-43].encode("utf-8", "surrogatepass") + digest
    raise InvalidState(f"bad interned entry {s[:16]!r}")
