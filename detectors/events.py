"""Wire input events (docs/wire-format.md) parsed into engine values, with label-safe reasons.

`parse_event` is the one validator of input events: the worker, `loopguard replay` and the
JSON Schema (streams/wire/schema.py) all follow it. Unknown extra fields are ignored, so emitters
may add fields (session_key, ts, …) without breaking older workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from loopguard_fleet.detectors.errors import InvalidEvent
from loopguard_fleet.detectors.values import JSON, Outcome, ToolCall

EventType = Literal["tool_call", "tool_result", "compaction", "run_end"]
EVENT_TYPES: tuple[EventType, ...] = ("tool_call", "tool_result", "compaction", "run_end")
TOOL_EVENTS = frozenset({"tool_call", "tool_result"})


# Made for every input line: a frozen dataclass's guarded __init__ (object.__setattr__ per
# field) cost 1.3 of the 1.7 µs it took to build one (docs/performance.md). Immutable by
# contract, as ToolCall and Outcome are (detectors/values.py), and its __init__ written out as
# theirs is (the compiled engine compiles no generated method).
@dataclass(slots=True, unsafe_hash=True, init=False)
class Event:
    """One validated input event."""

    type: EventType
    run_id: str
    event_id: str
    seq: int
    agent_id: str | None = None
    call: ToolCall | None = None  # tool_call / tool_result
    outcome: Outcome | None = None  # tool_result
    want_verdict: bool = False

    def __init__(
        self,
        type: EventType,
        run_id: str,
        event_id: str,
        seq: int,
        agent_id: str | None = None,
        call: ToolCall | None = None,
        outcome: Outcome | None = None,
        want_verdict: bool = False,
    ) -> None:
        self.type = type
        self.run_id = run_id
        self.event_id = event_id
        self.seq = seq
        self.agent_id = agent_id
        self.call = call
        self.outcome = outcome
        self.want_verdict = want_verdict


# Built once: `isinstance(x, str | int | float)` builds its union at every call.
_TS_TYPES: Final = (str, int, float)


def _opt_str(obj: dict[str, object], key: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEvent("invalid_field", f"{key} must be a string, got {type(value).__name__}")
    return value


def parse_event(obj: object) -> Event:
    """Validate one decoded wire event; raises InvalidEvent with a short reason code."""
    # Every check written out (no helper call per field): this runs once per input line. The
    # dict's own `get`, not a bound one kept in a local: compiled, that is a direct lookup.
    if type(obj) is not dict:
        if not isinstance(obj, Mapping):
            raise InvalidEvent(
                "not_an_object", f"event must be a JSON object, got {type(obj).__name__}"
            )
        obj = dict(obj)  # read as a dict: the compiled engine reads a dict by its own lookups
    fields: dict[str, object] = obj
    etype = fields.get("type")
    if etype not in EVENT_TYPES:
        raise InvalidEvent(
            "unknown_type", f"type must be one of {', '.join(EVENT_TYPES)}, got {etype!r}"[:200]
        )
    run_id = fields.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise InvalidEvent("missing_run_id", "run_id must be a non-empty string")
    event_id = fields.get("event_id")
    if not isinstance(event_id, str) or not event_id:
        raise InvalidEvent("missing_event_id", "event_id must be a non-empty string")
    seq = fields.get("seq")
    if type(seq) is not int:
        raise InvalidEvent("invalid_seq", "seq must be an integer")
    agent_id = fields.get("agent_id")
    if agent_id is not None and not isinstance(agent_id, str):
        raise InvalidEvent(
            "invalid_field", f"agent_id must be a string, got {type(agent_id).__name__}"
        )
    ts = fields.get("ts")
    if ts is not None and (isinstance(ts, bool) or not isinstance(ts, _TS_TYPES)):
        raise InvalidEvent("invalid_field", "ts must be an RFC 3339 string or epoch milliseconds")
    if etype == "tool_call":
        call = _parse_call(fields)
        want = fields.get("want_verdict", False)
        if not isinstance(want, bool):
            raise InvalidEvent("invalid_field", "want_verdict must be a boolean")
        return Event(etype, run_id, event_id, seq, agent_id, call, None, want)
    if etype == "tool_result":
        call = _parse_call(fields)
        return Event(etype, run_id, event_id, seq, agent_id, call, _parse_outcome(fields))
    return Event(etype, run_id, event_id, seq, agent_id)


def _parse_call(obj: dict[str, object]) -> ToolCall:
    tool = obj.get("tool")
    if not isinstance(tool, str):
        raise InvalidEvent("invalid_tool", "tool must be a string")
    tcid = obj.get("tool_call_id")
    if tcid is not None and not isinstance(tcid, str):
        raise InvalidEvent(
            "invalid_field", f"tool_call_id must be a string, got {type(tcid).__name__}"
        )
    if "args" in obj:
        args: JSON = obj["args"]  # type: ignore[assignment]  # decoded JSON
        return ToolCall(tool, args, tcid)
    ahash = obj.get("args_hash")
    if not isinstance(ahash, str) or not ahash:
        raise InvalidEvent("missing_args", "tool events carry args (or args_hash in privacy mode)")
    action = _opt_str(obj, "poll_action")
    return ToolCall(tool, tool_call_id=tcid, args_hash=ahash, action=action)


def _parse_outcome(obj: dict[str, object]) -> Outcome:
    if "result_hash" in obj:
        rhash = _opt_str(obj, "result_hash")
        return Outcome.hashed(rhash or None, _opt_str(obj, "unknown_tool_name"))
    if "error" in obj:
        return Outcome.error(obj["error"])  # type: ignore[arg-type]  # decoded JSON
    if "result" in obj:
        return Outcome.result(obj["result"])  # type: ignore[arg-type]  # decoded JSON
    return Outcome.pending()
