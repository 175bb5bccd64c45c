"""What the guard answers for one tool call, and what a verdict carries besides its decision.

Pure values and functions: no I/O. `verdict_fields` is the one place that reads a verdict's
payload beyond its decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from loopguard_fleet.detectors.values import JSON
from loopguard_fleet.streams.client import VerdictReply

__all__ = [
    "ABORT_MESSAGE",
    "FALLBACK_BLOCK_MESSAGE",
    "TIMEOUT_BLOCK_MESSAGE",
    "Gate",
    "GateAction",
    "VerdictFields",
    "verdict_fields",
    "with_note",
]

FALLBACK_BLOCK_MESSAGE: Final = "LoopGuard blocked this tool call: it repeats a loop."
TIMEOUT_BLOCK_MESSAGE: Final = "LoopGuard did not answer in time; this tool call was not run."
ABORT_MESSAGE: Final = "LoopGuard stopped this run: it is stuck in a tool loop."
GateAction = Literal["allow", "block", "abort"]


@dataclass(frozen=True, slots=True)
class VerdictFields:
    """What a verdict tells the runtime beyond its decision."""

    detector: str | None = None
    level: str | None = None
    count: int | None = None
    message: str | None = None
    note: str | None = None


def verdict_fields(reply: VerdictReply) -> VerdictFields:
    """The detector, level, count, message and note a verdict carries (None when absent)."""
    # The one place that reads the verdict's payload: when `VerdictReply` gains these as
    # properties, this function reads them instead.
    msg = reply.message

    def text(key: str) -> str | None:
        value = msg.get(key)
        return value if isinstance(value, str) and value else None

    count = msg.get("count")
    return VerdictFields(
        detector=text("detector"),
        level=text("level"),
        count=count if isinstance(count, int) and not isinstance(count, bool) else None,
        message=text("message"),
        note=text("note"),
    )


@dataclass(frozen=True, slots=True)
class Gate:
    """The guard's answer for one tool call: run it, refuse it, or refuse it and end the run."""

    action: GateAction
    run_id: str
    tool_call_id: str
    tool: str
    args: JSON
    message: str | None = None  # what the model sees instead of the tool's result
    note: str | None = None  # a warning to append to the tool's result
    detector: str | None = None
    is_timeout: bool = False

    @property
    def is_allowed(self) -> bool:
        """True when the tool should run."""
        return self.action == "allow"


def with_note(text: str, note: str | None) -> str:
    """`text` with a warning note appended on its own line (unchanged without a note)."""
    return f"{text}\n\n{note}" if note else text
