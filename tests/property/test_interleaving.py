"""Interleaving law (docs/wire-format.md, "Ordering"): a run's decisions and final state are
those of its events in seq order, for every merge of its two topics that keeps each topic's
own order, with or without redelivery.

The fleets respect the documented precondition of the guarantee: consecutive compactions of a
run are at least one guard window of recorded outcomes apart, a run's history never trims
(at most history_size / 2 calls), and run_end is a run's last event.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors import RunState, Thresholds, process_event
from tests.property.test_engine_laws import ARGS, OUTCOMES, TOOLS, thresholds
from tests.wire import RunScript

TOOL_TYPES = {"tool_call", "tool_result"}


@st.composite
def run_plans(draw: st.DrawFn, window: int, max_calls: int) -> list[tuple[Any, ...]]:
    """One run's steps: calls (tool, args, outcome, want_verdict) and spaced compactions."""
    steps: list[tuple[Any, ...]] = []
    since_compaction = window  # a compaction may come first
    for _ in range(draw(st.integers(0, max_calls))):
        if since_compaction >= window and draw(st.integers(0, 5)) == 0:
            steps.append(("compaction",))
            since_compaction = 0
        # Loops need repetition: mostly one hot call, sometimes another.
        hot = draw(st.booleans())
        tool = TOOLS[0] if hot else draw(st.sampled_from(TOOLS))
        ai = 0 if hot else draw(st.integers(0, len(ARGS) - 1))
        oi = 2 if hot else draw(st.integers(0, len(OUTCOMES) - 1))
        steps.append(("call", tool, ai, oi, draw(st.booleans())))
        since_compaction += 1
    if draw(st.booleans()) and since_compaction >= window:
        steps.append(("compaction",))
    if draw(st.booleans()):
        steps.append(("end",))
    return steps


def events_of(run_id: str, steps: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    run = RunScript(run_id)
    out: list[dict[str, Any]] = []
    for s in steps:
        if s[0] == "compaction":
            out.append(run.compaction())
        elif s[0] == "end":
            out.append(run.end())
        else:
            _, tool, ai, oi, want = s
            out.append(run.call(tool, ARGS[ai], want_verdict=want))
            out.append(run.result(tool, ARGS[ai], **OUTCOMES[oi]))
    return out


def with_redelivery(stream: list[dict[str, Any]], rnd: random.Random) -> list[dict[str, Any]]:
    """A topic read again from an earlier offset now and then, as after a crash or rewind."""
    out: list[dict[str, Any]] = []
    for i, ev in enumerate(stream):
        out.append(ev)
        if i and rnd.random() < 0.1:
            out += stream[rnd.randrange(i) : i + 1]
    return out


def interleave(events: list[dict[str, Any]], rnd: random.Random, redeliver: bool) -> list[Any]:
    """A random merge of a fleet's two topics, each keeping its own order."""
    tools = [e for e in events if e["type"] in TOOL_TYPES]
    lives = [e for e in events if e["type"] not in TOOL_TYPES]
    if redeliver:
        tools, lives = with_redelivery(tools, rnd), with_redelivery(lives, rnd)
    bias = rnd.choice([0.05, 0.5, 0.95])  # one topic far ahead, even, or far behind
    merged: list[dict[str, Any]] = []
    while tools or lives:
        take_life = lives and (not tools or rnd.random() < bias)
        merged.append((lives if take_life else tools).pop(0))
    return merged


def decide(events: list[dict[str, Any]], th: Thresholds) -> tuple[list[bytes], dict[str, str]]:
    """(sorted whole control messages, final state per run)."""
    states: dict[str, RunState] = {}
    out = [
        orjson.dumps(d.to_wire(), option=orjson.OPT_SORT_KEYS)
        for ev in events
        for d in process_event(states.setdefault(ev["run_id"], RunState()), ev, th)
    ]
    return sorted(out), {run_id: s.to_json() for run_id, s in states.items()}


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Thresholds, list[dict[str, Any]]]:
    th = replace(draw(thresholds()), history_size=30)
    plans = draw(
        st.lists(run_plans(th.post_compaction_window_size, th.history_size // 2), max_size=3)
    )
    events = [e for i, p in enumerate(plans) for e in events_of(f"run{i}", p)]
    return th, events


@settings(max_examples=300, deadline=None)
@given(fleets(), st.randoms(use_true_random=False), st.booleans())
def test_any_topic_interleaving_gives_the_seq_order_decisions_and_states(
    fleet: tuple[Thresholds, list[dict[str, Any]]], rnd: random.Random, redeliver: bool
) -> None:
    th, events = fleet
    in_seq_order = sorted(events, key=lambda e: (e["run_id"], e["seq"]))
    assert decide(interleave(events, rnd, redeliver), th) == decide(in_seq_order, th)
