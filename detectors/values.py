"""Engine value types: thresholds, calls, outcomes, records, verdicts (frozen, slotted)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# JSON and `undefined` live with canonical JSON, the channel tools with the hashing that reads
# them; re-exported from here, their old home. Imported, not looked up through a module at
# each call: compiled, a call's signature is then a direct call.
from loopguard_fleet.detectors.canonical import JSON as JSON
from loopguard_fleet.detectors.canonical import UNDEFINED as UNDEFINED
from loopguard_fleet.detectors.canonical import _Undefined as _Undefined
from loopguard_fleet.detectors.hashing import DEFAULT_CHANNEL_TOOLS as DEFAULT_CHANNEL_TOOLS
from loopguard_fleet.detectors.hashing import call_signature, normalize_tool
from loopguard_fleet.detectors.profiles import CONFIGURABLE, Semantics
from loopguard_fleet.detectors.records import Record as Record  # re-exported: its old home
from loopguard_fleet.detectors.sharing import share

Level = Literal["warning", "critical"]


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
    known_poll: bool = False  # the policy names the call's tool a known poll (per-tool tuning)
    enforce: bool = True  # False: shadow mode, decisions are observed, never sent as commands
    # The deciding policy's version, stamped on its decisions. It names the policy and does
    # not change a decision, so it takes no part in equality: two policies' thresholds that
    # decide alike stay equal (`loopguard compare` shares such runs).
    policy_version: str | None = field(default=None, compare=False)


# ToolCall, Outcome and Record are made for every call on the hot path; frozen dataclasses
# pay ~0.5 µs per instance for their guarded __init__, a fifth of the engine's budget. They are
# immutable by contract (the engine never assigns to them) and hashable like frozen ones.
@dataclass(slots=True, unsafe_hash=True, init=False)
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

    # Written out rather than generated with a __post_init__: one call a tool event instead
    # of two (docs/performance.md, "Where a worker's time goes").
    def __init__(
        self,
        tool: str,
        args: JSON | _Undefined = UNDEFINED,
        tool_call_id: str | None = None,
        args_hash: str = "",
        action: str | None = None,
    ) -> None:
        if args_hash:
            self.tool = normalize_tool(tool)
            self.args_hash = share(args_hash)  # repeated calls share one string
        else:
            self.tool, self.args_hash = call_signature(tool, args)
        self.args = args
        if action is None and type(args) is dict:
            value = args.get("action")
            action = value if isinstance(value, str) else None
        self.action = action
        self.tool_call_id = tool_call_id or None

    # The class named, not `cls`: the compiled engine (setup.py) calls its own constructor
    # directly only so (these classes are not subclassed).
    @classmethod
    def of(cls, tool: str, args: JSON, tool_call_id: str | None = None) -> ToolCall:
        """Build a call from a raw tool name and raw arguments."""
        return ToolCall(tool, args, tool_call_id)


# __init__ written out for the compiled engine (setup.py): mypyc compiles a class's own
# methods, not the ones the dataclass decorator generates at import, which ran interpreted
# for every outcome and verdict.
@dataclass(slots=True, unsafe_hash=True, init=False)
class Outcome:
    """What a call returned or raised; `kind` is result, error, pending or hashed."""

    kind: Literal["result", "error", "pending", "hashed"]
    value: JSON | _Undefined = UNDEFINED
    hash: str | None = None  # privacy mode: result_hash computed at the edge
    unknown_tool_name: str | None = None  # privacy mode

    def __init__(
        self,
        kind: Literal["result", "error", "pending", "hashed"],
        value: JSON | _Undefined = UNDEFINED,
        hash: str | None = None,
        unknown_tool_name: str | None = None,
    ) -> None:
        self.kind = kind
        self.value = value
        self.hash = hash
        self.unknown_tool_name = unknown_tool_name

    @classmethod
    def result(cls, value: JSON | _Undefined = UNDEFINED) -> Outcome:
        """A returned value; an absent value means no result yet."""
        if value is UNDEFINED:
            return Outcome("pending")
        return Outcome("result", value)

    @classmethod
    def error(cls, value: JSON | BaseException) -> Outcome:
        """A raised error: an exception, a message string, or any JSON value."""
        if isinstance(value, BaseException):
            value = str(value) or type(value).__name__
        return Outcome("error", value)

    @classmethod
    def pending(cls) -> Outcome:
        """No result yet: the call stays pending."""
        return Outcome("pending")

    @classmethod
    def hashed(cls, result_hash: str | None, unknown_tool_name: str | None = None) -> Outcome:
        """An outcome already hashed at the edge (privacy mode)."""
        return Outcome("hashed", UNDEFINED, result_hash, unknown_tool_name)


# Not frozen either, for the same reason: a looping run gets a verdict at every call, and the
# frozen __init__ cost ~0.7 µs of it. __init__ written out as Outcome's is.
@dataclass(slots=True, unsafe_hash=True, init=False)
class Verdict:
    """What the rolling detectors say about a call before it runs."""

    level: Level
    detector: str
    count: int
    message: str
    warning_key: str
    paired_tool: str | None = None
    liveness_signal: str | None = None  # openclaw-2026.9: "argument_churn" on some warnings

    def __init__(
        self,
        level: Level,
        detector: str,
        count: int,
        message: str,
        warning_key: str,
        paired_tool: str | None = None,
        liveness_signal: str | None = None,
    ) -> None:
        self.level = level
        self.detector = detector
        self.count = count
        self.message = message
        self.warning_key = warning_key
        self.paired_tool = paired_tool
        self.liveness_signal = liveness_signal


# As Verdict: an openclaw-2026.9 run past its recovery budget gets an abort at every call.
@dataclass(slots=True, unsafe_hash=True, init=False)
class GuardAbort:
    """The post-compaction guard's decision to abort a run."""

    detector: str
    count: int
    tool: str
    message: str

    def __init__(self, detector: str, count: int, tool: str, message: str) -> None:
        self.detector = detector
        self.count = count
        self.tool = tool
        self.message = message
