"""Laws of the policy: valid blocks resolve to ordered, positive thresholds, deterministically."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopguard_fleet.config import PolicyError, load_policy

NUMBER_KEYS = (
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
)
whole = st.integers(min_value=1, max_value=10_000)
whole_or_float = whole | whole.map(float)  # 10.0 counts as whole
flags = st.fixed_dictionaries(
    {},
    optional={
        "genericRepeat": st.booleans(),
        "knownPollNoProgress": st.booleans(),
        "pingPong": st.booleans(),
    },
)
guard = st.fixed_dictionaries({}, optional={"windowSize": whole_or_float})


@st.composite
def valid_blocks(draw: st.DrawFn) -> dict[str, object]:
    """A block that passes validation: ordered pairs when both values of a pair are present."""
    block: dict[str, object] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                **dict.fromkeys(NUMBER_KEYS, whole_or_float),
                "detectors": flags,
                "postCompactionGuard": guard,
            },
        )
    )
    warning, critical, breaker = (
        block.get(key)
        for key in ("warningThreshold", "criticalThreshold", "globalCircuitBreakerThreshold")
    )
    if (
        isinstance(warning, int | float)
        and isinstance(critical, int | float)
        and warning >= critical
    ):
        del block["warningThreshold"]
    if (
        isinstance(critical, int | float)
        and isinstance(breaker, int | float)
        and critical >= breaker
    ):
        del block["globalCircuitBreakerThreshold"]
    return block


def document(
    global_block: dict[str, object] | None, agent_block: dict[str, object] | None
) -> dict[str, object]:
    """An openclaw.json with the given blocks; the agent is `a`."""
    doc: dict[str, object] = {}
    if global_block is not None:
        doc["tools"] = {"loopDetection": global_block}
    if agent_block is not None:
        doc["agents"] = {"list": [{"id": "a", "tools": {"loopDetection": agent_block}}]}
    return doc


maybe_block = st.none() | valid_blocks()


@given(maybe_block, maybe_block, st.sampled_from(["a", "b", None]))
def test_any_valid_blocks_resolve_to_positive_ordered_thresholds(
    global_block: dict[str, object] | None, agent_block: dict[str, object] | None, agent: str | None
) -> None:
    th = load_policy(document(global_block, agent_block)).for_agent(agent)
    assert 0 < th.warning_threshold < th.critical_threshold < th.global_circuit_breaker_threshold
    assert min(th.history_size, th.unknown_tool_threshold, th.post_compaction_window_size) > 0


@given(maybe_block, maybe_block, st.sampled_from(["a", "b", None]))
def test_for_agent_is_deterministic(
    global_block: dict[str, object] | None, agent_block: dict[str, object] | None, agent: str | None
) -> None:
    first, second = (load_policy(document(global_block, agent_block)) for _ in range(2))
    assert first == second
    assert first.for_agent(agent) == first.for_agent(agent) == second.for_agent(agent)
    assert first.effective(agent) == second.effective(agent)


@given(maybe_block, valid_blocks())
def test_an_agent_key_always_wins_over_the_global_key(
    global_block: dict[str, object] | None, agent_block: dict[str, object]
) -> None:
    th = load_policy(document(global_block, agent_block)).for_agent("a")
    written = {
        "enabled": th.enabled,
        "historySize": th.history_size,
        "warningThreshold": th.warning_threshold,  # warning is never clamped
        "unknownToolThreshold": th.unknown_tool_threshold,
    }
    for key, value in written.items():
        if key in agent_block:
            assert value == agent_block[key]


@given(maybe_block)
def test_an_empty_agent_block_is_the_same_as_none(global_block: dict[str, object] | None) -> None:
    with_empty = load_policy(document(global_block, {})).for_agent("a")
    assert with_empty == load_policy(document(global_block, None)).for_agent("a")


bad_numbers = (
    st.booleans()
    | st.integers(max_value=0)
    | st.floats(allow_nan=True, allow_infinity=True).filter(
        lambda x: not (x.is_integer() and x > 0)
    )
    | st.text(max_size=5)
    | st.none()
)


@given(valid_blocks(), st.sampled_from(NUMBER_KEYS), bad_numbers, st.booleans())
def test_a_number_that_is_not_whole_and_positive_is_always_rejected_at_its_path(
    block: dict[str, object], key: str, bad: object, in_agent: bool
) -> None:
    block = {**block, key: bad}
    doc = document(None, block) if in_agent else document(block, None)
    path = ("agents.list[0]." if in_agent else "") + f"tools.loopDetection.{key}"
    with pytest.raises(PolicyError) as caught:
        load_policy(doc)
    assert [issue.path for issue in caught.value.issues] == [path]
    assert caught.value.issues[0].message.startswith("must be a whole number > 0, got ")
