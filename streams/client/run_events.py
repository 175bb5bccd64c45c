"""One run's wire events, built without I/O: per-run `seq`, `event_id`, privacy hashing.

`seq` increases across all event types of the run; `event_id` is `<run_id>:<seq>`, so the same
run always yields the same ids. In privacy mode raw args/result/error never appear: the event
carries `args_hash`, `result_hash`, `unknown_tool_name` and `poll_action` computed here with the
engine's own hashing (docs/wire-format.md).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from enum import Enum, auto
from typing import Any, Final

from loopguard_fleet.detectors.hashing import (
    DEFAULT_CHANNEL_TOOLS,
    args_hash,
    normalize_tool,
    outcome_unknown_tool_name,
    result_hash,
)
from loopguard_fleet.detectors.values import JSON, Outcome

__all__ = ["MISSING", "Missing", "RunEvents", "WireEvent", "utc_now"]

WireEvent = dict[str, Any]


class Missing(Enum):
    """The type of `MISSING`."""

    MISSING = auto()  # tells "no error" from `error=None`, which is an error (docs/semantics.md §3)


MISSING: Final = Missing.MISSING


def utc_now() -> str:
    """Current time as an RFC 3339 UTC string with milliseconds (the events' `ts`)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class RunEvents:
    """Builds one run's wire events: seq increases across all types, event_id = run_id:seq."""

    def __init__(
        self,
        run_id: str,
        *,
        agent_id: str | None = None,
        session_key: str | None = None,
        privacy: bool = False,
        start_seq: int = 0,
        clock: Callable[[], str | int] | None = None,
        channel_tools: frozenset[str] = DEFAULT_CHANNEL_TOOLS,
    ) -> None:
        if not run_id:
            raise ValueError("run_id must be a non-empty string")
        self.run_id = run_id
        self.agent_id = agent_id
        self.session_key = session_key
        self.privacy = privacy
        self.seq = start_seq  # a resumed run must continue past its last seq (dedupe by seq)
        self._clock = clock
        self.channel_tools = channel_tools  # privacy mode: must match the worker's setting

    def _base(self, etype: str) -> WireEvent:
        self.seq += 1
        ev: WireEvent = {"type": etype, "event_id": f"{self.run_id}:{self.seq}"}
        ev["run_id"], ev["seq"] = self.run_id, self.seq
        if self.agent_id is not None:
            ev["agent_id"] = self.agent_id
        if self.session_key is not None:
            ev["session_key"] = self.session_key
        if self._clock is not None:
            ev["ts"] = self._clock()
        return ev

    def _call_fields(self, tool: str, args: JSON) -> WireEvent:
        if not self.privacy:
            return {"tool": tool, "args": args}
        name = normalize_tool(tool)
        action = args.get("action") if isinstance(args, dict) else None
        # Only the engine's known-poll rule reads the action; other actions stay on the host.
        is_poll = name == "process" and action in ("poll", "log")
        return {
            "tool": tool,
            "args_hash": args_hash(name, args),
            "poll_action": action if is_poll else None,
        }

    def tool_call(
        self, tool: str, args: JSON, tool_call_id: str | None = None, want_verdict: bool = False
    ) -> WireEvent:
        """A tool_call event; the call id defaults to `call-<seq>`."""
        ev = self._base("tool_call")
        ev["tool_call_id"] = tool_call_id or f"call-{ev['seq']}"
        ev.update(self._call_fields(tool, args))
        if want_verdict:
            ev["want_verdict"] = True
        return ev

    def tool_result(
        self,
        tool_call_id: str | None,
        tool: str,
        args: JSON,
        *,
        result: JSON | Missing = MISSING,
        error: JSON | BaseException | Missing = MISSING,
    ) -> WireEvent:
        """A tool_result event: pass `result=` or `error=` (an exception, a string or JSON)."""
        ev = self._base("tool_result")
        ev["tool_call_id"] = tool_call_id
        ev.update(self._call_fields(tool, args))
        if isinstance(error, BaseException):
            error = str(error) or type(error).__name__
        if not self.privacy:
            if not isinstance(error, Missing):
                ev["error"] = error
            elif not isinstance(result, Missing):
                ev["result"] = result
            return ev
        if not isinstance(error, Missing):
            outcome = Outcome.error(error)
        else:
            outcome = Outcome.pending() if isinstance(result, Missing) else Outcome.result(result)
        ev["result_hash"] = result_hash(normalize_tool(tool), args, outcome, self.channel_tools)
        ev["unknown_tool_name"] = outcome_unknown_tool_name(outcome)
        return ev

    def compaction(self) -> WireEvent:
        """A compaction event (a compaction retry succeeded)."""
        return self._base("compaction")

    def end(self) -> WireEvent:
        """A run_end event."""
        return self._base("run_end")
