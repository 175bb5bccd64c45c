"""Engine value types: thresholds, calls, outcomes, records, verdicts (frozen, slotted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Final, Literal, TypeAlias

from loopguard.detectors.hashkeys import HashKey, hash_key, hash_text
from loopguard.detectors.profiles import CONFIGURABLE, Semantics
from loopguard.detectors.sharing import share

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None


class _Undefined:
    """JavaScript's `undefined`: a field the hashing reads that is absent."""

    __slots__ = ()
    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDEFINED"

    def __reduce__(self) -> str:
        return "UNDEFINED"


UNDEFINED: Final = _Undefined()

Level = Literal["warning", "critical"]


def _hashing() -> ModuleType:
    """detectors.hashing, imported on first use (it imports this module)."""
    global _HASHING
    if _HASHING is None:
        import loopguard.detectors.hashing as module

        _HASHING = module
    return _HASHING


_HASHING: ModuleType | None = None


#: Provider channel tools whose results hash as outbound sends (docs/semantics.md §3, rule 7),
#: as OpenClaw does when that channel's plugin is loaded; `LOOPGUARD_CHANNEL_TOOLS` overrides.
DEFAULT_CHANNEL_TOOLS: Final = frozenset({"telegram"})


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Resolved loop-detection policy of one agent (docs/semantics.md §2), keys in snake_case."""

    enabled: bool = False
    history_size: int = 30
    warning_threshold: int = 10
    critical_threshold: int = 20
    unknown_tool_threshold: int = 10
    global_circuit_breaker_threshold: int = 30
    generic_repeat: bool = True
    known_poll_no_progress: bool = True
    ping_pong: bool = True
    post_compaction_guard: bool = True  # on unless the policy's `enabled` is exactly false
    post_compaction_window_size: int = 3
    channel_tools: frozenset[str] = DEFAULT_CHANNEL_TOOLS
    semantics: Semantics = CONFIGURABLE  # which OpenClaw release's rules decide


# ToolCall, Outcome and Record are made for every call on the hot path; frozen dataclasses
# pay ~0.5 µs per instance for their guarded __init__, a fifth of the engine's budget. They are
# immutable by contract (the engine never assigns to them) and hashable like frozen ones.
@dataclass(slots=True, unsafe_hash=True)
class ToolCall:
    """One tool invocation (docs/semantics.md §1): `ToolCall("read", {"path": "/a"}, "c1")`.

    The tool name is normalised and `args_hash` computed on construction; in privacy mode
    give `args_hash` (and `action`, the args' action) instead of `args`. Raw args are kept only
    while the call is decided and never stored.
    """

    tool: str
    args: JSON | _Undefined = field(default=UNDEFINED, compare=False)
    tool_call_id: str | None = None
    args_hash: str = ""
    action: str | None = None  # args.action when it is a string (known polls, sends)
    # What records keep and the rules compare: args_hash itself (Record's docstring says why)
    args_key: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        hashing = _HASHING or _hashing()
        if self.args_hash:
            self.tool = hashing.normalize_tool(self.tool)
            self.args_hash = share(self.args_hash)  # repeated calls share one string
        else:
            self.tool, self.args_hash = hashing.call_signature(self.tool, self.args)
        self.args_key = self.args_hash
        args = self.args
        if self.action is None and type(args) is dict:
            action = args.get("action")
            self.action = action if isinstance(action, str) else None
        if not self.tool_call_id:
            self.tool_call_id = None

    @classmethod
    def of(cls, tool: str, args: JSON, tool_call_id: str | None = None) -> ToolCall:
        """Build a call from a raw tool name and raw arguments."""
        return cls(tool, args, tool_call_id)


@dataclass(slots=True, unsafe_hash=True)
class Outcome:
    """What a call returned or raised; `kind` is result, error, pending or hashed."""

    kind: Literal["result", "error", "pending", "hashed"]
    value: JSON | _Undefined = UNDEFINED
    hash: str | None = None  # privacy mode: result_hash computed at the edge
    unknown_tool_name: str | None = None  # privacy mode

    @classmethod
    def result(cls, value: JSON | _Undefined = UNDEFINED) -> Outcome:
        """A returned value; an absent value means no result yet."""
        if value is UNDEFINED:
            return cls("pending")
        return cls("result", value)

    @classmethod
    def error(cls, value: JSON | BaseException) -> Outcome:
        """A raised error: an exception, a message string, or any JSON value."""
        if isinstance(value, BaseException):
            value = str(value) or type(value).__name__
        return cls("error", value)

    @classmethod
    def pending(cls) -> Outcome:
        """No result yet: the call stays pending."""
        return cls("pending")

    @classmethod
    def hashed(cls, result_hash: str | None, unknown_tool_name: str | None = None) -> Outcome:
        """An outcome already hashed at the edge (privacy mode)."""
        return cls("hashed", hash=result_hash, unknown_tool_name=unknown_tool_name)


_Rare = tuple[str | None, str | None, str | None, str | None, bool]
_COMMON: Final[_Rare] = (None, None, None, None, False)
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
    compact (docs/performance.md "Memory"): six slots, not ten (80 B instead of 112), as the
    five fields a completed record of the configurable profile rarely has (`tool_call_id`,
    `unknown_tool_name`, `outcome_kind`, `failure_identity`, `no_progress`) share one slot,
    None while they hold their defaults; and the outcome's hash is held as a hash key
    (`result_key`: 32 raw digest bytes instead of 64 hex digits, detectors/hashkeys.py),
    which the rules compare; `result_hash` gives its text. The args hash stays text
    (`args_key` is `args_hash`): the rules compare it against every record of the window for
    every call, and CPython 3.11 specialises `==` on two `str`, not on `bytes` (its key cost
    E ~5 %). The constructor takes a text or a key for either. An `event_id` of the form
    `<prefix><seq>` (the runtime clients' `<run_id>:<seq>`) made by `Record.completed` keeps
    only its prefix, one object shared by the run's records, as the stored state writes it.
    Immutable by contract, like ToolCall; equal and hashable by value (tool_call_id excluded)
    as the dataclass it replaces was.
    """

    __slots__ = ("_eid", "_rare", "args_key", "result_key", "seq", "tool")

    tool: str
    args_key: str
    result_key: HashKey | None
    seq: int
    _eid: str | tuple[str] | None  # the event id, or (its prefix,) when it ends in str(seq)
    _rare: _Rare | None

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
        self.args_key = args_hash if type(args_hash) is str else hash_text(args_hash)
        self.result_key = hash_key(result_hash) if type(result_hash) is str else result_hash
        self.seq = seq
        self._eid = event_id
        if (
            tool_call_id is None
            and unknown_tool_name is None
            and outcome_kind is None
            and failure_identity is None
            and not no_progress
        ):
            self._rare = None
        else:
            self._rare = (
                tool_call_id,
                unknown_tool_name,
                outcome_kind,
                failure_identity,
                no_progress,
            )

    @classmethod
    def pending(cls, tool: str, args_key: str, tool_call_id: str | None, seq: int) -> Record:
        """A pending record: a call without its outcome yet."""
        rec = _new_record(cls)  # the slots set directly: this runs for every call
        rec.tool = tool
        rec.args_key = args_key
        rec.result_key = None
        rec.seq = seq
        rec._rare = None if tool_call_id is None else (tool_call_id, *_COMMON[1:])
        rec._eid = None
        return rec

    @classmethod
    def completed(
        cls,
        tool: str,
        args_key: str,
        result_key: HashKey,
        unknown_tool_name: str | None,
        seq: int,
        event_id: str | None,
        history: list[Record],
    ) -> Record:
        """A completed record of the configurable profile, its event id's `<prefix>` shared
        with the newest records of `history` (its run) that have the same one."""
        # The slots set directly: this runs for every outcome, and the keys are made already.
        done = _new_record(cls)
        done.tool = tool
        done.args_key = args_key
        done.result_key = result_key
        done.seq = seq
        done._rare = None if unknown_tool_name is None else (None, unknown_tool_name, *_COMMON[2:])
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
    def args_hash(self) -> str:
        """The call signature `<tool>:<digest>` (the same string as `args_key`)."""
        return self.args_key

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
            self.args_key,
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

    def __repr__(self) -> str:
        return (
            f"Record(tool={self.tool!r}, args_hash={self.args_hash!r}, "
            f"tool_call_id={self.tool_call_id!r}, result_hash={self.result_hash!r}, "
            f"unknown_tool_name={self.unknown_tool_name!r}, seq={self.seq!r}, "
            f"event_id={self.event_id!r}, outcome_kind={self.outcome_kind!r}, "
            f"failure_identity={self.failure_identity!r}, no_progress={self.no_progress!r})"
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the rolling detectors say about a call before it runs."""

    level: Level
    detector: str
    count: int
    message: str
    warning_key: str
    paired_tool: str | None = None
    liveness_signal: str | None = None  # openclaw-2026.9: "argument_churn" on some warnings


@dataclass(frozen=True, slots=True)
class GuardAbort:
    """The post-compaction guard's decision to abort a run."""

    detector: str
    count: int
    tool: str
    message: str
