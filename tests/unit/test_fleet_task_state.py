"""The fleet task's stored state (docs/fleet.md, "Restarts and rebalances keep the fleet
counts"): what a worker loads when it gets a fleet partition."""

from __future__ import annotations

from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.streams.processing.fleet import FleetTask

SETTINGS = FleetSettings(enabled=True, window_seconds=10, min_runs=3)


def contribution(run: str, ts: int) -> dict[str, object]:
    return {"type": "fleet_observation", "signature": "a" * 32, "tool": "read", "run_id": run,
            "agent_id": None, "ts": ts, "streak": 1, "is_failure": True}  # fmt: skip


def test_drops_are_counted_once_whatever_is_loaded_or_forgotten() -> None:
    task = FleetTask(SETTINGS)
    task.feed(0, {"type": "fleet_tick", "ts": 60_000}, 0)
    task.feed(0, contribution("r1", 1_000), 1)  # both its windows closed: late
    counted = task.take_dropped()
    restarted = FleetTask(SETTINGS)
    restarted.load(0, task.dump(0))
    restarted.feed(0, contribution("r1", 1_000), 1)  # read again: the state counts it
    restarted.forget([0])
    assert (counted, restarted.take_dropped(), task.take_dropped()) == ((1, 0), (0, 0), (0, 0))


def test_a_state_kept_with_other_windows_or_unreadable_is_not_loaded() -> None:
    task = FleetTask(SETTINGS)
    task.feed(0, contribution("r1", 1_000), 0)
    other = FleetTask(FleetSettings(enabled=True, window_seconds=20, min_runs=3))
    loaded = [other.load(0, task.dump(0)), other.load(0, b"{"), other.load(0, None)]
    assert (loaded, other.needs(0), FleetTask(SETTINGS).load(0, task.dump(0))) == (
        [False, False, False],
        True,
        True,
    )
