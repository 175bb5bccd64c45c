"""What the guard answers for one tool call, and what a verdict carries besides its decision.

Pure values and functions: no I/O. What a verdict says beyond its decision (detector,
message, note) comes from `VerdictReply`, the runtime client's reading of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from loopguard_fleet.detectors.values import JSON

__all__ = [
    "ABORT_MESSAGE",
    "FALLBACK_BLOCK_MESSAGE",
    "TIMEOUT_BLOCK_MESSAGE",
    "Gate",
    "GateAction",
    "with_note",
]

FALLBACK_BLOCK_MESSAGE: Final = "LoopGuard blocked this tool call: it repeats a loop."
TIMEOUT_BLOCK_MESSAGE: Final = "LoopGuard did not answer in time; this tool call was not run."
ABORT_MESSAGE: Final = "LoopGuard stopped this run: it is stuck in a tool loop."
GateAction = Literal["allow", "block", "abort"]


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
