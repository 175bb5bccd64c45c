"""The fleet stage of a live worker's processing core (docs/fleet.md, "Replay and
determinism"): each input partition's firing set, changed by the `fleet_signal` records read
on that partition, stored in the run table under `FIRING_KEY`.
"""

from __future__ import annotations

from typing import Final

import orjson

from loopguard_fleet.detectors import Decision
from loopguard_fleet.detectors.fleet import (
    FleetEvidence,
    FleetSettings,
    FleetView,
    Observation,
    WindowPolicy,
)
from loopguard_fleet.detectors.fleet.tools import ToolUse

__all__ = ["FIRING_KEY", "USES_HELD", "PartitionFleet"]

#: The table key of an input partition's firing set: bytes no run id's UTF-8 key can hold.
FIRING_KEY: Final = b"\xff\xfeloopguard-fleet-firing"
#: (run, tool) pairs whose last sent use is remembered; past it the memory starts afresh, which
#: costs only repeated uses: tool health counts distinct runs.
USES_HELD: Final = 100_000


def _evidence(obj: dict[str, object], window_seconds: int) -> FleetEvidence | None:
    """The evidence of a `fleet_signal` firing record, None when a field is malformed; its
    window's length is the record's (a pushed policy may have changed it), else
    `window_seconds`."""
    sid, runs, agents, failure = (obj.get(k) for k in ("signal_id", "runs", "agents", "is_failure"))
    if not isinstance(sid, str) or type(runs) is not int or type(agents) is not int:
        return None
    if type(failure) is not bool:
        return None
    window = obj.get("window")
    if isinstance(window, dict):
        start, end = window.get("start_ms"), window.get("end_ms")
        if type(start) is int and type(end) is int and end - start >= 1000:
            window_seconds = (end - start) // 1000
    return FleetEvidence(sid, runs, agents, window_seconds, failure)


class PartitionFleet:
    """The fleet stage of a live worker: each input partition's firing set holds the signals
    read on that partition (the fleet task writes each change to every partition), and the
    contributions wait for the agent to send them to the fleet topic (`take`)."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.firing: dict[int, dict[str, FleetEvidence]] = {}
        # What waits for the agent, each with the input partition of the event it came from
        # (under exactly-once it is sent in that partition's transaction) and the window
        # settings of the pushed policy in force there (None: the start-up policy's).
        self.contributions: list[tuple[int, Observation, WindowPolicy | None]] = []
        self.latest_ms: int | None = None  # the largest event time seen (the fleet's ticks)
        self.latest_partition = 0  # the partition of the event that moved it
        self.uses: list[tuple[int, ToolUse, WindowPolicy | None]] = []
        # (run, tool) → the half-window bucket of its last healthy use sent: a run calling a
        # tool many times sends one healthy use per bucket (a bad one is sent each time).
        self._sent: dict[tuple[str, str], int] = {}
        self._hop_ms = settings.window_seconds * 500

    def advance(self, partition: int, ts_ms: int) -> list[Decision]:
        """Signals come as input records, not from event time: nothing to publish here."""
        if self.latest_ms is None or ts_ms > self.latest_ms:
            self.latest_ms = ts_ms
            self.latest_partition = partition
        return []

    def view(self, partition: int, ts_ms: int, settings: FleetSettings) -> FleetView:
        """The partition's firing set as read so far, in offset order, under the fleet
        settings of the policy in force there (`settings`: its early rule and `enabled`)."""
        return FleetView(settings, self.firing.get(partition, {}), ts_ms)

    def contribute(self, partition: int, obs: Observation, windows: WindowPolicy | None) -> None:
        """Hold a contribution until the agent sends the batch's (`take`)."""
        self.contributions.append((partition, obs, windows))

    def take(self) -> list[tuple[int, Observation, WindowPolicy | None]]:
        """The contributions held since the last call."""
        out, self.contributions = self.contributions, []
        return out

    def use(self, partition: int, use: ToolUse, windows: WindowPolicy | None) -> None:
        """Hold a tool use for the agent to send (`take_uses`), unless tool health is off or
        the run's healthy use of the tool in this bucket was sent already."""
        if not self.settings.tool_health.enabled:
            return
        if use.bad is None:
            hop = self._hop_ms if windows is None else windows.window_seconds * 500
            key, bucket = (use.run_id, use.tool), use.ts_ms - use.ts_ms % hop
            if self._sent.get(key) == bucket:
                return
            if len(self._sent) >= USES_HELD:
                self._sent.clear()
            self._sent[key] = bucket
        self.uses.append((partition, use, windows))

    def take_uses(self) -> list[tuple[int, ToolUse, WindowPolicy | None]]:
        """The tool uses held since the last call."""
        out, self.uses = self.uses, []
        return out

    def apply_record(self, partition: int, obj: dict[str, object]) -> bool:
        """Apply a `fleet_signal` record to its partition's firing set."""
        signature, state = obj.get("signature"), obj.get("state")
        if not isinstance(signature, str) or state not in ("firing", "resolved"):
            return False
        firing = self.firing.setdefault(partition, {})
        if state == "resolved":
            firing.pop(signature, None)
            return True
        evidence = _evidence(obj, self.settings.window_seconds)
        if evidence is None:
            return False
        firing[signature] = evidence
        return True

    def forget(self, partitions: set[int]) -> None:
        """Drop the firing sets of partitions whose ownership changed (the table's copy is
        loaded again on the partition's next record)."""
        for p in partitions:
            self.firing.pop(p, None)

    def needs(self, partition: int) -> bool:
        """True until the partition's firing set is loaded (or first changed)."""
        return partition not in self.firing

    def load(self, partition: int, stored: bytes | None) -> None:
        """The firing set `dump` stored; a missing or unreadable one is empty."""
        firing: dict[str, FleetEvidence] = {}
        try:
            doc = orjson.loads(stored) if stored else {}
        except orjson.JSONDecodeError:
            doc = {}
        entries = doc.get("firing") if isinstance(doc, dict) else None
        for signature, fields in (entries if isinstance(entries, dict) else {}).items():
            if isinstance(fields, list) and len(fields) == 4:
                sid, runs, agents, failure = fields
                record = {"signal_id": sid, "runs": runs, "agents": agents, "is_failure": failure}
                evidence = _evidence(record, self.settings.window_seconds)
                if evidence is not None:
                    firing[signature] = evidence
        self.firing[partition] = firing

    def dump(self, partition: int) -> bytes:
        """The partition's firing set: `{"v": 1, "firing": {signature: [id, runs, agents,
        is_failure]}}`."""
        firing = self.firing.get(partition, {})
        entries = {
            sig: [e.signal_id, e.runs, e.agents, e.is_failure] for sig, e in sorted(firing.items())
        }
        return orjson.dumps({"v": 1, "firing": entries})
