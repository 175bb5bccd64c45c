"""Policy records (config/policy_record.py) and the policy topic's owner refusing bad ones
(streams/worker/policy_follower.py): the bad-input list of docs/policy.md, without a broker."""

from __future__ import annotations

import json

import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.config.policy_record import (
    MAX_POLICY_RECORD_BYTES,
    POLICY_KEY,
    PolicyRecordError,
    effective_changes,
    encode_policy_record,
    read_policy_record,
)
from loopguard_fleet.streams.processing.metrics import Metrics
from loopguard_fleet.streams.worker.policy_follower import PolicySwitches

ON = {"tools": {"loopDetection": {"enabled": True}}}
BAD = {
    "not JSON": (b"{tools:", "policy_not_json", "not JSON"),
    "not UTF-8": (b'{"tools": "\xff"}', "policy_not_json", "not JSON"),
    "too large": (b" " * (MAX_POLICY_RECORD_BYTES + 1), "policy_too_large", "bytes, more than"),
    "unknown key": (
        b'{"loopguard": {"mdoe": "observe"}}',
        "policy_invalid",
        "loopguard: unknown key 'mdoe' (did you mean 'mode'?)",
    ),
    "threshold below 1": (
        b'{"loopguard": {"tools": {"read": {"warningThreshold": 0}}}}',
        "policy_invalid",
        "loopguard.tools.read.warningThreshold: must be a whole number > 0, got 0",
    ),
    "not an object": (b"[1]", "policy_invalid", "must be an object"),
    "empty": (None, "policy_not_json", "an empty record"),
}


def test_a_record_round_trips_to_the_same_policy() -> None:
    document = {**ON, "loopguard": {"mode": "observe", "tools": {"read": {"exempt": True}}}}
    policy = read_policy_record(encode_policy_record(document))
    assert policy.version == load_policy(document).version


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_record_is_refused_with_its_reason(name: str) -> None:
    value, reason, message = BAD[name]
    with pytest.raises(PolicyRecordError) as caught:
        read_policy_record(value)
    assert caught.value.reason == reason
    assert message in str(caught.value)


def test_the_changes_name_each_effective_setting_that_moves() -> None:
    live = load_policy(ON)
    tuned = load_policy(
        {
            "tools": {"loopDetection": {"enabled": True, "criticalThreshold": 12}},
            "agents": {"list": [{"id": "ci", "tools": {"loopDetection": {"enabled": False}}}]},
        }
    )
    changes = effective_changes(live, tuned)
    assert "global.criticalThreshold: 20 → 12" in changes
    assert "agents.ci.enabled: (none) → false" in changes
    assert not [c for c in changes if c.startswith("global.warningThreshold")]
    assert effective_changes(tuned, tuned) == []


def test_the_policy_owner_sends_good_records_as_switches_and_dead_letters_bad_ones() -> None:
    sent: list[dict[str, object]] = []
    letters: list[dict[str, object]] = []
    metrics = Metrics()
    switches = PolicySwitches(
        "loopguard.policy",
        semantics="configurable",
        send=lambda value: sent.append(json.loads(value)),
        dead_letter=lambda key, value: letters.append(json.loads(value)),
        metrics=metrics,
        prefix_bytes=16,
    )
    switches.take(0, encode_policy_record(ON), POLICY_KEY, 1_700_000_000_000)
    for offset, (value, _, _) in enumerate(BAD.values(), 1):
        switches.take(offset, value, POLICY_KEY, 1_700_000_000_000)
    version = load_policy(ON).version
    topic = "loopguard.policy"
    assert sent == [{"type": "policy_switch", "version": version, "policy_topic": topic,
                     "policy_offset": 0, "policy": ON}]  # fmt: skip
    assert [letter["reason"] for letter in letters] == [reason for _, reason, _ in BAD.values()]
    assert letters[0]["topic"] == "loopguard.policy" and letters[0]["offset"] == 1
    value = metrics.registry.get_sample_value
    assert value("loopguard_events_rejected_total", {"reason": "policy_invalid"}) == 3
