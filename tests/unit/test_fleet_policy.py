"""`loopguard.fleet` (docs/fleet.md, "Tuning"): defaults, strict validation, policy check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopguard_fleet.config import PolicyError, load_policy
from loopguard_fleet.config.defaults import fleet_topic_of
from loopguard_fleet.config.policy_json_schema import policy_schema
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.fleet import FleetSettings
from loopguard_fleet.detectors.fleet.settings import ToolHealthSettings
from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.worker.run import worker_topics

FLEET_KEYS = "enabled, windowSeconds, minRuns, earlyAction, earlyAtCount, toolHealth"
TOOL_HEALTH_KEYS = "enabled, errorRatio, minRuns"
TOOL_HEALTH = {"enabled": False, "errorRatio": 0.5, "minRuns": 10}


def fleet(block: object) -> dict[str, object]:
    """A policy document with detection on and this `loopguard.fleet` block."""
    return {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"fleet": block}}


def issues(document: dict[str, object]) -> list[tuple[str, str]]:
    """Every (path, message) the loader reports for a document."""
    with pytest.raises(PolicyError) as caught:
        load_policy(document)
    return [(issue.path, issue.message) for issue in caught.value.issues]


def test_without_the_block_fleet_signals_are_off_with_the_documented_defaults() -> None:
    for document in ({}, {"loopguard": {}}, fleet({})):
        assert load_policy(document).fleet == FleetSettings()
    assert FleetSettings().to_doc() == {
        "enabled": False,
        "windowSeconds": 300,
        "minRuns": 5,
        "earlyAction": "warn",
        "earlyAtCount": 3,
        "toolHealth": TOOL_HEALTH,
    }


def test_every_key_is_read() -> None:
    block = {
        "enabled": True,
        "windowSeconds": 60,
        "minRuns": 20,
        "earlyAction": "block",
        "earlyAtCount": 2.0,
    }
    got = load_policy(fleet(block)).fleet
    assert got == FleetSettings(True, 60, 20, "block", 2)
    health = {"enabled": True, "errorRatio": 1, "minRuns": 3.0}
    got = load_policy(fleet({"toolHealth": health})).fleet.tool_health
    assert got == ToolHealthSettings(True, 1.0, 3)


@pytest.mark.parametrize(
    ("block", "path", "message"),
    [
        (None, "loopguard.fleet", f"must be an object (keys: {FLEET_KEYS}), got null"),
        ([], "loopguard.fleet", f"must be an object (keys: {FLEET_KEYS}), got []"),
        (
            {"windowSecs": 60},
            "loopguard.fleet",
            f"unknown key 'windowSecs' (did you mean 'windowSeconds'?); valid keys: {FLEET_KEYS}",
        ),
        (
            {"enabled": "yes"},
            "loopguard.fleet.enabled",
            'must be a boolean (true/false), got "yes"',
        ),
        (
            {"enabled": "true"},
            "loopguard.fleet.enabled",
            'must be a boolean (true/false), got "true" (a string; write true without quotes)',
        ),
        (
            {"windowSeconds": 0},
            "loopguard.fleet.windowSeconds",
            "must be a whole number from 1 to 3600, got 0",
        ),
        (
            {"windowSeconds": 3601},
            "loopguard.fleet.windowSeconds",
            "must be a whole number from 1 to 3600, got 3601",
        ),
        (
            {"windowSeconds": "60"},
            "loopguard.fleet.windowSeconds",
            'must be a whole number from 1 to 3600, got "60" (a string; write 60 without quotes)',
        ),
        (
            {"windowSeconds": "6000"},
            "loopguard.fleet.windowSeconds",
            'must be a whole number from 1 to 3600, got "6000"',
        ),
        ({"minRuns": 1}, "loopguard.fleet.minRuns", "must be a whole number ≥ 2, got 1"),
        (
            {"minRuns": True},
            "loopguard.fleet.minRuns",
            "must be a whole number ≥ 2, got true (a boolean is never a number)",
        ),
        (
            {"minRuns": None},
            "loopguard.fleet.minRuns",
            "must be a whole number ≥ 2, got null (leave the key out",
        ),
        (
            {"earlyAction": "abort"},
            "loopguard.fleet.earlyAction",
            'must be "warn" or "block", got "abort"',
        ),
        ({"earlyAction": None}, "loopguard.fleet.earlyAction", 'must be "warn" or "block", got'),
        (
            {"earlyAtCount": 2.5},
            "loopguard.fleet.earlyAtCount",
            "must be a whole number > 0, got 2.5",
        ),
        (
            {"toolHealth": None},
            "loopguard.fleet.toolHealth",
            f"must be an object (keys: {TOOL_HEALTH_KEYS}), got null",
        ),
        (
            {"toolHealth": {"ratio": 0.5}},
            "loopguard.fleet.toolHealth",
            "unknown key 'ratio'",
        ),
        (
            {"toolHealth": {"errorRatio": 0}},
            "loopguard.fleet.toolHealth.errorRatio",
            "must be a number above 0 and at most 1, got 0",
        ),
        (
            {"toolHealth": {"errorRatio": 1.5}},
            "loopguard.fleet.toolHealth.errorRatio",
            "must be a number above 0 and at most 1, got 1.5",
        ),
        (
            {"toolHealth": {"errorRatio": True}},
            "loopguard.fleet.toolHealth.errorRatio",
            "must be a number above 0 and at most 1, got true (a boolean is never a number)",
        ),
        (
            {"toolHealth": {"minRuns": 1}},
            "loopguard.fleet.toolHealth.minRuns",
            "must be a whole number ≥ 2, got 1",
        ),
        (
            {"toolHealth": {"enabled": None}},
            "loopguard.fleet.toolHealth.enabled",
            "must be a boolean (true/false), got null",
        ),
    ],
)
def test_a_bad_fleet_block_is_an_error_at_its_path(block: object, path: str, message: str) -> None:
    found = issues(fleet(block))
    assert [p for p, _ in found] == [path]
    assert found[0][1].startswith(message)


def test_every_bad_key_of_the_block_is_reported_at_once() -> None:
    found = issues(fleet({"windowSeconds": 0, "earlyAction": "stop", "minRuns": 1}))
    assert [p for p, _ in found] == [
        "loopguard.fleet.earlyAction",
        "loopguard.fleet.minRuns",
        "loopguard.fleet.windowSeconds",
    ]


def test_the_fleet_settings_are_part_of_the_policy_version() -> None:
    plain = load_policy(fleet({}))
    assert load_policy(fleet({"minRuns": 5, "enabled": False})).version == plain.version
    assert load_policy(fleet({"enabled": True})).version != plain.version
    assert load_policy(fleet({"earlyAtCount": 4})).version != plain.version
    # Tool health at its defaults keeps the version of a policy that never names it.
    assert load_policy(fleet({"toolHealth": {"minRuns": 10}})).version == plain.version
    assert load_policy(fleet({"toolHealth": {"enabled": True}})).version != plain.version


def test_policy_check_prints_the_resolved_fleet_block(tmp_path: Path, capsys) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(fleet({"enabled": True, "earlyAction": "block"})))
    assert main(["policy", "check", str(path)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fleet"] == {
        "enabled": True,
        "windowSeconds": 300,
        "minRuns": 5,
        "earlyAction": "block",
        "earlyAtCount": 3,
        "toolHealth": TOOL_HEALTH,
    }
    assert printed["version"] == load_policy(path).version


def test_policy_check_reports_a_bad_fleet_key_with_its_path(tmp_path: Path, capsys) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(fleet({"earlyAction": "blok"})))
    assert main(["policy", "check", str(path)]) != 0
    assert 'loopguard.fleet.earlyAction: must be "warn" or "block", got "blok"' in (
        capsys.readouterr().err
    )


def test_the_published_schema_describes_the_fleet_block() -> None:
    schema = json.dumps(policy_schema())
    for key in [*FLEET_KEYS.split(", "), *TOOL_HEALTH_KEYS.split(", ")]:
        assert f'"{key}"' in schema
    assert '"exclusiveMinimum": 0' in schema
    assert '"enum": ["warn", "block"]' in schema


def test_the_worker_creates_its_fleet_topic_when_the_policy_it_starts_with_enables_fleet(
    tmp_path: Path,
) -> None:
    """The policy topic's version decides (run_worker creates the topic with it too), not
    only the file's: a worker whose file has fleet signals off but whose policy topic turned
    them on runs the fleet task, so it needs the topic."""
    settings = Settings(data_dir=tmp_path, app_id="lg")
    off, on = load_policy(fleet({"enabled": False})), load_policy(fleet({"enabled": True}))
    fleet_topic = fleet_topic_of("lg")
    assert (
        fleet_topic in worker_topics(settings, off),
        fleet_topic in worker_topics(settings, on),
    ) == (
        False,
        True,
    )
