"""Fleet signals' pure parts (docs/fleet.md): the loop signature, when a run contributes it,
the windowed fleet counts and their signals, the early verdict, the settings.

No I/O, no clock: event times and watermarks are given by the caller (the stream side).
"""

from loopguard_fleet.detectors.fleet.contribution import (
    ERROR_STREAK,
    QUIET_STREAK,
    Observation,
    is_failure,
    no_progress,
    observe_call,
)
from loopguard_fleet.detectors.fleet.early import (
    FleetEvidence,
    FleetView,
    early_verdict,
    evidence_text,
    publish_early,
)
from loopguard_fleet.detectors.fleet.settings import (
    EARLY_ACTIONS,
    EarlyAction,
    FleetSettings,
    WindowPolicy,
)
from loopguard_fleet.detectors.fleet.signature import (
    SIGNATURE_VERSION,
    last_outcome,
    loop_signature,
    signature_of_call,
)
from loopguard_fleet.detectors.fleet.windows import (
    MAX_SIGNATURES,
    FleetWindows,
    SignalChange,
    signal_id,
)

__all__ = [
    "EARLY_ACTIONS",
    "ERROR_STREAK",
    "MAX_SIGNATURES",
    "QUIET_STREAK",
    "SIGNATURE_VERSION",
    "EarlyAction",
    "FleetEvidence",
    "FleetSettings",
    "FleetView",
    "FleetWindows",
    "Observation",
    "SignalChange",
    "WindowPolicy",
    "early_verdict",
    "evidence_text",
    "is_failure",
    "last_outcome",
    "loop_signature",
    "no_progress",
    "observe_call",
    "publish_early",
    "signal_id",
    "signature_of_call",
]
