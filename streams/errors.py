"""The stream side's branch of LoopGuard's exception tree (drawn in detectors/errors.py).

Each stream error also keeps the built-in base it always had (RuntimeError, ConnectionError),
so `except RuntimeError` in callers written before the tree still catches it.
"""

from __future__ import annotations

from loopguard_fleet.detectors.errors import LoopGuardError

__all__ = ["BrokerError", "StreamError"]


class StreamError(LoopGuardError):
    """Root of every error the stream side raises on purpose."""


class BrokerError(StreamError, RuntimeError):
    """A broker cannot be found, started or stopped, or topics cannot be created or found."""
