"""Fleet signals' pure parts: the loop signature and the settings (docs/fleet.md).

No I/O, no clock: the stream side (streams/worker/fleet.py) feeds these functions.
"""

from loopguard_fleet.detectors.fleet.settings import EARLY_ACTIONS, EarlyAction, FleetSettings
from loopguard_fleet.detectors.fleet.signature import (
    SIGNATURE_VERSION,
    last_outcome,
    loop_signature,
    signature_of_call,
)

__all__ = [
    "EARLY_ACTIONS",
    "SIGNATURE_VERSION",
    "EarlyAction",
    "FleetSettings",
    "last_outcome",
    "loop_signature",
    "signature_of_call",
]
