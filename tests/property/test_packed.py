"""A run's packed form (detectors/packed.py) gives back an equal state, whatever it holds, and
packing a run between any two of its events changes none of its decisions."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from loopguard_fleet.detectors import CONFIGURABLE, OPENCLAW_2026_9, Record, RunState, Thresholds
from loopguard_fleet.detectors.hashkeys import hash_key
from loopguard_fleet.detectors.packed import pack, unpack
from loopguard_fleet.detectors.records import record_cells
from tests.property.test_engine_laws import run, script, steps_st, thresholds

DIGEST = hashlib.sha256(b"x").hexdigest()

# What a JavaScript runtime's JSON.stringify can hand us, lone surrogates included, and what
# the engine interns: '<prefix><64 hex>', near misses (uppercase, a trailing newline).
_any = st.text(st.characters(codec=None, categories=None), max_size=10)
texts = st.one_of(
    _any,
    st.builds(lambda p: p + DIGEST, st.sampled_from(["", "read:", "error:", "exec:", "é:"])),
    st.builds(lambda p, s: p + DIGEST + s, _any, st.sampled_from(["", "\n", "A"])),
    st.builds(lambda p: p + DIGEST.upper(), st.text(max_size=4)),
)
# Seqs are any JSON integer: negative, past 64 bits (JavaScript writes 1e20 as digits).
seqs = st.one_of(st.integers(0, 40), st.integers(-(2**70), 2**70))
optional = st.none() | texts


@st.composite
def records(draw: st.DrawFn, history: list[Record]) -> Record:
    """A record as the engine makes them: pending, completed (its event id's prefix shared
    with the run's records when it is `<prefix><seq>`), or with any rare field set."""
    tool, args_hash, seq = draw(texts), draw(texts), draw(seqs)
    how = draw(st.sampled_from(["pending", "completed", "any"]))
    if how == "pending":
        return Record.pending(tool, args_hash, draw(optional), seq)
    if how == "completed":
        event_id = draw(st.none() | texts | st.builds(lambda p: p + str(seq), texts))
        result = hash_key(draw(texts))
        return Record.completed(tool, args_hash, result, draw(optional), seq, event_id, history)
    return Record(
        tool,
        args_hash,
        draw(optional),
        draw(optional),
        draw(optional),
        seq,
        draw(optional),
        draw(st.sampled_from([None, "tool-loop-veto", "terminal-exec-failure"])),
        draw(optional),
        draw(st.booleans()),
    )


@st.composite
def states(draw: st.DrawFn) -> RunState:
    """Any RunState: a history of up to 40 records and every other field."""
    history: list[Record] = []
    for _ in range(draw(st.integers(0, 40))):
        history.append(draw(records(history)))
    marks = st.none() | seqs
    policies = st.none() | st.tuples(st.integers(0, 50), st.booleans(), optional)
    return RunState(
        history=history,
        buckets=draw(st.dictionaries(texts, st.integers(0, 10**6), max_size=4)),
        agent_id=draw(optional),
        guard_remaining=draw(st.integers(0, 10)),
        guard_seq=draw(marks),
        guard_obs=draw(st.lists(st.tuples(texts, texts, texts), max_size=4)),
        guard_policy=draw(policies),
        tool_seq=draw(marks),
        life_seq=draw(marks),
        ended_seq=draw(marks),
        life_done=draw(marks),
        held=draw(st.lists(st.tuples(seqs, st.sampled_from(["compaction", "run_end"]), policies))),
        critical_loops=draw(st.integers(0, 3) | st.integers(0, 2**70)),
    )


def _same(a: RunState, b: RunState) -> None:
    assert a == b
    assert a.to_json() == b.to_json()
    # the records' slots as they were: an event id's `(prefix,)` form and the rare fields too
    assert [record_cells(r) for r in a.history] == [record_cells(r) for r in b.history]


@given(states())
@example(RunState())
@example(RunState(critical_loops=1))
def test_unpack_gives_back_the_state_pack_packed(state: RunState) -> None:
    _same(unpack(pack(state)), state)


@given(
    st.integers(0, 2**53),  # counts past 2**53 are no JSON (JavaScript) integer
    st.sampled_from([RunState(), RunState(tool_seq=4, held=[(6, "run_end", None)])]),
)
def test_the_json_form_keeps_the_runs_critical_verdicts(
    critical_loops: int, base: RunState
) -> None:
    state = replace(base, critical_loops=critical_loops)
    doc = json.loads(state.to_json())
    assert doc.get("r") == (critical_loops or None)  # absent at 0: older states unchanged
    _same(RunState.from_json(state.to_json()), state)
    _same(unpack(pack(state)), state)


def test_a_runs_records_share_their_event_id_prefix_again() -> None:
    history: list[Record] = []
    result = hash_key("read:" + DIGEST)
    for seq in (2, 4, 6):
        done = Record.completed("read", "read:" + DIGEST, result, None, seq, f"r:{seq}", history)
        history.append(done)
    restored = unpack(pack(RunState(history=history)))
    cells = [record_cells(r)[4] for r in restored.history]
    assert cells[0] == ("r:",) and all(c is cells[0] for c in cells)


@given(
    steps_st,
    thresholds(),
    st.sets(st.integers(0, 200)),
    st.booleans(),
    st.sampled_from([CONFIGURABLE, OPENCLAW_2026_9]),
)
def test_packing_a_run_between_any_two_events_changes_nothing(
    steps: list[Any], th: Thresholds, cuts: set[int], results: bool, semantics: Any
) -> None:
    _pack_between(script(steps, results=results), replace(th, semantics=semantics), cuts)


def test_packing_a_run_that_spends_its_recovery_allowance_changes_nothing() -> None:
    # Random steps seldom loop twice: a 2026.9 run aborted on its second critical, packed
    # between every two events.
    steps = [("call", "read", 0, 2, True)] * 4 + [("call", "list", 1, 2, True)] * 4
    events = script(steps)
    th = Thresholds(enabled=True, warning_threshold=1, critical_threshold=2)
    out = _pack_between(events, replace(th, semantics=OPENCLAW_2026_9), set(range(len(events))))
    assert any(d.get("detector") == "tool_loop_recovery_exhausted" for d in out)


def _pack_between(events: list[dict[str, Any]], th: Thresholds, cuts: set[int]) -> list[Any]:
    """A run's decisions, the state packed before each event in `cuts`: the same as unpacked."""
    whole_state = RunState()
    whole = run(events, th, whole_state)
    state = RunState()
    out: list[dict[str, Any]] = []
    for i, ev in enumerate(events):
        if i in cuts:
            state = unpack(pack(state))
        out += run([ev], th, state)
    assert out == whole
    _same(state, whole_state)
    return out
