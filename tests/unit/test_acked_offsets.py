"""Acked offsets as ranges commit what Faust's list of offsets commits.

`AckedOffsets` (streams/worker/faust/acked.py) is checked against a plain set, and the
worker consumer's `_new_offset` against Faust's own (faust/transport/consumer.py), both run
on the same acks, holes and commits. tests/unit/test_consumer_offsets.py drives the real
consumer class through the same calls; the chaos suite proves commits end to end.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP
from hypothesis import given
from hypothesis import strategies as st
from intervaltree import IntervalTree

from loopguard_fleet.streams.worker.faust.acked import AckedOffsets
from loopguard_fleet.streams.worker.faust.internals import _TunedConsumer

TP0 = TP("unit.offsets", 0)
OFFSETS = st.integers(min_value=0, max_value=60)
ADDS = st.lists(
    st.one_of(
        st.tuples(st.just("one"), OFFSETS, st.just(0)),
        st.tuples(st.just("range"), OFFSETS, st.integers(min_value=0, max_value=8)),
    ),
    max_size=40,
)


def _first_run(model: set[int], below: int | None) -> int | None:
    """The offset after the lowest run of consecutive offsets of `model` below `below`."""
    if not model or (below is not None and min(model) >= below):
        return None
    end = min(model)
    while end in model and (below is None or end < below):
        end += 1
    return end


@given(ADDS, st.one_of(st.none(), OFFSETS))
def test_ranges_hold_the_same_offsets_as_a_set(
    adds: list[tuple[str, int, int]], below: int | None
) -> None:
    acked, model = AckedOffsets(), set()
    for kind, offset, width in adds:
        if kind == "one":
            assert acked.add(offset) is (offset not in model)
            model.add(offset)
        else:
            acked.add_range(offset, offset + width)
            model.update(range(offset, offset + width))
    ranges = acked.ranges
    assert all(s < e for s, e in ranges)
    assert all(e < s for (_, e), (s, _) in pairwise(ranges))  # apart
    assert (list(acked), len(acked)) == (sorted(model), len(model))
    assert [o for o in range(70) if o in acked] == sorted(model)
    under = [o for o in model if below is None or o < below]
    assert acked.highest(below) == (max(under) if under else None)
    expected = _first_run(model, below)
    assert acked.take_first_run(below) == expected
    if expected is not None:
        model.difference_update(range(min(model), expected))
    assert (list(acked), len(acked)) == (sorted(model), len(model))


def _state(acked: Any, index: Any) -> SimpleNamespace:
    """What `_new_offset` reads of a consumer: acked offsets, holes, committed offsets."""
    return SimpleNamespace(
        _acked=acked,
        _acked_index=index,
        _gap=defaultdict(IntervalTree),
        _committed_offset=defaultdict(lambda: None),
        commit_limits=None,
    )


@st.composite
def _partition(draw: st.DrawFn) -> tuple[int | None, list[tuple[int, int]], list[int | None]]:
    """A committed offset, holes, and the acks (offsets) and commits (None) that follow."""
    committed = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=10)))
    starts = draw(st.lists(st.integers(min_value=0, max_value=50), max_size=4, unique=True))
    holes = [(s, s + draw(st.integers(min_value=1, max_value=4))) for s in sorted(starts)]
    in_hole = {o for s, e in holes for o in range(s, e)}
    records = [o for o in range(60) if o not in in_hole]
    acks = draw(st.lists(st.sampled_from(records), max_size=60, unique=True))
    steps: list[int | None] = []
    for offset in acks:
        steps.append(offset)
        if draw(st.booleans()) and draw(st.booleans()):
            steps.append(None)
    return committed, holes, [*steps, None, None]


def _pair(
    committed: int | None, holes: list[tuple[int, int]]
) -> tuple[SimpleNamespace, SimpleNamespace]:
    """Our state and Faust's, each with the committed offset and the holes in its gap tree."""
    ours = _state(defaultdict(AckedOffsets), defaultdict(set))
    faust = _state(defaultdict(list), defaultdict(set))
    for state in (ours, faust):
        state._committed_offset[TP0] = committed
        for start, end in holes:
            state._gap[TP0].addi(start, end)
        state._gap[TP0].merge_overlaps()
    return ours, faust


def _ack(state: SimpleNamespace, offset: int, ours: bool) -> None:
    """Faust's `Consumer.ack` bookkeeping for one record, on either representation."""
    committed = state._committed_offset[TP0]
    if committed is not None and offset < committed:
        return
    if ours:
        state._acked[TP0].add(offset)
    elif offset not in state._acked_index[TP0]:
        state._acked_index[TP0].add(offset)
        state._acked[TP0].append(offset)


@given(_partition())
def test_commits_are_the_ones_faust_makes(case: tuple[Any, list[Any], list[Any]]) -> None:
    committed, holes, steps = case
    ours, faust = _pair(committed, holes)
    for step in steps:
        if step is not None:
            _ack(ours, step, ours=True)
            _ack(faust, step, ours=False)
            continue
        mine, theirs = _TunedConsumer._new_offset(ours, TP0), FaustConsumer._new_offset(faust, TP0)
        assert mine == theirs
        if mine is not None:
            ours._committed_offset[TP0] = faust._committed_offset[TP0] = mine
        assert list(ours._acked[TP0]) == sorted(faust._acked[TP0])
        assert ours._gap[TP0] == faust._gap[TP0]


def _faust_below(state: SimpleNamespace, limit: int) -> int | None:
    """Faust's `_new_offset` shown only the acked offsets below `limit` (the others put back)."""
    acked = state._acked[TP0]
    later = [o for o in acked if o >= limit]
    acked[:] = [o for o in acked if o < limit]
    try:
        return FaustConsumer._new_offset(state, TP0)  # type: ignore[no-any-return]
    finally:
        acked.extend(later)


@given(_partition(), st.integers(min_value=0, max_value=62))
def test_a_commit_limit_is_never_passed(case: tuple[Any, list[Any], list[Any]], limit: int) -> None:
    committed, holes, steps = case
    ours, faust = _pair(committed, holes)
    ours.commit_limits = faust.commit_limits = {TP0: limit}
    for step in steps:
        if step is not None:
            _ack(ours, step, ours=True)
            _ack(faust, step, ours=False)
    mine, theirs = _TunedConsumer._new_offset(ours, TP0), _faust_below(faust, limit)
    # Faust's may run on through holes past the limit (they hold no record); ours stops there.
    assert mine == (None if theirs is None else min(theirs, limit))
    ours.commit_limits = {}
    assert _TunedConsumer._new_offset(ours, TP0) is None  # a partition the limits do not name
