"""A pushed policy switches the fleet windows live (docs/fleet.md, "Tuning"): each
contribution carries the window settings of the pushed policy it was made under, and a fleet
stage switches at the first record of a later policy, never back."""

from __future__ import annotations

from typing import Any

from loopguard_fleet.config import load_policy
from loopguard_fleet.detectors.fleet import FleetSettings, WindowPolicy
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_lines
from loopguard_fleet.streams.processing.fleet import FleetTask, parse_window_policy
from loopguard_fleet.streams.processing.policy_switch import encode_switch
from tests.unit.test_fleet_replay import FLEET, ON, outage_lines

SETTINGS = FleetSettings(enabled=True, window_seconds=10, min_runs=5)
SIG = "a" * 32


def contribution(run: str, ts: int, windows: WindowPolicy | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "fleet_observation", "signature": SIG, "tool": "read", "run_id": run,
        "agent_id": None, "ts": ts, "streak": 1, "is_failure": True,
    }  # fmt: skip
    if windows is not None:
        record["windows"] = list(windows)
    return record


def feed(task: FleetTask, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The signal changes of feeding the records to partition 0, after what it read."""
    out: list[dict[str, Any]] = []
    for offset, record in enumerate(records, task.offsets.get(0, 0)):
        changes = task.feed(0, record, offset)
        assert changes is not None, record
        out += [d.to_wire() for d in changes]
    return out


def tick(ts: int) -> dict[str, Any]:
    return {"type": "fleet_tick", "ts": ts}


def test_a_lower_min_runs_pushed_fires_on_the_runs_already_counted() -> None:
    three = [contribution(f"r{i}", 1_000 + i) for i in range(3)]
    at_3 = WindowPolicy.of(7, FleetSettings(enabled=True, window_seconds=10, min_runs=3))
    unswitched = feed(FleetTask(SETTINGS), [*three, tick(3_000)])
    switched = feed(FleetTask(SETTINGS), [*three, contribution("r0", 1_500, at_3), tick(3_000)])
    assert unswitched == []  # 3 runs of the 5 the start-up policy needs
    assert [(c["state"], c["runs"]) for c in switched] == [("firing", 3)]


def test_a_longer_window_pushed_keeps_a_firing_signal_until_its_new_windows_go_quiet() -> None:
    fired = [contribution(f"r{i}", 1_000 + i) for i in range(5)] + [tick(3_000)]
    longer = WindowPolicy.of(9, FleetSettings(enabled=True, window_seconds=60, min_runs=5))
    unswitched, task = FleetTask(SETTINGS), FleetTask(SETTINGS)
    [firing] = feed(task, fired)
    feed(unswitched, fired)
    # The 10-second windows resolve it by 25 s. Switched at 3 s to 60-second windows, it is
    # held as if it met minRuns in the window that holds the switch, and resolves when the
    # next one (30-90 s) closes without it.
    quiet = [contribution("r9", 2_500), tick(25_000)]
    resolved_early = feed(unswitched, quiet)
    held = feed(task, [contribution("r9", 2_500, longer), tick(25_000)])
    after = feed(task, [tick(95_000)])
    assert [c["state"] for c in resolved_early] == ["resolved"] and held == []
    assert [(c["state"], c["signal_id"], c["at_ms"]) for c in after] == [
        ("resolved", firing["signal_id"], 90_000)
    ]
    assert after[0]["window"]["end_ms"] - after[0]["window"]["start_ms"] == 60_000


def test_a_stage_never_switches_back_to_an_earlier_policy() -> None:
    three = [contribution(f"r{i}", 1_000 + i) for i in range(3)]
    at_3 = WindowPolicy.of(7, FleetSettings(enabled=True, window_seconds=10, min_runs=3))
    at_9 = WindowPolicy.of(4, FleetSettings(enabled=True, window_seconds=10, min_runs=9))
    # A lagging worker's record made under the earlier policy (offset 4) after the later one.
    out = feed(FleetTask(SETTINGS), [*three, contribution("r0", 1_500, at_3),
                                      contribution("r1", 1_600, at_9), tick(3_000)])  # fmt: skip
    assert [c["state"] for c in out] == ["firing"]


def test_a_switched_stage_stored_and_loaded_decides_as_one_that_never_stopped() -> None:
    at_3 = WindowPolicy.of(7, FleetSettings(enabled=True, window_seconds=4, min_runs=3))
    first = [contribution("r0", 1_000, at_3), contribution("r1", 1_100), tick(1_500)]
    rest = [contribution("r2", 1_200), tick(3_000), tick(30_000)]
    whole = FleetTask(SETTINGS)
    expected = feed(whole, first) + feed(whole, rest)
    stopped = FleetTask(SETTINGS)
    feed(stopped, first)
    restarted = FleetTask(SETTINGS)
    assert restarted.load(0, stopped.dump(0))
    got = feed(restarted, rest)
    assert [c["state"] for c in expected] == ["firing", "resolved"] and got == expected


def test_malformed_window_settings_make_a_record_malformed() -> None:
    ok = list(WindowPolicy.of(3, SETTINGS))
    assert parse_window_policy(ok) == WindowPolicy(3, 10, 5, 10, 0.5)
    assert parse_window_policy(None) is None
    for bad in ([3, 10, 5], [3, 0, 5, 10, 0.5], [3, 10, 1, 10, 0.5], [3, 10, 5, 10, 0], "x"):
        assert parse_window_policy(bad) is False
        assert FleetTask(SETTINGS).feed(0, {**contribution("r0", 1), "windows": bad}, 0) is None


def _signals(out: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(d["state"], d["at_ms"]) for d in out if d["type"] == "fleet_signal"]


def test_a_pushed_policy_switches_the_windows_in_a_replay() -> None:
    # The outage of test_fleet_replay.py: minRuns 3 fires it; pushed minRuns 6 fires it later.
    start = {"tools": ON, "loopguard": {"fleet": FLEET}}
    six = {"tools": ON, "loopguard": {"fleet": {**FLEET, "minRuns": 6}}}

    def run(pushed: dict[str, Any] | None) -> list[dict[str, Any]]:
        lines = outage_lines()
        if pushed is not None:
            lines = [encode_switch(load_policy(pushed).version, pushed, "p", 0), *lines]
        out = list(replay_lines(Replayer(load_policy(start)), lines))
        return [d.to_wire() for d in out if not isinstance(d, Rejected)]

    as_started, as_pushed, started_with_six = run(None), run(six), _signals(run_started(six))
    assert _signals(as_started)[0][1] < _signals(as_pushed)[0][1]
    assert _signals(as_pushed) == started_with_six


def run_started(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The outage replayed by a replayer started with `policy`."""
    out = list(replay_lines(Replayer(load_policy(policy)), outage_lines()))
    return [d.to_wire() for d in out if not isinstance(d, Rejected)]
