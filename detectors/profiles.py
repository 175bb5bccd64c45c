"""Semantics profiles: which OpenClaw release's detection rules decide (docs/semantics.md).

    configurable     the configurable era (mid-2026, every threshold a policy key); the default
    openclaw-2026.9  npm `openclaw@2026.9.6`: veto records, outcome facts, argument churn

A profile is chosen once per worker or replay and travels in every resolved `Thresholds`, so
the engine's functions keep their signatures and an audit can tell which rules decided.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

from loopguard_fleet.detectors.errors import DetectorError

__all__ = [
    "CONFIGURABLE",
    "OPENCLAW_2026_9",
    "SEMANTICS",
    "Semantics",
    "UnknownSemantics",
    "parse_semantics",
]

Semantics: TypeAlias = Literal["configurable", "openclaw-2026.9"]
CONFIGURABLE: Final[Semantics] = "configurable"
OPENCLAW_2026_9: Final[Semantics] = "openclaw-2026.9"
SEMANTICS: Final[tuple[Semantics, ...]] = (CONFIGURABLE, OPENCLAW_2026_9)


class UnknownSemantics(DetectorError, ValueError):
    """A profile name that is not one of SEMANTICS."""


def parse_semantics(name: str) -> Semantics:
    """The profile called `name` (trimmed, case-insensitive); raises UnknownSemantics."""
    wanted = name.strip().lower()
    if wanted not in SEMANTICS:
        raise UnknownSemantics(
            f"unknown semantics profile {name!r}; valid profiles: {', '.join(SEMANTICS)}"
        )
    return CONFIGURABLE if wanted == CONFIGURABLE else OPENCLAW_2026_9
