"""LoopGuard's exception tree: one root for the whole package; the engine's branch here.

LoopGuardError                      every error LoopGuard raises on purpose
├── DetectorError                   the engine (raised only for invalid input)
│   ├── InvalidEvent                a wire event that cannot be decided on
│   ├── InvalidState                a serialised RunState that cannot be restored
│   ├── NotJSON                     a text JavaScript's JSON.parse refuses too (jsjson.py)
│   └── UnknownSemantics            a semantics profile name that does not exist (profiles.py)
├── PolicyError                     an invalid policy, every error with its path (config/)
└── StreamError                     the stream side: brokers, topics, clients, inputs,
                                    rejected messages, lost outputs (streams/errors.py)
"""

from __future__ import annotations


class LoopGuardError(Exception):
    """Root of every error LoopGuard raises on purpose."""


class DetectorError(LoopGuardError):
    """Root of every error the engine raises."""


class InvalidEvent(DetectorError):
    """A wire event is malformed; `reason` is a short, stable, label-safe code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class InvalidState(DetectorError):
    """Serialised run state is corrupt or of an unknown version."""
