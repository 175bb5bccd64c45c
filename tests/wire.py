"""Test helper: builds wire events for one run with increasing seq (no engine imports)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class InputRecord:
    """A keyed input record with a record time: the fields of Faust's Message the driver reads."""

    topic: str
    partition: int
    offset: int
    timestamp: float | None
    key: bytes | None
    value: bytes | None


class Clock:
    """The runtime's clock (epoch ms): the events' event time, moved by the test."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


class RunScript:
    """Emits the wire events an agent runtime would send for one run."""

    def __init__(self, run_id: str = "r1", agent_id: str | None = "main") -> None:
        self.run_id = run_id
        self.agent_id = agent_id
        self.seq = 0
        self.calls = 0

    def _base(self, etype: str) -> dict[str, Any]:
        self.seq += 1
        ev: dict[str, Any] = {
            "type": etype,
            "event_id": f"{self.run_id}-e{self.seq}",
            "run_id": self.run_id,
            "seq": self.seq,
        }
        if self.agent_id is not None:
            ev["agent_id"] = self.agent_id
        return ev

    def call(self, tool: str, args: Any, **extra: Any) -> dict[str, Any]:
        """A tool_call event (tool_call_id c<n> unless given)."""
        self.calls += 1
        ev = self._base("tool_call")
        ev.update(tool=tool, args=args, tool_call_id=f"c{self.calls}")
        ev.update(extra)
        return ev

    def result(self, tool: str, args: Any, **outcome: Any) -> dict[str, Any]:
        """A tool_result for the latest call: pass result=… or error=…."""
        ev = self._base("tool_result")
        ev.update(tool=tool, args=args, tool_call_id=f"c{self.calls}")
        ev.update(outcome)
        return ev

    def both(self, tool: str, args: Any, **outcome: Any) -> list[dict[str, Any]]:
        """A call followed by its result."""
        return [self.call(tool, args), self.result(tool, args, **outcome)]

    def compaction(self) -> dict[str, Any]:
        """A compaction event."""
        return self._base("compaction")

    def end(self) -> dict[str, Any]:
        """A run_end event."""
        return self._base("run_end")


def text_result(text: str, **details: Any) -> dict[str, Any]:
    """A tool result with one text item and the given details."""
    return {"content": [{"type": "text", "text": text}], "details": dict(details)}
