"""Record's compact layout (six slots) keeps the dataclass's values, equality and hashing;
hash strings of different runs share one object through a bounded memo."""

from __future__ import annotations

import pickle
import sys

import pytest

import loopguard_fleet.detectors.sharing as sharing
from loopguard_fleet.detectors import (
    Outcome,
    Record,
    RunState,
    Thresholds,
    ToolCall,
    engine_build,
    record_call,
    record_outcome,
)
from loopguard_fleet.detectors.hashkeys import hash_key

A = "read:" + "a" * 64
R = "b" * 64
FIELDS = (
    "tool",
    "args_hash",
    "tool_call_id",
    "result_hash",
    "unknown_tool_name",
    "seq",
    "event_id",
    "outcome_kind",
    "failure_identity",
    "no_progress",
)


@pytest.mark.parametrize(
    "values",
    [
        ("read", A, None, R, None, 7, "e7", None, None, False),
        ("read", A, "c1", None, None, 3, None, None, None, False),
        ("exec", A, None, R, "ghost", 4, None, None, None, False),
        ("exec", A, "c2", None, None, 5, "r:5", "tool-loop-veto", None, False),
        ("exec", A, None, R, None, 6, "r:6", "terminal-exec-failure", "d" * 64, False),
        ("write", A, None, R, None, 8, None, None, None, True),
    ],
    ids=["completed", "pending", "unknown-tool", "veto", "terminal-failure", "no-progress"],
)
def test_every_field_reads_back_what_was_given(values: tuple[object, ...]) -> None:
    record = Record(*values)  # type: ignore[arg-type]  # a table of mixed field types
    assert tuple(getattr(record, name) for name in FIELDS) == values
    assert Record(**dict(zip(FIELDS, values, strict=True))) == record  # type: ignore[arg-type]  # same
    assert pickle.loads(pickle.dumps(record)) == record
    assert (
        repr(record)
        == "Record(" + ", ".join(f"{n}={v!r}" for n, v in zip(FIELDS, values, strict=True)) + ")"
    )


def test_equality_and_hash_ignore_the_call_id_and_see_every_other_field() -> None:
    base = Record("read", A, None, R, None, 7, "e7")
    assert Record("read", A, "c1", R, None, 7, "e7") == base
    assert hash(Record("read", A, "c1", R, None, 7, "e7")) == hash(base)
    others = [
        Record("list", A, None, R, None, 7, "e7"),
        Record("read", A + "x", None, R, None, 7, "e7"),
        Record("read", A, None, None, None, 7, "e7"),
        Record("read", A, None, R, "ghost", 7, "e7"),
        Record("read", A, None, R, None, 8, "e7"),
        Record("read", A, None, R, None, 7, None),
        Record("read", A, None, R, None, 7, "e7", "tool-loop-veto"),
        Record("read", A, None, R, None, 7, "e7", None, "d"),
        Record("read", A, None, R, None, 7, "e7", None, None, True),
    ]
    assert all(other != base for other in others)
    assert len({base, *others}) == len(others) + 1
    assert base != ("read", A, None, R, None, 7, "e7")


def test_a_completed_record_of_the_configurable_profile_is_six_slots() -> None:
    done = Record("read", A, None, R, None, 7, "e7")
    assert not done.has_rare and Record("read", A, "c1").has_rare
    # GC header, object header and six pointers (was 112); a compiled class adds its vtable's.
    vtable = 8 if engine_build() == "compiled" else 0
    assert sys.getsizeof(done) <= 80 + vtable


def test_equal_results_of_different_runs_share_one_key() -> None:
    th = Thresholds(enabled=True)
    records = []
    for run in range(3):
        state = RunState()
        call = ToolCall.of("read", {"path": "/same"}, f"c{run}")
        record_call(state, call, th, 1)
        text = "".join(["same ", "text"])  # a fresh object each time, as a decoded event's
        done = record_outcome(state, call, Outcome.result({"content": text}), th, 2, f"e{run}")
        assert done is not None
        records.append(done)
    assert records[0].result_key is not None
    assert all(r.result_key is records[0].result_key for r in records)
    assert all(r.args_hash is records[0].args_hash for r in records)


def test_the_sharing_memo_is_bounded_and_shares_again_after_it_empties() -> None:
    first = sharing.share("".join(["x", "y" * 70]))
    assert sharing.share("".join(["x", "y" * 70])) is first
    for i in range(sharing.SHARED_ENTRIES):
        sharing.share(f"unique-{i}")
        assert len(sharing.SHARED) <= sharing.SHARED_ENTRIES
    again = "".join(["x", "y" * 70])
    assert sharing.share(again) is again  # emptied since: the new object is now the shared one
    assert sharing.share("".join(["x", "y" * 70])) is again


@pytest.mark.parametrize(
    ("event_id", "seq", "prefix"),
    [("run-1:7", 7, "run-1:"), ("e7r", 7, None), ("17", 7, "1"), ("7", 7, None), (None, 7, None)],
    ids=["client-form", "other-form", "digits-before-seq", "seq-alone", "none"],
)
def test_a_completed_record_keeps_an_id_ending_in_its_seq_as_its_prefix(
    event_id: str | None, seq: int, prefix: str | None
) -> None:
    done = Record.completed("read", A, hash_key(R), None, seq, event_id, [])
    assert done.event_id == event_id and done.event_prefix == prefix
    assert done == Record("read", A, None, R, None, seq, event_id)


def test_a_runs_records_share_one_event_id_prefix_also_after_a_restore() -> None:
    th = Thresholds(enabled=True)
    state = RunState()
    for seq in range(1, 9, 2):
        call = ToolCall.of("read", {"path": f"/{seq}"}, f"c{seq}")
        record_call(state, call, th, seq)
        out = Outcome.result({"content": "".join(["x", str(seq)])})
        record_outcome(state, call, out, th, seq + 1, "".join(["run-1:", str(seq + 1)]))
    restored = RunState.from_json(state.to_json())
    for history in (state.history, restored.history):
        assert [r.event_id for r in history] == ["run-1:2", "run-1:4", "run-1:6", "run-1:8"]
        assert len({id(r.event_prefix) for r in history}) == 1
    assert restored == state
    texts = [
        Record(r.tool, r.args_hash, None, r.result_hash, None, r.seq, r.event_id)
        for r in state.history
    ]  # the same records, built from their texts: the stored bytes are the same
    assert RunState(history=texts).to_json() == state.to_json()
