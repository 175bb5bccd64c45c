"""The engine's exception tree: one root, raised only for invalid input.

DetectorError
├── InvalidEvent      a wire event that cannot be decided on (bad shape or values)
└── InvalidState      a serialised RunState that cannot be restored
"""

from __future__ import annotations


class DetectorError(Exception):
    """Root of every error the engine raises."""


class InvalidEvent(DetectorError):
    """A wire event is malformed; `reason` is a short, stable, label-safe code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class InvalidState(DetectorError):
    """Serialised run state is corrupt or of an unknown version."""
