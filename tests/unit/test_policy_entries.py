"""Both roster shapes: `agents.list[]` and `agents.entries.<id>` (with `default: true`)."""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.config import PolicyError, load_policy

ENABLED = {"tools": {"loopDetection": {"enabled": True}}}


def _issues(document: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as caught:
        load_policy(document)
    return [(i.path, i.message) for i in caught.value.issues]


def test_an_entries_block_enables_loop_detection_for_its_agent() -> None:
    policy = load_policy({"agents": {"entries": {"safe-runner": {"default": True, **ENABLED}}}})
    assert (
        policy.for_agent("safe-runner").enabled,
        policy.for_agent(None).enabled,
        policy.for_agent("other").enabled,
        policy.default_agent,
        policy.agent_ids(),
    ) == (True, True, False, "safe-runner", ("safe-runner",))


@pytest.mark.parametrize(
    ("key", "run_agent"),
    [
        ("Safe Runner", "safe-runner"),
        ("Safe Runner", "Safe Runner"),
        ("  ops  ", "ops"),
        ("MAIN", "main"),
        ("a.b", "a-b"),
    ],
    ids=["space-and-case", "raw-key", "trimmed", "upper", "dot"],
)
def test_entries_keys_match_runs_after_openclaws_id_normalisation(key: str, run_agent: str) -> None:
    policy = load_policy({"agents": {"entries": {key: ENABLED}}})
    assert policy.for_agent(run_agent).enabled is True


def test_list_ids_stay_exact_and_list_default_marker_is_honoured() -> None:
    policy = load_policy({"agents": {"list": [{"id": "Ops", "default": True, **ENABLED}]}})
    assert (policy.for_agent("Ops").enabled, policy.for_agent("ops").enabled) == (True, False)
    assert policy.for_agent(None).enabled is True


def test_the_agent_block_overlays_the_global_one_in_both_shapes() -> None:
    glob = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 5}}}
    agent = {"tools": {"loopDetection": {"enabled": False}}}
    keyed = load_policy({**glob, "agents": {"entries": {"a": agent}}})
    listed = load_policy({**glob, "agents": {"list": [{"id": "a", **agent}]}})
    assert keyed.for_agent("a") == listed.for_agent("a")
    assert (keyed.for_agent("a").enabled, keyed.for_agent("a").warning_threshold) == (False, 5)
    assert keyed.for_agent("a").post_compaction_guard is False


def test_without_a_marker_runs_without_an_agent_get_the_global_block() -> None:
    policy = load_policy({"agents": {"entries": {"only": ENABLED}}})
    assert (policy.default_agent, policy.for_agent(None).enabled) == (None, False)


def test_effective_all_lists_the_global_block_every_agent_and_the_default() -> None:
    policy = load_policy(
        {
            "tools": {"loopDetection": {"enabled": False}},
            "agents": {"entries": {"a": {"default": True, **ENABLED}, "b": {}, "c": ENABLED}},
        }
    )
    every = policy.effective_all()
    assert (every["semantics"], every["defaultAgent"]) == ("configurable", "a")
    assert every["global"]["enabled"] is False  # type: ignore[index]
    assert {k: v["enabled"] for k, v in every["agents"].items()} == {"a": True, "c": True}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"agents": {"entries": []}},
            [("agents.entries", "must be an object keyed by agent id, got []")],
        ),
        (
            {"agents": {"entries": None}},
            [("agents.entries", "must be an object keyed by agent id, got null")],
        ),
        (
            {"agents": {"entries": {"a": "yes"}}},
            [("agents.entries.a", 'must be an object (an agent entry), got "yes"')],
        ),
        (
            {"agents": {"entries": {"a": {"tools": 3}}}},
            [("agents.entries.a.tools", "must be an object, got 3")],
        ),
        (
            {"agents": {"entries": {"a": {"default": "true"}}}},
            [
                (
                    "agents.entries.a.default",
                    'must be a boolean (true marks the default agent), got "true"',
                )
            ],
        ),
        (
            {"agents": {"entries": {"a": {"default": True}, "b": {"default": True}}}},
            [
                (
                    "agents.entries.b.default",
                    "a second default agent (first: agents.entries.a); mark exactly one",
                )
            ],
        ),
        (
            {"agents": {"ownership": "explicit", "entries": {"a": {"default": True}}}},
            [
                (
                    "agents.entries.a.default",
                    'has no effect under agents.ownership "explicit" (OpenClaw ignores it); '
                    "remove it, or send agent_id with every event",
                )
            ],
        ),
        (
            {"agents": {"entries": {"Ops": ENABLED, "ops": {}}}},
            [
                (
                    "agents.entries.ops",
                    "names the agent 'ops' like agents.entries.Ops (OpenClaw normalises agent "
                    "ids); only the first would apply",
                )
            ],
        ),
        (
            {"agents": {"entries": {"a": {}}, "list": [{"id": "b", **ENABLED}]}},
            [
                (
                    "agents.list",
                    "has loopDetection blocks, but agents.entries is present and OpenClaw then "
                    "ignores agents.list; move them to agents.entries.<id>.tools.loopDetection",
                )
            ],
        ),
        (
            {"agents": {"list": [{"default": True}]}},
            [("agents.list[0].id", "must be a non-empty string naming the agent, got null")],
        ),
    ],
    ids=[
        "entries-array",
        "entries-null",
        "entry-not-object",
        "tools-not-object",
        "default-not-boolean",
        "two-defaults",
        "default-under-explicit-ownership",
        "ids-collide-after-normalisation",
        "list-blocks-shadowed-by-entries",
        "list-default-without-id",
    ],
)
def test_a_roster_it_cannot_place_is_an_error_at_its_path(
    document: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert _issues(document) == expected


def test_an_entries_block_is_validated_strictly_at_its_full_path() -> None:
    issues = _issues(
        {"agents": {"entries": {"a": {"tools": {"loopDetection": {"enabeld": True}}}}}}
    )
    assert issues == [
        (
            "agents.entries.a.tools.loopDetection",
            "unknown key 'enabeld' (did you mean 'enabled'?); valid keys: enabled, historySize, "
            "warningThreshold, criticalThreshold, unknownToolThreshold, "
            "globalCircuitBreakerThreshold, detectors, postCompactionGuard",
        )
    ]


def test_entries_without_loop_detection_keep_other_keys_unread() -> None:
    policy = load_policy({"agents": {"entries": {"a": {"model": 3, "tools": {"profile": 1}}}}})
    assert (policy.agent_ids(), policy.for_agent("a").enabled) == ((), False)
