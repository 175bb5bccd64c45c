"""The loop-detection policy (docs/semantics.md §2): loading, validation, overlay, resolution."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import json5
import pytest

from loopguard_fleet import config
from loopguard_fleet.config import Policy, PolicyError, PolicyIssue, load_policy
from loopguard_fleet.detectors.values import Thresholds

POLICIES = Path(__file__).resolve().parent.parent / "data" / "policies"
BLOCK = "tools.loopDetection"
WARN_ORDER = "tools.loopDetection.warningThreshold must be lower than criticalThreshold."
CRIT_ORDER = (
    "tools.loopDetection.criticalThreshold must be lower than globalCircuitBreakerThreshold."
)
BLOCK_KEYS = (
    "enabled, historySize, warningThreshold, criticalThreshold, unknownToolThreshold,"
    " globalCircuitBreakerThreshold, detectors, postCompactionGuard"
)
DETECTOR_KEYS = "genericRepeat, knownPollNoProgress, pingPong"
DEFAULT = Thresholds()


def th(**changes: object) -> Thresholds:
    """The default thresholds with some values changed."""
    return dataclasses.replace(DEFAULT, **changes)  # type: ignore[arg-type]  # test shorthand


def doc(global_block: object = None, **agents: object) -> dict[str, object]:
    """An openclaw.json document with an optional global block and agent blocks by id."""
    document: dict[str, object] = {}
    if global_block is not None:
        document["tools"] = {"loopDetection": global_block}
    if agents:
        entries = [
            {"id": agent_id, "tools": {"loopDetection": b}} for agent_id, b in agents.items()
        ]
        document["agents"] = {"list": entries}
    return document


def issues_of(document: object) -> list[tuple[str, str]]:
    """The (path, message) pairs a document is rejected with."""
    with pytest.raises(PolicyError) as caught:
        load_policy(document)  # type: ignore[arg-type]  # invalid documents on purpose
    return [(issue.path, issue.message) for issue in caught.value.issues]


# --- overlay and resolution -------------------------------------------------------------------

OVERLAY = [
    pytest.param({}, "a", DEFAULT, id="no blocks at all resolve to the defaults"),
    pytest.param(
        doc({"enabled": True, "historySize": 50}),
        "a",
        th(enabled=True, history_size=50),
        id="no agent block means the global block",
    ),
    pytest.param(
        doc({"enabled": True, "warningThreshold": 5}, a={}),
        "a",
        th(enabled=True, warning_threshold=5),
        id="an empty agent block means the global block",
    ),
    pytest.param(
        doc(a={"enabled": True, "unknownToolThreshold": 4}),
        "a",
        th(enabled=True, unknown_tool_threshold=4),
        id="no global block means the agent block",
    ),
    pytest.param(
        doc({"enabled": True, "historySize": 50, "warningThreshold": 5}, a={"historySize": 20}),
        "a",
        th(enabled=True, history_size=20, warning_threshold=5),
        id="both blocks put every agent key on top of the global keys",
    ),
    pytest.param(
        doc({"detectors": {"genericRepeat": False}}, a={"detectors": {"pingPong": False}}),
        "a",
        th(generic_repeat=False, ping_pong=False),
        id="detectors merge one level down",
    ),
    pytest.param(
        doc({"detectors": {"pingPong": False}}, a={"detectors": {"pingPong": True}}),
        "a",
        DEFAULT,
        id="an agent detector flag overrides the global one",
    ),
    pytest.param(
        doc({"postCompactionGuard": {"windowSize": 5}}, a={"postCompactionGuard": {}}),
        "a",
        th(post_compaction_window_size=5),
        id="an empty postCompactionGuard keeps the global window",
    ),
    pytest.param(
        doc(
            {"postCompactionGuard": {"windowSize": 5}}, a={"postCompactionGuard": {"windowSize": 2}}
        ),
        "a",
        th(post_compaction_window_size=2),
        id="an agent window overrides the global window",
    ),
    pytest.param(
        doc({"enabled": True}, a={"enabled": False}),
        "a",
        th(enabled=False, post_compaction_guard=False),
        id="an agent can switch off what the global block enabled",
    ),
    pytest.param(
        doc({"enabled": False}, a={"enabled": True}, b={}),
        "b",
        th(enabled=False, post_compaction_guard=False),
        id="another agent's block never applies",
    ),
    pytest.param(
        doc({"historySize": 50}, a={"historySize": 20}),
        None,
        th(history_size=50),
        id="no agent id means the global block",
    ),
    pytest.param(
        doc({"historySize": 50}, a={"historySize": 20}),
        "nobody",
        th(history_size=50),
        id="an unknown agent id means the global block",
    ),
    pytest.param(
        doc({"historySize": 50}, a={"historySize": 20}),
        "A",
        th(history_size=50),
        id="agent ids match exactly",
    ),
]


@pytest.mark.parametrize(("document", "agent", "expected"), OVERLAY)
def test_the_agent_block_overlays_the_global_block(
    document: dict[str, object], agent: str | None, expected: Thresholds
) -> None:
    assert load_policy(document).for_agent(agent) == expected


GUARD = [
    pytest.param(
        {}, th(enabled=False, post_compaction_guard=True), id="unset: guard on, detectors off"
    ),
    pytest.param(
        {"enabled": True}, th(enabled=True, post_compaction_guard=True), id="true: both on"
    ),
    pytest.param(
        {"enabled": False}, th(enabled=False, post_compaction_guard=False), id="false: both off"
    ),
]


@pytest.mark.parametrize(("block", "expected"), GUARD)
def test_the_guard_is_on_unless_enabled_is_exactly_false(
    block: dict[str, object], expected: Thresholds
) -> None:
    assert load_policy(doc(block)).for_agent(None) == expected


CLAMPS = [
    pytest.param(
        doc({"warningThreshold": 30}),
        None,
        th(warning_threshold=30, critical_threshold=31, global_circuit_breaker_threshold=32),
        id="warning 30 alone resolves to 30/31/32",
    ),
    pytest.param(
        doc({"criticalThreshold": 5}),
        None,
        th(critical_threshold=11),
        id="a critical at or below the default warning becomes warning + 1",
    ),
    pytest.param(
        doc({"globalCircuitBreakerThreshold": 15}),
        None,
        th(global_circuit_breaker_threshold=21),
        id="a global breaker at or below critical becomes critical + 1",
    ),
    pytest.param(
        doc({"warningThreshold": 5, "criticalThreshold": 8}, a={"warningThreshold": 12}),
        "a",
        th(warning_threshold=12, critical_threshold=13),
        id="an overlay that puts critical below warning is clamped, not rejected",
    ),
    pytest.param(
        doc({"globalCircuitBreakerThreshold": 22}, a={"criticalThreshold": 25}),
        "a",
        th(critical_threshold=25, global_circuit_breaker_threshold=26),
        id="an overlay that puts the breaker below critical is clamped",
    ),
    pytest.param(
        doc({"warningThreshold": 40, "globalCircuitBreakerThreshold": 30}),
        None,
        th(warning_threshold=40, critical_threshold=41, global_circuit_breaker_threshold=42),
        id="warning is never compared with global, and the clamps cascade",
    ),
    pytest.param(
        doc({"warningThreshold": 10.0, "historySize": 1e3, "unknownToolThreshold": 0x10}),
        None,
        th(history_size=1000, unknown_tool_threshold=16),
        id="whole floats and hex are numbers",
    ),
]


@pytest.mark.parametrize(("document", "agent", "expected"), CLAMPS)
def test_resolution_clamps_critical_then_the_breaker(
    document: dict[str, object], agent: str | None, expected: Thresholds
) -> None:
    assert load_policy(document).for_agent(agent) == expected


def test_the_default_policy_has_every_default_with_the_detectors_off() -> None:
    policy = Policy.default()
    assert (policy.for_agent(None), policy.for_agent("main"), policy.agent_ids()) == (
        DEFAULT,
        DEFAULT,
        (),
    )
    assert DEFAULT.enabled is False


def test_effective_prints_the_resolved_block_in_openclaw_key_names() -> None:
    policy = load_policy(doc({"warningThreshold": 30, "detectors": {"pingPong": False}}))
    assert policy.effective(None) == {
        "mode": "enforce",
        "enabled": False,
        "historySize": 30,
        "warningThreshold": 30,
        "criticalThreshold": 31,
        "unknownToolThreshold": 10,
        "globalCircuitBreakerThreshold": 32,
        "detectors": {"genericRepeat": True, "knownPollNoProgress": True, "pingPong": False},
        "postCompactionGuard": {"enabled": True, "windowSize": 3},
    }


def test_for_agent_returns_the_same_resolved_thresholds_every_time() -> None:
    policy = load_policy(doc({"enabled": True}, a={"historySize": 5}))
    assert policy.for_agent("a") is policy.for_agent("a")
    assert policy.for_agent("zz") is policy.for_agent(None)


def test_a_policy_is_immutable() -> None:
    policy = load_policy(doc({"enabled": True}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.global_block = None  # type: ignore[misc]  # the point of the test


def test_channel_tools_are_carried_into_every_resolved_thresholds() -> None:
    policy = load_policy(doc({"enabled": True}, a={})).with_channel_tools(["telegram", "slack"])
    expected = th(enabled=True, channel_tools=frozenset({"telegram", "slack"}))
    assert (policy.for_agent(None), policy.for_agent("a")) == (expected, expected)


# --- the file ---------------------------------------------------------------------------------


def test_a_whole_openclaw_json5_file_loads_with_comments_trailing_commas_and_bare_keys() -> None:
    policy = load_policy(POLICIES / "openclaw.json5")
    base = th(
        enabled=True,
        history_size=40,
        warning_threshold=8,
        critical_threshold=16,
        ping_pong=False,
        post_compaction_window_size=4,
    )
    resolved = {
        agent: policy.for_agent(agent) for agent in (None, "main", "poller", "quiet", "inherits")
    }
    assert resolved == {
        None: base,
        "main": base,
        "poller": dataclasses.replace(
            base, warning_threshold=20, critical_threshold=21, known_poll_no_progress=False
        ),
        "quiet": dataclasses.replace(base, enabled=False, post_compaction_guard=False),
        "inherits": base,
    }
    assert policy.agent_ids() == ("poller", "quiet", "inherits")


def test_a_path_given_as_str_or_path_or_a_parsed_dict_gives_the_same_policy() -> None:
    path = POLICIES / "openclaw.json5"
    parsed = json5.loads(path.read_text(encoding="utf-8"))
    assert load_policy(str(path)) == load_policy(path) == load_policy(parsed)


def test_an_invalid_file_lists_every_error_of_every_block() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(POLICIES / "invalid.json5")
    assert str(caught.value).splitlines() == [
        'tools.loopDetection.enabled: must be a boolean (true/false), got "yes"',
        "tools.loopDetection.detectors: unknown key 'pingpong' (did you mean 'pingPong'?);"
        f" valid keys: {DETECTOR_KEYS}",
        f"tools.loopDetection.criticalThreshold: {WARN_ORDER}",
        "agents.list[1].tools.loopDetection.historySize: must be a whole number > 0, got 0",
        f"agents.list[2].tools.loopDetection.globalCircuitBreakerThreshold: {CRIT_ORDER}",
    ]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param(
            "missing.json5",
            "cannot read the policy file: No such file or directory",
            id="a missing file",
        ),
        pytest.param(
            "syntax_error.json5",
            "not valid JSON5: line 6: Unexpected end of input at column 1",
            id="a file that is not JSON5",
        ),
    ],
)
def test_a_file_that_cannot_be_read_is_one_issue_at_its_path(name: str, message: str) -> None:
    path = str(POLICIES / name)
    assert issues_of(path) == [(path, message)]


def test_a_file_that_is_not_utf8_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json5"
    path.write_bytes(b"{tools: {loopDetection: {enabled: true}}} // caf\xe9 au lait")
    message = "not UTF-8 text: invalid continuation byte at byte 48"
    assert issues_of(str(path)) == [(str(path), message)]


def test_a_file_whose_root_is_not_an_object_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "list.json5"
    path.write_text("[{tools: {}}]", encoding="utf-8")
    assert issues_of(path) == [
        ("", 'must be an object (openclaw.json\'s root), got [{"tools": {}}]')
    ]


# --- validation -------------------------------------------------------------------------------

WHOLE = "must be a whole number > 0, got"
FLAG = "must be a boolean (true/false), got"
VALIDATION = [
    pytest.param(
        doc({"foo": 1}),
        [(BLOCK, f"unknown key 'foo'; valid keys: {BLOCK_KEYS}")],
        id="an unknown key in a block is an error at the block",
    ),
    pytest.param(
        doc({"warnThreshold": 1}),
        [
            (
                BLOCK,
                "unknown key 'warnThreshold' (did you mean 'warningThreshold'?);"
                f" valid keys: {BLOCK_KEYS}",
            )
        ],
        id="a misspelt key gets a suggestion",
    ),
    pytest.param(
        doc({"detectors": {"loops": True}}),
        [(f"{BLOCK}.detectors", f"unknown key 'loops'; valid keys: {DETECTOR_KEYS}")],
        id="an unknown key in detectors is an error at detectors",
    ),
    pytest.param(
        doc({"postCompactionGuard": {"enabled": True}}),
        [(f"{BLOCK}.postCompactionGuard", "unknown key 'enabled'; valid keys: windowSize")],
        id="postCompactionGuard takes only windowSize",
    ),
    pytest.param(
        doc({"historySize": True}),
        [(f"{BLOCK}.historySize", f"{WHOLE} true (a boolean is never a number)")],
        id="a boolean is never a number",
    ),
    pytest.param(
        doc({"historySize": 10.5}), [(f"{BLOCK}.historySize", f"{WHOLE} 10.5")], id="a fraction"
    ),
    pytest.param(
        doc({"warningThreshold": 0}), [(f"{BLOCK}.warningThreshold", f"{WHOLE} 0")], id="zero"
    ),
    pytest.param(
        doc({"criticalThreshold": -3}),
        [(f"{BLOCK}.criticalThreshold", f"{WHOLE} -3")],
        id="negative",
    ),
    pytest.param(
        doc({"unknownToolThreshold": "10"}),
        [(f"{BLOCK}.unknownToolThreshold", f'{WHOLE} "10" (a string; write 10 without quotes)')],
        id="a number in a string",
    ),
    pytest.param(
        doc({"historySize": "lots"}),
        [(f"{BLOCK}.historySize", f'{WHOLE} "lots"')],
        id="a word",
    ),
    pytest.param(
        doc({"historySize": float("inf"), "warningThreshold": float("nan")}),
        [
            (f"{BLOCK}.historySize", f"{WHOLE} Infinity"),
            (f"{BLOCK}.warningThreshold", f"{WHOLE} NaN"),
        ],
        id="Infinity and NaN",
    ),
    pytest.param(
        doc({"historySize": None}),
        [
            (
                f"{BLOCK}.historySize",
                f"{WHOLE} null (leave the key out to inherit or use the default)",
            )
        ],
        id="null is not unset",
    ),
    pytest.param(
        doc({"postCompactionGuard": {"windowSize": 0}}),
        [(f"{BLOCK}.postCompactionGuard.windowSize", f"{WHOLE} 0")],
        id="the guard window is a number too",
    ),
    pytest.param(doc({"enabled": 1}), [(f"{BLOCK}.enabled", f"{FLAG} 1")], id="a flag given as 1"),
    pytest.param(
        doc({"detectors": {"pingPong": "false"}}),
        [(f"{BLOCK}.detectors.pingPong", f'{FLAG} "false" (a string; write false without quotes)')],
        id="a flag given as a string",
    ),
    pytest.param(
        doc({"detectors": [True]}),
        [(f"{BLOCK}.detectors", f"must be an object (keys: {DETECTOR_KEYS}), got [true]")],
        id="detectors that are not an object",
    ),
    pytest.param(
        doc({"postCompactionGuard": None}),
        [
            (
                f"{BLOCK}.postCompactionGuard",
                "must be an object (keys: windowSize), got null"
                " (leave the key out to inherit or use the default)",
            )
        ],
        id="a null postCompactionGuard",
    ),
    pytest.param(
        doc({"warningThreshold": 20, "criticalThreshold": 20}),
        [(f"{BLOCK}.criticalThreshold", WARN_ORDER)],
        id="warning equal to critical in the global block",
    ),
    pytest.param(
        doc({"criticalThreshold": 30.0, "globalCircuitBreakerThreshold": 30}),
        [(f"{BLOCK}.globalCircuitBreakerThreshold", CRIT_ORDER)],
        id="critical equal to the breaker in the global block",
    ),
    pytest.param(
        doc({"warningThreshold": 30, "criticalThreshold": 20, "globalCircuitBreakerThreshold": 10}),
        [
            (f"{BLOCK}.criticalThreshold", WARN_ORDER),
            (f"{BLOCK}.globalCircuitBreakerThreshold", CRIT_ORDER),
        ],
        id="both ordering errors in one block",
    ),
    pytest.param(
        doc(a={"warningThreshold": 9, "criticalThreshold": 3}),
        [(f"agents.list[0].{BLOCK}.criticalThreshold", WARN_ORDER)],
        id="an ordering error in an agent block keeps the literal text at the agent's path",
    ),
    pytest.param(
        doc({"warningThreshold": 20, "criticalThreshold": 10.5}),
        [(f"{BLOCK}.criticalThreshold", f"{WHOLE} 10.5")],
        id="no ordering check against an invalid value",
    ),
    pytest.param(
        doc({"warningThreshold": 20, "foo": 1, "criticalThreshold": 5}),
        [
            (BLOCK, f"unknown key 'foo'; valid keys: {BLOCK_KEYS}"),
            (f"{BLOCK}.criticalThreshold", WARN_ORDER),
        ],
        id="ordering is checked even when another key fails",
    ),
    pytest.param(
        doc({"enabled": "on"}, a={"historySize": 0}, b={"detectors": {"x": True}}),
        [
            (f"{BLOCK}.enabled", f'{FLAG} "on"'),
            (f"agents.list[0].{BLOCK}.historySize", f"{WHOLE} 0"),
            (f"agents.list[1].{BLOCK}.detectors", f"unknown key 'x'; valid keys: {DETECTOR_KEYS}"),
        ],
        id="errors of every block are listed together",
    ),
]


@pytest.mark.parametrize(("document", "expected"), VALIDATION)
def test_validation_reports_every_issue_at_its_full_path(
    document: dict[str, object], expected: list[tuple[str, str]]
) -> None:
    assert issues_of(document) == expected


SHAPE = [
    pytest.param(
        {"tools": []}, [("tools", "must be an object, got []")], id="tools that is not an object"
    ),
    pytest.param(
        {"tools": {"loopDetection": True}},
        [(BLOCK, f"must be an object (keys: {BLOCK_KEYS}), got true")],
        id="a block that is not an object",
    ),
    pytest.param(
        {"agents": "all"},
        [("agents", 'must be an object, got "all"')],
        id="agents that is not an object",
    ),
    pytest.param(
        {"agents": {"list": {"id": "a"}}},
        [("agents.list", 'must be an array, got {"id": "a"}')],
        id="agents.list that is not an array",
    ),
    pytest.param(
        {"agents": {"list": [{"id": "a"}, "b"]}},
        [("agents.list[1]", 'must be an object (an agent entry), got "b"')],
        id="an agent entry that is not an object",
    ),
    pytest.param(
        {"agents": {"list": [{"id": "a", "tools": 3}]}},
        [("agents.list[0].tools", "must be an object, got 3")],
        id="an agent's tools that is not an object",
    ),
    pytest.param(
        {"agents": {"list": [{"tools": {"loopDetection": {}}}]}},
        [("agents.list[0].id", "must be a non-empty string naming the agent, got null")],
        id="an agent block without an id",
    ),
    pytest.param(
        {"agents": {"list": [{"id": "", "tools": {"loopDetection": {"historySize": 0}}}]}},
        [
            ("agents.list[0].id", 'must be a non-empty string naming the agent, got ""'),
            (f"agents.list[0].{BLOCK}.historySize", f"{WHOLE} 0"),
        ],
        id="an agent block with an empty id is still validated",
    ),
    pytest.param(
        {"agents": {"list": [{"id": "a"}, {"id": "a", "tools": {"loopDetection": {}}}]}},
        [
            (
                "agents.list[1].id",
                "duplicate agent id 'a' (first at agents.list[0]);"
                " ids must be unique when an entry has a loopDetection block",
            )
        ],
        id="an agent block hidden behind an earlier entry with the same id",
    ),
]


@pytest.mark.parametrize(("document", "expected"), SHAPE)
def test_the_path_to_each_block_must_have_the_openclaw_shape(
    document: object, expected: list[tuple[str, str]]
) -> None:
    assert issues_of(document) == expected


def test_other_keys_of_the_file_and_entries_without_a_block_are_ignored() -> None:
    document = {
        "tools": {"profile": 5, "exec": [1]},
        "agents": {"defaults": 1, "list": [{"id": 3}, {"name": "x"}, {"id": "a"}, {"id": "a"}]},
        "gateway": None,
    }
    assert load_policy(document).for_agent("a") == DEFAULT


def test_str_of_a_policy_error_lists_each_issue_on_its_own_line() -> None:
    error = PolicyError([PolicyIssue("a.b", "first"), PolicyIssue("", "second")])
    assert str(error) == "a.b: first\nsecond"


def test_a_pickled_policy_error_keeps_its_issues() -> None:
    error = PolicyError([PolicyIssue("a.b", "first")])
    restored = pickle.loads(pickle.dumps(error))
    assert (restored.issues, str(restored)) == (error.issues, str(error))


# --- public surface ---------------------------------------------------------------------------


def test_the_policy_module_exports_exactly_its_public_names() -> None:
    assert sorted(config.policy.__all__) == [
        "DETECTION_ON",
        "DETECTION_ON_TEXT",
        "Policy",
        "PolicyError",
        "PolicyIssue",
        "load_policy",
        "read_policy_document",
    ]


def test_the_config_package_re_exports_the_policy_names() -> None:
    assert set(config.policy.__all__) <= set(config.__all__)
    assert all(hasattr(config, name) for name in config.__all__)
