"""generic_repeat (docs/semantics.md §6 rules 7–8): the same call again and again.

no_progress ≥ criticalThreshold → critical (outcomes prove no progress); otherwise
recent_count (same tool and args in the window, pending included) ≥ warningThreshold →
warning. Known polls are left to known_poll_no_progress.

    read /missing → same error ×20 → call 11 warns (10), calls 12–20 warn, call 21 blocked (20)
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashkeys import HashKey, hash_text
from loopguard_fleet.detectors.values import Thresholds, ToolCall, Verdict

DETECTOR = "generic_repeat"


def message_2026_9(tool: str, count: int) -> str:
    """The critical message as OpenClaw 2026.9 words it."""
    return (
        f"CRITICAL: Called {tool} with identical outcomes {count} times. "
        "Session execution blocked to prevent runaway loops."
    )


def check(
    call: ToolCall,
    streak: int,
    latest: HashKey | None,
    recent: int,
    th: Thresholds,
    message: str | None = None,
) -> Verdict | None:
    """Critical on a long no-progress streak, warning on many identical calls (`message`:
    another profile's wording, for either)."""
    if not th.generic_repeat:
        return None
    tool = call.tool
    if streak >= th.critical_threshold:
        return Verdict(
            "critical",
            DETECTOR,
            streak,
            message
            or f"CRITICAL: Called {tool} with identical arguments and identical outcomes {streak} "
            "times. Session execution blocked to prevent runaway loops.",
            f"generic:{tool}:{call.args_hash}:{hash_text(latest) if latest else 'none'}",
        )
    count = recent
    if count < th.warning_threshold:
        return None
    return Verdict(
        "warning",
        DETECTOR,
        count,
        message
        or f"WARNING: You have called {tool} {count} times with identical arguments. If this is "
        "not making progress, stop retrying and report the task as failed.",
        f"generic:{tool}:{call.args_hash}",
    )
