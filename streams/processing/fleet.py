"""The fleet stage of the processing core (docs/fleet.md, "Replay and determinism").

The driver calls a `FleetStage` for every event when fleet signals are on: `advance` (event
time moved: signal changes to publish and apply), `view` (what the engine reads), `contribute`
(a tool_call's contribution) and `apply_record` (a `fleet_signal` input record); the live
worker's stage is `PartitionFleet` (streams/processing/fleet_partition.py).

`OrderedFleet` is the fleet stage of a processing core that sees every run in one order (an
offline replay): each tool_call's contribution goes into the fleet windows, the watermark
follows the largest event time seen less the allowed lateness, and each signal change is
applied to the firing set before the event that moved the watermark is decided, so every call
after it in that order is decided with it. Its outputs are a function of the input order
only: the same input gives the same `fleet_signal` messages and early decisions, byte for
byte. `FleetTask` runs one per fleet partition (the live fleet task, and the audit of its
recorded topic); the fleet topic's records are `observation_record` / `tool_use_record` /
`tick_record`, read by `parse_fleet_record`. With tool health on, each stage also judges the
tools whose uses it counts (detectors/fleet/tools.py) and publishes their changes among the
signatures', by event time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final, Literal, Protocol

import orjson

from loopguard_fleet.config.loopguard_section import MAX_WINDOW_SECONDS, MIN_RUNS
from loopguard_fleet.detectors import JSON, Decision
from loopguard_fleet.detectors.fleet import (
    FleetEvidence,
    FleetSettings,
    FleetView,
    FleetWindows,
    Observation,
    SignalChange,
    WindowPolicy,
)
from loopguard_fleet.detectors.fleet.tools import ToolChange, ToolRatio, ToolUse, ToolWindows

__all__ = [
    "LATENESS_MS",
    "FleetStage",
    "FleetTask",
    "OrderedFleet",
    "observation_record",
    "parse_fleet_record",
    "parse_window_policy",
    "signal_decision",
    "signal_key",
    "tick_record",
    "tool_decision",
    "tool_use_record",
]

#: What a tool use's `bad` may be: not bad, or why (detectors/fleet/tools.py).
BAD_KINDS: Final = (None, "error", "no_progress")

#: The values a record's `windows` holds (`WindowPolicy`: at, window, minRuns, tool health's).
WINDOW_POLICY_FIELDS: Final = 5

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


def _at_ms(decision: Decision) -> int:
    """The event time of a `fleet_signal` decision's change."""
    at = decision.payload["at_ms"]
    assert isinstance(at, int)
    return at


def signal_key(payload: dict[str, JSON]) -> bytes:
    """The control-topic key of a `fleet_signal`: its signature's, or for a tool's health
    `tool<US><tool>` (the key of the tool's uses on the fleet topic too)."""
    if payload.get("kind") == "tool":
        return b"tool\x1f" + str(payload["tool"]).encode()
    return str(payload["signature"]).encode()


def tool_decision(change: ToolChange) -> Decision:
    """The `fleet_signal` control message of one tool-health change (docs/fleet.md)."""
    payload: dict[str, JSON] = {
        "type": "fleet_signal",
        "kind": "tool",
        "state": change.state,
        "signal_id": change.signal_id,
        "tool": change.tool,
        "at_ms": change.at_ms,
        "window": {"start_ms": change.window_start_ms, "end_ms": change.window_end_ms},
        "ratio": change.ratio,
        "runs": change.runs,
        "bad_runs": change.bad_runs,
        "error_runs": change.error_runs,
        "no_progress_runs": change.no_progress_runs,
        "agents": change.agents,
        "first_seen_ms": change.first_seen_ms,
        "last_seen_ms": change.last_seen_ms,
        "sample_run_ids": list(change.sample_run_ids),
    }
    did = f"{change.signal_id}:{change.state}"
    payload["id"] = did
    return Decision("fleet_signal", did, "", payload)


class FleetStage(Protocol):
    """What the driver calls of a fleet stage (per input partition)."""

    settings: FleetSettings

    def advance(self, partition: int, ts_ms: int) -> list[Decision]:
        """Event time moved to `ts_ms` on a partition: the signal changes to publish."""
        ...

    def view(self, partition: int, ts_ms: int, settings: FleetSettings) -> FleetView:
        """What the engine reads of the fleet for an event of a partition, under the fleet
        settings of the policy in force for it (its early rule and `enabled`; the windows
        switch through the contributions: `contribute`)."""
        ...

    def contribute(self, partition: int, obs: Observation, windows: WindowPolicy | None) -> None:
        """One tool_call's contribution, from an event of `partition`, under the window
        settings of the pushed policy in force there (None: the start-up policy's)."""
        ...

    def use(self, partition: int, use: ToolUse, windows: WindowPolicy | None) -> None:
        """One tool_call's use of its tool, from an event of `partition`, as `contribute`
        (tool health; ignored when it is off)."""
        ...

    def apply_record(self, partition: int, obj: dict[str, object]) -> bool:
        """A `fleet_signal` input record read on a partition; False when it is malformed."""
        ...

    def needs(self, partition: int) -> bool:
        """True when a partition's firing set must be loaded from the store first."""
        ...

    def load(self, partition: int, stored: bytes | None) -> None:
        """A partition's firing set as `dump` stored it (None: none stored)."""
        ...

    def dump(self, partition: int) -> bytes:
        """A partition's firing set, to store after each change."""
        ...


class OrderedFleet:
    """The fleet stage over one ordered stream: windows, watermark, the firing set."""

    def __init__(self, settings: FleetSettings, lateness_ms: int = LATENESS_MS) -> None:
        self.settings = settings
        self.windows = FleetWindows(settings.window_seconds, settings.min_runs)
        health = settings.tool_health
        self.tools: ToolWindows | None = None
        if health.enabled:
            self.tools = ToolWindows(settings.window_seconds, health.min_runs, health.error_ratio)
        self.lateness_ms = lateness_ms
        self.firing: dict[str, FleetEvidence] = {}
        self._latest_ms: int | None = None
        self.windows_at = -1  # the pushed policy whose window settings count (-1: start-up's)

    def switch(self, windows: WindowPolicy | None) -> None:
        """Count with a later pushed policy's window settings from here on (docs/fleet.md,
        "Tuning"): another `minRuns` judges the open windows; another window length starts
        the counts afresh at the watermark, firing signals carried."""
        if windows is None or windows.at <= self.windows_at:
            return
        self.windows_at = windows.at
        before, after = self.settings, windows.applied_to(self.settings)
        self.settings = after
        if after.window_seconds != before.window_seconds:
            self.windows.resize(after.window_seconds)
            if self.tools is not None:
                self.tools.resize(after.window_seconds, self.windows.watermark_ms)
            seconds = after.window_seconds
            self.firing = {s: replace(e, window_seconds=seconds) for s, e in self.firing.items()}
        if after.min_runs != before.min_runs:
            self.windows.set_min_runs(after.min_runs)
        if self.tools is not None:
            self.tools.min_runs = after.tool_health.min_runs  # judged as each window closes
            self.tools.error_ratio = after.tool_health.error_ratio

    def view(self, partition: int, ts_ms: int, settings: FleetSettings) -> FleetView:
        """What the engine reads of the fleet for an event at this event time, under the
        policy in force's fleet settings."""
        return FleetView(settings, self.firing, ts_ms)

    def apply_record(self, partition: int, obj: dict[str, object]) -> bool:
        """Replay computes its signals: a recorded `fleet_signal` input record is ignored."""
        return True

    def needs(self, partition: int) -> bool:
        """Nothing is stored: the firing set lives as long as the replay."""
        return False

    def load(self, partition: int, stored: bytes | None) -> None:
        """Nothing to load."""

    def dump(self, partition: int) -> bytes:
        """Nothing to store."""
        return b""

    def advance(self, partition: int, ts_ms: int) -> list[Decision]:
        """Move event time to an event's (if later): the `fleet_signal` messages of the changes
        the watermark passed, applied to the firing set before that event is decided."""
        if self._latest_ms is not None and ts_ms <= self._latest_ms:
            return []
        self._latest_ms = ts_ms
        mark = ts_ms - self.lateness_ms
        changes = self.windows.advance(mark)
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
        out = [signal_decision(c) for c in changes]
        if self.tools is not None:
            out += [tool_decision(c) for c in self.tools.advance(mark)]
            out.sort(key=_at_ms)  # stable: a signature's change first at one event time
        return out

    def contribute(self, partition: int, obs: Observation, windows: WindowPolicy | None) -> None:
        """Count one contribution (late or past the cap: dropped and counted by the windows),
        after switching to its window settings if they are a later policy's."""
        if windows is not None:
            self.switch(windows)
        self.windows.observe(obs)

    def use(self, partition: int, use: ToolUse, windows: WindowPolicy | None) -> None:
        """Count one use of a tool (late or past a cap: dropped and counted by the windows),
        after switching as `contribute` does."""
        if windows is not None:
            self.switch(windows)
        if self.tools is not None:
            self.tools.observe(use, self.windows.watermark_ms)

    def tool_ratios(self) -> dict[str, ToolRatio]:
        """Each tool's counts in the last window tool health closed (none when it is off)."""
        return {} if self.tools is None else self.tools.latest

    def state(self) -> dict[str, Any]:
        """The windows' state, the latest event time and the firing set, JSON-ready."""
        return {
            "windows": self.windows.state(),
            "latest": self._latest_ms,
            "evidence": [
                [sig, e.signal_id, e.runs, e.agents, e.is_failure]
                for sig, e in sorted(self.firing.items())
            ],
            "tools": None if self.tools is None else self.tools.state(),
            "switched": None if self.windows_at < 0 else self._window_policy(),
        }

    def _window_policy(self) -> list[object]:
        """The window settings switched to, as `state()` keeps them."""
        return list(WindowPolicy.of(self.windows_at, self.settings))

    def restore(self, state: dict[str, Any]) -> bool:
        """Take what `state()` gave; False (nothing changed) when the windows refuse it."""
        switched = parse_window_policy(state.get("switched"))
        if switched is False:
            return False
        if switched is not None:  # the settings it counted with: the windows check them
            self.switch(switched)
        if not self.windows.restore(state["windows"]):
            return False
        self._latest_ms = state["latest"]
        seconds = self.settings.window_seconds
        self.firing = {
            sig: FleetEvidence(sid, runs, agents, seconds, failure)
            for sig, sid, runs, agents, failure in state["evidence"]
        }
        tools = state.get("tools")
        if self.tools is not None and tools is not None:
            self.tools.restore(tools)  # kept with other tool settings: they count afresh
        return True


def observation_record(obs: Observation, windows: WindowPolicy | None = None) -> dict[str, JSON]:
    """A contribution as the fleet topic carries it (keyed by its signature), with the window
    settings of the pushed policy it was made under, if any."""
    record: dict[str, JSON] = {
        "type": "fleet_observation",
        "signature": obs.signature,
        "tool": obs.tool,
        "run_id": obs.run_id,
        "agent_id": obs.agent_id,
        "ts": obs.ts_ms,
        "streak": obs.streak,
        "is_failure": obs.is_failure,
    }
    if windows is not None:
        record["windows"] = list(windows)
    return record


def tool_use_record(use: ToolUse, windows: WindowPolicy | None = None) -> dict[str, JSON]:
    """A tool use as the fleet topic carries it (keyed by its tool, as `signal_key` keys a
    tool's signal), with its window settings as `observation_record`."""
    record: dict[str, JSON] = {
        "type": "fleet_tool_use",
        "tool": use.tool,
        "run_id": use.run_id,
        "agent_id": use.agent_id,
        "ts": use.ts_ms,
        "bad": use.bad,
    }
    if windows is not None:
        record["windows"] = list(windows)
    return record


def parse_window_policy(raw: object) -> WindowPolicy | Literal[False] | None:
    """A record's window settings (`observation_record`): None when it has none, False when
    they are malformed."""
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != WINDOW_POLICY_FIELDS:
        return False
    at, seconds, min_runs, tool_min_runs, ratio = raw
    ints = (at, seconds, min_runs, tool_min_runs)
    if any(type(n) is not int for n in ints) or type(ratio) not in (int, float):
        return False
    if not 1 <= seconds <= MAX_WINDOW_SECONDS or min(min_runs, tool_min_runs) < MIN_RUNS:
        return False  # what `loopguard policy check` refuses
    if not 0 < ratio <= 1:
        return False
    return WindowPolicy(at, seconds, min_runs, tool_min_runs, float(ratio))


def tick_record(ts_ms: int) -> dict[str, JSON]:
    """Event time moving on a worker, for every fleet partition's watermark."""
    return {"type": "fleet_tick", "ts": ts_ms}


def parse_fleet_record(obj: object) -> Observation | ToolUse | int | None:
    """A fleet topic record: its contribution, a tool use, a tick's event time, or None if
    malformed."""
    if not isinstance(obj, dict):
        return None
    ts = obj.get("ts")
    if type(ts) is not int:
        return None
    kind = obj.get("type")
    if kind == "fleet_tick":
        return ts
    tool, run, agent = obj.get("tool"), obj.get("run_id"), obj.get("agent_id")
    if kind == "fleet_tool_use":
        bad = obj.get("bad")
        if not isinstance(tool, str) or not isinstance(run, str):
            return None
        if (agent is not None and not isinstance(agent, str)) or bad not in BAD_KINDS:
            return None
        return ToolUse(tool, run, agent, ts, bad)
    sig, streak, failure = obj.get("signature"), obj.get("streak"), obj.get("is_failure")
    if kind != "fleet_observation" or not isinstance(sig, str):
        return None
    if not isinstance(tool, str) or not isinstance(run, str) or type(streak) is not int:
        return None
    if (agent is not None and not isinstance(agent, str)) or type(failure) is not bool:
        return None
    return Observation(sig, tool, run, agent, ts, streak, failure)


class FleetTask:
    """The fleet task's core: one `OrderedFleet` per fleet partition, fed that partition's
    records (contributions and ticks) in offset order; a worker's fleet agent runs it, and an
    audit of the recorded fleet topic runs it again to the same signals.

    A partition's state (`dump`) names the offset after the last record it counts; restored
    (`load`), the records before that offset are skipped when read again, so a partition
    restored and fed from any earlier offset gives what one stage fed every record once gives.
    """

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self.partitions: dict[int, OrderedFleet] = {}
        self.offsets: dict[int, int] = {}  # partition -> offset after the last record counted
        self.newly_dropped = [0, 0]  # (late, full) since `take_dropped`

    def feed(self, partition: int, obj: object, offset: int | None = None) -> list[Decision] | None:
        """One fleet record (at `offset` in its partition, if known): the signal changes it
        brought ([] for a record the partition's state already counts), or None when it is
        malformed."""
        if offset is not None:
            if offset < self.offsets.get(partition, 0):
                return []
            self.offsets[partition] = offset + 1
        parsed = parse_fleet_record(obj)
        if parsed is None:
            return None
        switch: WindowPolicy | None = None
        if not isinstance(parsed, int):
            assert isinstance(obj, dict)  # parse_fleet_record read it as one
            carried = parse_window_policy(obj.get("windows"))
            if carried is False:
                return None
            switch = carried
        stage = self.partitions.get(partition)
        if stage is None:
            stage = self.partitions[partition] = OrderedFleet(self.settings)
        ts = parsed if isinstance(parsed, int) else parsed.ts_ms
        out = stage.advance(partition, ts)
        if isinstance(parsed, Observation):
            windows = stage.windows
            late, full = windows.dropped_late, windows.dropped_full
            stage.contribute(partition, parsed, switch)
            self.newly_dropped[0] += windows.dropped_late - late
            self.newly_dropped[1] += windows.dropped_full - full
        elif isinstance(parsed, ToolUse) and stage.tools is not None:
            tools = stage.tools
            late, full = tools.dropped_late, tools.dropped_full
            stage.use(partition, parsed, switch)
            self.newly_dropped[0] += tools.dropped_late - late
            self.newly_dropped[1] += tools.dropped_full - full
        return out

    def take_dropped(self) -> tuple[int, int]:
        """Contributions this task dropped since the last call: (late, past the signature
        cap); none a restored state counted before."""
        late, full = self.newly_dropped
        self.newly_dropped = [0, 0]
        return late, full

    def needs(self, partition: int) -> bool:
        """True until a partition's state is loaded (or its first record fed)."""
        return partition not in self.offsets

    def dump(self, partition: int) -> bytes:
        """A partition's state and the offset it reaches, as `load` reads it."""
        stage = self.partitions.get(partition)
        return orjson.dumps(
            {
                "offset": self.offsets.get(partition, 0),
                "stage": None if stage is None else stage.state(),
            }
        )

    def load(self, partition: int, stored: bytes | None) -> bool:
        """A partition's state as `dump` stored it; False (starting afresh from the records
        read) when there is none or it was kept with other settings or is unreadable."""
        self.forget([partition])
        try:
            doc = orjson.loads(stored or b"null")
            offset, state = doc["offset"], doc["stage"]
            stage = OrderedFleet(self.settings)
            if state is not None and not stage.restore(state):
                return False
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            return False
        self.offsets[partition] = offset
        if state is not None:
            self.partitions[partition] = stage
        return True

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the state of partitions whose ownership changed."""
        for p in partitions:
            self.partitions.pop(p, None)
            self.offsets.pop(p, None)

    @property
    def firing(self) -> int:
        """Signatures firing across the task's partitions."""
        return sum(len(stage.windows.firing) for stage in self.partitions.values())

    @property
    def tools_firing(self) -> int:
        """Tools whose health signal fires across the task's partitions."""
        return sum(len(s.tools.firing) for s in self.partitions.values() if s.tools is not None)

    def tool_ratios(self) -> dict[str, ToolRatio]:
        """Each tool's counts in the last window its partition closed (a tool lives in one
        fleet partition: its records are keyed by it)."""
        out: dict[str, ToolRatio] = {}
        for stage in self.partitions.values():
            out.update(stage.tool_ratios())
        return out
