"""OpenClaw 2026.9's runner in the openclaw-2026.9 profile: the recovery allowance (a second
critical verdict ends the run), the warning note, and the verdicts that carry them."""

from __future__ import annotations

from typing import Any

from loopguard_fleet.detectors import (
    Decision,
    RunState,
    Thresholds,
    process_event,
    result_hash,
)
from loopguard_fleet.detectors.events import parse_event
from loopguard_fleet.detectors.packed import pack, unpack
from tests.wire import RunScript

OLD = Thresholds(enabled=True)
NEW = Thresholds(enabled=True, semantics="openclaw-2026.9")
ENDED = (
    "OpenClaw stopped this run because tool-loop recovery encountered another critical loop. "
    "No blocked tool action was executed."
)
ARGS = {"path": "/x"}


def _note(count: int) -> str:
    return (
        f"[System note: Tool-loop warning after {count} repeated calls. "
        "Change your approach or stop if you are not making progress.]"
    )


def _failing(run: RunScript, n: int, tool: str = "read", args: Any = ARGS) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for _ in range(n):
        events += run.both(tool, args, error="ENOENT")
    return events


def _feed(
    events: list[dict[str, Any]], th: Thresholds, state: RunState | None = None
) -> list[list[Decision]]:
    state = RunState() if state is None else state
    return [process_event(state, ev, th) for ev in events]


def _commands(decisions: list[Decision], command: str) -> list[dict[str, Any]]:
    return [d.payload for d in decisions if d.payload.get("command") == command]


def _two_loops(run: RunScript) -> list[dict[str, Any]]:
    """20 failing reads, a blocked retry (critical 1), 20 failing lists, a retry (critical 2)."""
    events = _failing(run, 20)
    events.append(run.call("read", ARGS))
    events += _failing(run, 20, "list", {"dir": "/w"})
    events.append(run.call("list", {"dir": "/w"}))
    return events


def test_the_first_critical_blocks_and_the_second_ends_the_run() -> None:
    events = _two_loops(RunScript())
    out = _feed(events, NEW)
    first, second = out[40], out[-1]
    assert [d.payload.get("command") for d in first] == [None, "block_call"]
    assert [(d.kind, d.payload.get("command")) for d in second] == [
        ("loop_event", None),
        ("command", "block_call"),
        ("loop_event", None),
        ("command", "abort_run"),
    ]
    abort_event, abort = second[2].payload, second[3].payload
    assert (abort_event["detector"], abort_event["level"], abort_event["action"]) == (
        "tool_loop_recovery_exhausted",
        "critical",
        "abort",
    )
    assert (abort_event["count"], abort_event["message"], abort_event["tool"]) == (2, ENDED, "list")
    assert (abort["detector"], abort["reason"], abort["count"], abort["tool"]) == (
        "tool_loop_recovery_exhausted",
        ENDED,
        2,
        "list",
    )
    assert abort["trigger_event_id"] == events[-1]["event_id"]
    assert len({d.id for d in second}) == 4  # the two loop events have distinct ids
    assert sum(len(_commands(o, "abort_run")) for o in out) == 1


def test_the_configurable_profile_never_ends_a_run_on_criticals() -> None:
    state = RunState()
    out = _feed(_two_loops(RunScript()), OLD, state)
    assert not [c for o in out for c in _commands(o, "abort_run")]
    assert sum(len(_commands(o, "block_call")) for o in out) == 2
    assert state.critical_loops == 0 and '"r"' not in state.to_json()


def test_after_the_abort_every_further_critical_aborts_again_and_the_rest_is_decided() -> None:
    run = RunScript()
    events = _two_loops(run)
    events += [run.call("list", {"dir": "/w"}) for _ in range(2)]  # the runtime went on
    events += run.both("write", {"path": "/new"}, result="ok")  # a healthy call
    out = _feed(events, NEW)
    assert [len(_commands(o, "abort_run")) for o in out[-5:]] == [1, 1, 1, 0, 0]
    assert [a["count"] for o in out[-5:-2] for a in _commands(o, "abort_run")] == [2, 3, 4]
    assert out[-2] == [] and out[-1] == []


def test_a_run_end_gives_the_run_id_a_fresh_allowance_and_a_compaction_does_not() -> None:
    run = RunScript()
    events = _failing(run, 20)
    events.append(run.call("read", ARGS))  # critical 1
    events.append(run.end())
    events += _failing(run, 20)  # the same run id, a new run: its history starts empty
    events.append(run.call("read", ARGS))  # critical 1 of the new run
    events.append(run.compaction())
    events.append(run.call("read", ARGS))  # critical 2 of the new run
    out = _feed(events, NEW)
    assert [len(_commands(o, "abort_run")) for o in out[-3:]] == [0, 0, 1]
    assert len(_commands(out[-3], "block_call")) == 1


def test_the_allowance_survives_the_stored_and_the_packed_form() -> None:
    events = _two_loops(RunScript())
    whole = [[d.payload for d in o] for o in _feed(events, NEW)]
    for form in ("json", "packed"):
        state = RunState()
        out = []
        for ev in events:
            # A restart between every two events: the state comes back from its stored form.
            state = RunState.from_json(state.to_json()) if form == "json" else unpack(pack(state))
            out.append([d.payload for d in process_event(state, ev, NEW)])
        assert out == whole, form
    assert any(_commands([Decision("command", "", "", p) for p in whole[-1]], "abort_run"))


def test_a_published_warning_carries_the_note_and_others_do_not() -> None:
    out = _feed(_failing(RunScript(), 12), NEW)
    warnings = [d.payload for o in out for d in o if d.kind == "loop_event"]
    assert [(w["count"], w["published"]) for w in warnings] == [(10, True), (11, False)]
    assert warnings[0]["note"] == _note(10)
    assert "note" not in warnings[1]
    old = [d.payload for o in _feed(_failing(RunScript(), 12), OLD) for d in o]
    assert old and not [p for p in old if "note" in p]


def _hash(result_event: dict[str, Any]) -> str:
    outcome = parse_event(result_event).outcome
    assert outcome is not None
    return result_hash("read", ARGS, outcome, NEW.channel_tools)


def test_the_note_is_never_recorded_as_the_outcome() -> None:
    # OpenClaw appends the note after recording the raw outcome: a result carrying it would
    # be a new outcome (progress). LoopGuard records the raw result it is sent, so the loop
    # goes on to its critical exactly as it would without any warning.
    run = RunScript()
    result = {"content": [{"type": "text", "text": "same"}], "details": {}}
    events: list[dict[str, Any]] = []
    for _ in range(21):
        events += [run.call("read", ARGS), run.result("read", ARGS, result=result)]
    state = RunState()
    out = _feed(events, NEW, state)
    notes = [d.payload["note"] for o in out for d in o if "note" in d.payload]
    assert notes == [_note(10)]
    raw = _hash(events[1])
    noted = {**result, "content": [*result["content"], {"type": "text", "text": notes[0]}]}
    shown = _hash({**events[1], "result": noted})
    assert raw != shown  # so recording what the model saw would reset the no-progress streak
    assert {r.result_hash for r in state.history if r.result_hash is not None} == {raw}
    assert "System note" not in state.to_json()
    blocks = [i for i, o in enumerate(out) if _commands(o, "block_call")]
    assert blocks == [40]  # the 21st call, as with no warning


def test_verdicts_repeat_their_loop_event() -> None:
    run = RunScript()
    events = _failing(run, 10)
    events.append(run.call("read", ARGS, want_verdict=True))  # warning 10, published
    events.append(run.result("read", ARGS, error="ENOENT"))
    events.append(run.call("read", ARGS, want_verdict=True))  # warning 11, not published
    events.append(run.call("write", {"p": 1}, want_verdict=True))  # allow
    out = _feed(events, NEW)
    verdicts = [d.payload for o in out for d in o if d.kind == "verdict"]
    published, quiet, allow = verdicts
    assert list(published) == [
        "type", "run_id", "tool_call_id", "decision", "detector", "level", "count", "message",
        "note", "trigger_event_id", "seq", "policy_version", "id",
    ]  # fmt: skip
    loop_event = next(d.payload for d in out[20] if d.kind == "loop_event")
    assert {k: published[k] for k in ("detector", "level", "count", "message", "note")} == {
        k: loop_event[k] for k in ("detector", "level", "count", "message", "note")
    }
    assert (published["decision"], published["count"], published["note"]) == (
        "warn",
        10,
        _note(10),
    )
    assert (quiet["decision"], quiet["count"], "note" in quiet) == ("warn", 11, False)
    assert list(allow) == [
        "type", "run_id", "tool_call_id", "decision", "trigger_event_id", "seq",
        "policy_version", "id",
    ]  # fmt: skip


def test_the_verdict_of_the_ending_call_is_a_block_beside_the_abort() -> None:
    run = RunScript()
    events = _two_loops(run)
    events[-1]["want_verdict"] = True
    last = _feed(events, NEW)[-1]
    verdict = last[-1].payload
    assert (verdict["decision"], verdict["level"], verdict["detector"]) == (
        "block",
        "critical",
        "generic_repeat",
    )
    assert verdict["message"] == last[0].payload["message"] and "note" not in verdict
    assert _commands(last, "abort_run")


def test_configurable_verdicts_carry_the_loop_event_fields_but_no_note() -> None:
    run = RunScript()
    events = _failing(run, 10)
    events.append(run.call("read", ARGS, want_verdict=True))
    verdict = _feed(events, OLD)[-1][-1].payload
    assert (verdict["decision"], verdict["detector"], verdict["level"], verdict["count"]) == (
        "warn",
        "generic_repeat",
        "warning",
        10,
    )
    assert verdict["message"].startswith("WARNING:") and "note" not in verdict
