"""Fleet signals' pure parts: the loop signature (docs/fleet.md).

No I/O, no clock: the stream side (streams/worker/fleet.py) feeds these functions.
"""

from loopguard_fleet.detectors.fleet.signature import (
    SIGNATURE_VERSION,
    last_outcome,
    loop_signature,
    signature_of_call,
)

__all__ = ["SIGNATURE_VERSION", "last_outcome", "loop_signature", "signature_of_call"]
