"""The engine's value types: constructors written out (for the compiled engine) keep the
dataclass fields' order, defaults, equality and hashing."""

from __future__ import annotations

import dataclasses

import pytest

from loopguard_fleet.detectors import Outcome, ToolCall, Verdict
from loopguard_fleet.detectors.events import Event
from loopguard_fleet.detectors.values import UNDEFINED


@pytest.mark.parametrize("cls", [Outcome, Verdict, Event, ToolCall])
def test_positional_order_is_the_field_order(cls: type) -> None:
    fields = [f.name for f in dataclasses.fields(cls)]
    values = {
        Outcome: ("error", "boom", None, "gone"),
        Verdict: ("warning", "ping_pong", 10, "m", "k", "list", "argument_churn"),
        Event: ("tool_result", "r1", "e1", 3, "a1", None, None, True),
    }.get(cls)
    if values is None:  # ToolCall computes its hash: only the order of what it is given
        call = ToolCall("read", {"path": "/a"}, "c1")
        assert (call.tool, call.args, call.tool_call_id) == ("read", {"path": "/a"}, "c1")
        assert fields[:3] == ["tool", "args", "tool_call_id"]
        return
    made = cls(*values)
    assert [getattr(made, name) for name in fields] == list(values)
    assert made == cls(**dict(zip(fields, values, strict=True)))


def test_defaults_are_the_fields_defaults() -> None:
    assert Outcome("pending") == Outcome("pending", UNDEFINED, None, None)
    assert Outcome("pending").value is UNDEFINED
    v = Verdict("critical", "generic_repeat", 20, "m", "k")
    assert (v.paired_tool, v.liveness_signal) == (None, None)
    e = Event("compaction", "r1", "e1", 1)
    assert (e.agent_id, e.call, e.outcome, e.want_verdict) == (None, None, None, False)


def test_the_class_methods_make_what_the_constructor_makes() -> None:
    assert Outcome.result({"ok": True}) == Outcome("result", {"ok": True})
    assert Outcome.result() == Outcome("pending")
    assert Outcome.pending() == Outcome("pending")
    assert Outcome.error("boom") == Outcome("error", "boom")
    assert Outcome.error(ValueError()) == Outcome("error", "ValueError")
    hashed = Outcome.hashed("abc", "gone")
    assert hashed == Outcome("hashed", hash="abc", unknown_tool_name="gone")
    assert hashed.value is UNDEFINED
    assert ToolCall.of("Read ", {"path": "/a"}, "c1") == ToolCall("read", {"path": "/a"}, "c1")


def test_equal_values_hash_alike_and_differ_by_any_compared_field() -> None:
    a, b = Verdict("warning", "d", 10, "m", "k"), Verdict("warning", "d", 10, "m", "k")
    assert a == b and hash(a) == hash(b)
    assert a != Verdict("warning", "d", 11, "m", "k")
    assert hash(Outcome("result", "x")) == hash(Outcome("result", "x"))
