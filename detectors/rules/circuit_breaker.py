"""global_circuit_breaker (docs/semantics.md §6 rule 2): identical no-progress outcomes, any tool.

no_progress ≥ globalCircuitBreakerThreshold → critical, whatever the detector flags say.

    read /same → same error ×30 → call 31 (or the next retry once 30 slots agree): blocked
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashkeys import HashKey, hash_text
from loopguard_fleet.detectors.values import Thresholds, ToolCall, Verdict

DETECTOR = "global_circuit_breaker"


def message_2026_9(tool: str, count: int) -> str:
    """The breaker's message as OpenClaw 2026.9 words it."""
    return (
        f"CRITICAL: {tool} repeated identical no-progress outcomes {count} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops."
    )


def check(
    call: ToolCall,
    streak: int,
    latest: HashKey | None,
    th: Thresholds,
    message: str | None = None,
) -> Verdict | None:
    """Critical when the no-progress streak reaches the global threshold (`message`: another
    profile's wording)."""
    if streak < th.global_circuit_breaker_threshold:
        return None
    return Verdict(
        "critical",
        DETECTOR,
        streak,
        message
        or f"CRITICAL: {call.tool} has repeated identical no-progress outcomes {streak} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops.",
        f"global:{call.tool}:{call.args_hash}:{hash_text(latest) if latest else 'none'}",
    )
