"""The history record (`Record`): one call and its outcome, in a compact in-memory layout."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Final

from loopguard_fleet.detectors.build_info import COMPILED
from loopguard_fleet.detectors.hashkeys import HashKey, hash_key, hash_text

__all__ = ["Cells", "Rare", "Record", "record_cells"]

Rare = tuple[str | None, str | None, str | None, str | None, bool]
_COMMON: Final[Rare] = (None, None, None, None, False)
# CPython makes a record fastest by `object.__new__` and setting its slots; the compiled engine
# (setup.py) refuses that for its classes and makes one fastest by its constructor.
_new_record = object.__new__


class Record:
    """One history entry (docs/semantics.md §1).

    `tool_call_id` only matters while the record is pending (it pairs the outcome with its
    call), so it takes no part in equality and is not persisted once the outcome is in.
    `event_id` is the id of the tool_result that completed the record: a compaction delivered
    after it may abort on it, and the abort is attributed to that result (docs/wire-format.md).
    The openclaw-2026.9 profile's outcome facts (detectors/outcome_facts.py) keep their
    defaults in the configurable profile; a veto record also keeps its tool_call_id, to know
    the block's echo.

    A worker holds up to `historySize` records for each of thousands of runs, so a record is
    compact (docs/performance.md): six slots, not ten (80 B instead of 112), as the
    five fields a completed record of the configurable profile rarely has (`tool_call_id`,
    `unknown_tool_name`, `outcome_kind`, `failure_identity`, `no_progress`) share one slot,
    None while they hold their defaults; and the outcome's hash is held as a hash key
    (`result_key`: 32 raw digest bytes instead of 64 hex digits, detectors/hashkeys.py),
    which the rules compare; `result_hash` gives its text. The args hash stays text: the
    rules compare it with every record of the window at every call, and CPython 3.11
    specialises `==` on two `str`, not on `bytes` (as a key it cost E ~5 %). The constructor
    takes a text or a key for either hash. An `event_id` of the form
    `<prefix><seq>` (the runtime clients' `<run_id>:<seq>`) made by `Record.completed` keeps
    only its prefix, one object shared by the run's records, as the stored state writes it.
    Immutable by contract, like ToolCall; equal and hashable by value (tool_call_id excluded)
    as the dataclass it replaces was.
    """

    __slots__ = ("_eid", "_rare", "args_hash", "result_key", "seq", "tool")

    tool: str
    args_hash: str
    result_key: HashKey | None
    seq: int
    _eid: str | tuple[str] | None  # the event id, or (its prefix,) when it ends in str(seq)
    _rare: Rare | None

    def __init__(
        self,
        tool: str,
        args_hash: HashKey,
        tool_call_id: str | None = None,
        result_hash: HashKey | None = None,
        unknown_tool_name: str | None = None,
        seq: int = 0,
        event_id: str | None = None,
        outcome_kind: str | None = None,  # "tool-loop-veto" | "terminal-exec-failure"
        failure_identity: str | None = None,
        no_progress: bool = False,
    ) -> None:
        self.tool = tool
        self.args_hash = args_hash if type(args_hash) is str else hash_text(args_hash)
        self.result_key = hash_key(result_hash) if type(result_hash) is str else result_hash
        self.seq = seq
        self._eid = event_id
        rare = (tool_call_id, unknown_tool_name, outcome_kind, failure_identity, no_progress)
        self._rare = None if rare == _COMMON else rare

    @classmethod
    def pending(cls, tool: str, args_hash: str, tool_call_id: str | None, seq: int) -> Record:
        """A pending record: a call without its outcome yet."""
        if COMPILED:
            return Record(tool, args_hash, tool_call_id, None, None, seq)
        rec = _new_record(cls)  # the slots set directly: this runs for every call
        rec.tool = tool
        rec.args_hash = args_hash
        rec.result_key = None
        rec.seq = seq
        rec._rare = None if tool_call_id is None else (tool_call_id, *_COMMON[1:])
        rec._eid = None
        return rec

    @classmethod
    def completed(
        cls,
        tool: str,
        args_hash: str,
        result_key: HashKey,
        unknown_tool_name: str | None,
        seq: int,
        event_id: str | None,
        history: list[Record],
    ) -> Record:
        """A completed record of the configurable profile, its event id's `<prefix>` shared
        with the newest records of `history` (its run) that have the same one."""
        # The slots set directly: this runs for every outcome, and the keys are made already.
        if COMPILED:
            done = Record(tool, args_hash, None, result_key, unknown_tool_name, seq, event_id)
        else:
            done = _new_record(cls)
            done.tool = tool
            done.args_hash = args_hash
            done.result_key = result_key
            done.seq = seq
            done._rare = (
                None if unknown_tool_name is None else (None, unknown_tool_name, *_COMMON[2:])
            )
            done._eid = event_id
        if event_id is None:
            return done
        tail = str(seq)
        if not event_id.endswith(tail) or len(event_id) == len(tail):
            return done
        prefix = event_id[: -len(tail)]
        for i in range(len(history) - 1, max(len(history) - 4, -1), -1):
            near = history[i]._eid
            if type(near) is tuple and near[0] == prefix:
                done._eid = near
                return done
        done._eid = (prefix,)
        return done

    @classmethod
    def from_cells(
        cls,
        tool: str,
        args_hash: str,
        result_key: HashKey | None,
        seq: int,
        eid: str | tuple[str] | None,
        rare: Rare | None,
    ) -> Record:
        """The record whose `record_cells` these are (detectors/packed.py keeps records so)."""
        rec = Record(tool, args_hash, None, result_key, None, seq) if COMPILED else _new_record(cls)
        rec.tool = tool
        rec.args_hash = args_hash
        rec.result_key = result_key
        rec.seq = seq
        rec._eid = eid
        rec._rare = rare
        return rec

    @property
    def event_id(self) -> str | None:
        """The id of the tool_result that completed the record, or None."""
        eid = self._eid
        if type(eid) is tuple:
            return eid[0] + str(self.seq)
        assert eid is None or isinstance(eid, str)
        return eid

    @property
    def event_prefix(self) -> str | None:
        """The event id without its trailing `seq`, when it has that form and `completed`
        made the record; else None."""
        eid = self._eid
        return eid[0] if type(eid) is tuple else None

    @property
    def result_hash(self) -> str | None:
        """The outcome's hash as text; None while the record is pending."""
        key = self.result_key
        return None if key is None else hash_text(key)

    @property
    def tool_call_id(self) -> str | None:
        """The call's id while the record is pending (and on a 2026.9 veto)."""
        rare = self._rare
        return None if rare is None else rare[0]

    @property
    def unknown_tool_name(self) -> str | None:
        """The missing tool the outcome's error names (docs/semantics.md §3), or None."""
        rare = self._rare
        return None if rare is None else rare[1]

    @property
    def outcome_kind(self) -> str | None:
        """openclaw-2026.9: "tool-loop-veto" or "terminal-exec-failure", else None."""
        rare = self._rare
        return None if rare is None else rare[2]

    @property
    def failure_identity(self) -> str | None:
        """openclaw-2026.9: what identifies a terminal exec failure, else None."""
        rare = self._rare
        return None if rare is None else rare[3]

    @property
    def no_progress(self) -> bool:
        """openclaw-2026.9: the outcome showed no progress."""
        rare = self._rare
        return False if rare is None else rare[4]

    @property
    def has_rare(self) -> bool:
        """True when one of the five rarely set fields differs from its default."""
        return self._rare is not None

    def _key(self) -> tuple[object, ...]:
        rare = self._rare or _COMMON
        return (
            self.tool,
            self.args_hash,
            self.result_key,
            rare[1],
            self.seq,
            self.event_id,
        ) + rare[2:]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Callable[..., Record], Cells]:
        # By its cells, as packed.py keeps it: a compiled record has no `__new__` without them.
        return Record.from_cells, record_cells(self)

    def __repr__(self) -> str:
        return (
            f"Record(tool={self.tool!r}, args_hash={self.args_hash!r}, "
            f"tool_call_id={self.tool_call_id!r}, result_hash={self.result_hash!r}, "
            f"unknown_tool_name={self.unknown_tool_name!r}, seq={self.seq!r}, "
            f"event_id={self.event_id!r}, outcome_kind={self.outcome_kind!r}, "
            f"failure_identity={self.failure_identity!r}, no_progress={self.no_progress!r})"
        )


# A record's slots as they are, for detectors/packed.py: (tool, args_hash, result_key, seq, the
# event id or `(prefix,)`, the five rare fields or None); `Record.from_cells` takes them back.
Cells = tuple[str, str, HashKey | None, int, str | tuple[str] | None, Rare | None]
record_cells: Callable[[Record], Cells] = attrgetter(
    "tool", "args_hash", "result_key", "seq", "_eid", "_rare"
)
