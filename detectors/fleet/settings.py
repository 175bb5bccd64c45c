"""The resolved fleet settings (`loopguard.fleet` of the policy, docs/fleet.md, "Tuning")."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final, Literal, NamedTuple

__all__ = ["EARLY_ACTIONS", "EarlyAction", "FleetSettings", "ToolHealthSettings", "WindowPolicy"]

EarlyAction = Literal["warn", "block"]
EARLY_ACTIONS: Final[tuple[EarlyAction, ...]] = ("warn", "block")


@dataclass(frozen=True, slots=True)
class ToolHealthSettings:
    """Tool health signals (`loopguard.fleet.toolHealth`, docs/fleet.md, "Tool health")."""

    enabled: bool = False
    error_ratio: float = 0.5  # bad runs / runs of a tool in a window that make it fire
    min_runs: int = 10  # runs of the tool in the window needed before it is judged

    def to_doc(self) -> dict[str, object]:
        """The settings in the policy file's key names."""
        return {"enabled": self.enabled, "errorRatio": self.error_ratio, "minRuns": self.min_runs}


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """Fleet signals and fleet-informed early warning; off unless the policy turns them on."""

    enabled: bool = False
    window_seconds: int = 300  # the event-time window a signature is counted in (one per half)
    min_runs: int = 5  # distinct runs in one window that make a signature fire
    early_action: EarlyAction = "warn"  # what a matching repeat gets while its signature fires
    early_at_count: int = 3  # the no-progress repeat count at which it gets it
    tool_health: ToolHealthSettings = field(default_factory=ToolHealthSettings)

    def to_doc(self) -> dict[str, object]:
        """The settings in the policy file's key names (`policy check`, the policy version)."""
        return {
            "enabled": self.enabled,
            "windowSeconds": self.window_seconds,
            "minRuns": self.min_runs,
            "earlyAction": self.early_action,
            "earlyAtCount": self.early_at_count,
            "toolHealth": self.tool_health.to_doc(),
        }


class WindowPolicy(NamedTuple):
    """The window settings of a pushed policy, as each contribution made under it carries
    them to the fleet task (docs/fleet.md, "Tuning": a pushed policy switches the windows).

    `at` orders the policies: the policy-topic offset of the version. A fleet stage switches
    at the first record of a later one than it counts with, and never back."""

    at: int
    window_seconds: int
    min_runs: int
    tool_min_runs: int
    tool_error_ratio: float

    @classmethod
    def of(cls, at: int, settings: FleetSettings) -> WindowPolicy:
        """A policy's window settings, at its policy-topic offset."""
        health = settings.tool_health
        return cls(
            at, settings.window_seconds, settings.min_runs, health.min_runs, health.error_ratio
        )

    def applied_to(self, settings: FleetSettings) -> FleetSettings:
        """`settings` with these window settings (the rest, `enabled` and tool health's
        `enabled` included, stays the stage's)."""
        health = replace(
            settings.tool_health, min_runs=self.tool_min_runs, error_ratio=self.tool_error_ratio
        )
        return replace(
            settings,
            window_seconds=self.window_seconds,
            min_runs=self.min_runs,
            tool_health=health,
        )
