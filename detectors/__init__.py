"""LoopGuard's detection engine: OpenClaw's tools.loopDetection as pure, deterministic code.

No I/O, no clock, no logging. Input: a run's state and one event; output: the new state (in
place) and a list of decisions.
"""

from loopguard_fleet.detectors.build_info import engine_build
from loopguard_fleet.detectors.compaction_guard import arm_guard, observe_guard
from loopguard_fleet.detectors.engine import detect, detect_pair
from loopguard_fleet.detectors.errors import (
    DetectorError,
    InvalidEvent,
    InvalidState,
    LoopGuardError,
)
from loopguard_fleet.detectors.events import Event, parse_event
from loopguard_fleet.detectors.hashing import args_hash, canonical_json, normalize_tool, result_hash
from loopguard_fleet.detectors.history import record_call, record_outcome
from loopguard_fleet.detectors.outcome_facts import OutcomeFacts, outcome_facts
from loopguard_fleet.detectors.process import (
    NO_VERDICT_YET,
    Applied,
    Decision,
    apply_event,
    effective_agent,
    hash_outcome,
    is_duplicate,
    process_event,
)
from loopguard_fleet.detectors.profiles import (
    CONFIGURABLE,
    OPENCLAW_2026_9,
    SEMANTICS,
    Semantics,
    UnknownSemantics,
    parse_semantics,
)
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.values import (
    JSON,
    UNDEFINED,
    GuardAbort,
    Outcome,
    Record,
    Thresholds,
    ToolCall,
    Verdict,
)

__all__ = [
    "CONFIGURABLE",
    "JSON",
    "NO_VERDICT_YET",
    "OPENCLAW_2026_9",
    "SEMANTICS",
    "UNDEFINED",
    "Applied",
    "Decision",
    "DetectorError",
    "Event",
    "GuardAbort",
    "InvalidEvent",
    "InvalidState",
    "LoopGuardError",
    "Outcome",
    "OutcomeFacts",
    "Record",
    "RunState",
    "Semantics",
    "Thresholds",
    "ToolCall",
    "UnknownSemantics",
    "Verdict",
    "apply_event",
    "args_hash",
    "arm_guard",
    "canonical_json",
    "detect",
    "detect_pair",
    "effective_agent",
    "engine_build",
    "hash_outcome",
    "is_duplicate",
    "normalize_tool",
    "observe_guard",
    "outcome_facts",
    "parse_event",
    "parse_semantics",
    "process_event",
    "record_call",
    "record_outcome",
    "result_hash",
]
