"""known_poll_no_progress: a polling call whose result never changes.

Rules 3–4 of docs/semantics.md §6.

Known polls: `command_status`, and `process` with action `poll` or `log`. no_progress ≥
criticalThreshold → critical; ≥ warningThreshold → warning. Known polls never reach the
generic-repeat rules.

    process {action: poll} → "(no new output)" ×10 → call 11 warns (10); call 21 blocked (20)
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashkeys import HashKey, hash_text
from loopguard_fleet.detectors.values import Thresholds, ToolCall, Verdict

DETECTOR = "known_poll_no_progress"


def is_known_poll(call: ToolCall) -> bool:
    """True for calls that are polls by nature."""
    if call.tool == "command_status":
        return True
    return call.tool == "process" and call.action in ("poll", "log")


def check(call: ToolCall, streak: int, latest: HashKey | None, th: Thresholds) -> Verdict | None:
    """Critical or warning for a known poll that keeps returning the same outcome."""
    if not th.known_poll_no_progress or streak < th.warning_threshold:
        return None
    key = f"poll:{call.tool}:{call.args_hash}:{hash_text(latest) if latest else 'none'}"
    if streak >= th.critical_threshold:
        return Verdict(
            "critical",
            DETECTOR,
            streak,
            f"CRITICAL: Called {call.tool} with identical arguments and no progress {streak} "
            "times. This appears to be a stuck polling loop. Session execution blocked to "
            "prevent resource waste.",
            key,
        )
    return Verdict(
        "warning",
        DETECTOR,
        streak,
        f"WARNING: You have called {call.tool} {streak} times with identical arguments and no "
        "progress. Stop polling and either (1) increase wait time between checks, or (2) "
        "report the task as failed if the process is stuck.",
        key,
    )
