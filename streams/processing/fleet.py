"""Fleet signals in one ordered stream of events (docs/fleet.md, "Replay and determinism").

`OrderedFleet` is the fleet stage of a processing core that sees every run in one order (an
offline replay): each tool_call's contribution goes into the fleet windows, the watermark
follows the largest event time seen less the allowed lateness, and each signal change is
applied to the firing set before the event that moved the watermark is decided, so every call
after it in that order is decided with it.
Its outputs are a function of the input order only: the same input gives the same
`fleet_signal` messages and early decisions, byte for byte.
"""

from __future__ import annotations

from typing import Final

from loopguard_fleet.detectors import JSON, Decision
from loopguard_fleet.detectors.fleet import (
    FleetEvidence,
    FleetSettings,
    FleetView,
    FleetWindows,
    Observation,
    SignalChange,
)

__all__ = ["LATENESS_MS", "OrderedFleet", "signal_decision"]

#: How far behind the latest contribution the watermark stays: contributions up to this late
#: (event time) are still counted in their window (docs/fleet.md).
LATENESS_MS: Final = 1_000


def signal_decision(change: SignalChange) -> Decision:
    """The `fleet_signal` control message of one signal change (docs/wire-format.md)."""
    payload: dict[str, JSON] = {
        "type": "fleet_signal",
        "state": change.state,
        "signal_id": change.signal_id,
        "signature": change.signature,
        "tool": change.tool,
        "at_ms": change.at_ms,
        "window": {"start_ms": change.window_start_ms, "end_ms": change.window_end_ms},
        "runs": change.runs,
        "agents": change.agents,
        "calls": change.calls,
        "first_seen_ms": change.first_seen_ms,
        "last_seen_ms": change.last_seen_ms,
        "sample_run_ids": list(change.sample_run_ids),
        "is_failure": change.is_failure,
    }
    did = f"{change.signal_id}:{change.state}"
    payload["id"] = did
    return Decision("fleet_signal", did, "", payload)


class OrderedFleet:
    """The fleet stage over one ordered stream: windows, watermark, the firing set."""

    def __init__(self, settings: FleetSettings, lateness_ms: int = LATENESS_MS) -> None:
        self.settings = settings
        self.windows = FleetWindows(settings.window_seconds, settings.min_runs)
        self.lateness_ms = lateness_ms
        self.firing: dict[str, FleetEvidence] = {}
        self._latest_ms: int | None = None

    def view(self, ts_ms: int) -> FleetView:
        """What the engine reads of the fleet for an event at this event time."""
        return FleetView(self.settings, self.firing, ts_ms)

    def advance(self, ts_ms: int) -> list[Decision]:
        """Move event time to an event's (if later): the `fleet_signal` messages of the changes
        the watermark passed, applied to the firing set before that event is decided."""
        if self._latest_ms is not None and ts_ms <= self._latest_ms:
            return []
        self._latest_ms = ts_ms
        changes = self.windows.advance(ts_ms - self.lateness_ms)
        for change in changes:
            if change.state == "firing":
                self.firing[change.signature] = FleetEvidence(
                    change.signal_id,
                    change.runs,
                    change.agents,
                    self.settings.window_seconds,
                    change.is_failure,
                )
            else:
                self.firing.pop(change.signature, None)
        return [signal_decision(c) for c in changes]

    def contribute(self, obs: Observation) -> None:
        """Count one contribution (late or past the cap: dropped and counted by the windows)."""
        self.windows.observe(obs)
