"""`compare --candidate-topic`: a shadow group's decisions, read back from its control topic,
give the report that replaying the shadow group's policy as the candidate gives."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopguard_fleet.config import load_policy
from loopguard_fleet.streams.audit.compare import compare, compare_shadow, render_summary
from loopguard_fleet.streams.audit.inputs import FileInput
from loopguard_fleet.streams.audit.replay import Rejected, Replayer, replay_items
from loopguard_fleet.streams.audit.report_html import render_html
from loopguard_fleet.streams.audit.shadow import read_shadow_decisions
from loopguard_fleet.streams.cli import _check_shadow_side
from loopguard_fleet.streams.cli_errors import EXIT_NO_EVENTS, CliError

from .test_compare import ON, P1_RUN, TRACES

SHADOW = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 8, "criticalThreshold": 12}},
    "loopguard": {"mode": "observe"},
}
TOPIC = "shadow.control"


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """The real traces, one file."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"".join(p.read_bytes() for p in sorted(TRACES.glob("*.jsonl"))))
    return path


def _control(policy: dict[str, Any], path: Path) -> list[dict[str, Any]]:
    """What a worker group on `policy` publishes for the events of `path`, in order."""
    out = []
    for _, d in replay_items(Replayer(load_policy(policy)), FileInput(str(path))):
        assert not isinstance(d, Rejected)
        out.append(d.to_wire())
    return out


def _lines(messages: Iterable[dict[str, Any] | bytes]) -> list[tuple[int, bytes]]:
    return [(i, m if isinstance(m, bytes) else orjson.dumps(m)) for i, m in enumerate(messages, 1)]


def test_shadow_loop_events_are_grouped_per_run_and_trigger_in_their_order(traces) -> None:
    control = _control(SHADOW, traces)
    loop_events = [m for m in control if m["type"] == "loop_event"]
    assert loop_events and {m["enforced"] for m in loop_events} == {False}
    noise = [
        b"not json",
        b"[1]",
        {"type": "loop_event", "run_id": "r"},  # no trigger, id, detector, action, tool
        {**loop_events[0], "enforced": True},  # an enforced decision is no shadow one
        {"type": "command", "command": "block_call", "run_id": "r"},
    ]
    shadow = read_shadow_decisions(_lines([*control, loop_events[0], *noise]))

    assert (shadow.records, shadow.decisions) == (len(control) + 1 + len(noise), len(loop_events))
    assert (shadow.enforced, shadow.unreadable) == (1, 3)  # the resent loop event counts once
    for run_id, run in shadow.runs.items():
        mine = [m for m in loop_events if m["run_id"] == run_id]
        assert list(run) == list(dict.fromkeys(m["trigger_event_id"] for m in mine))
        assert [e for found in run.values() for e in found] == [
            (m["detector"], m["action"], m["tool"]) for m in mine
        ]
    version = load_policy(SHADOW).version
    assert shadow.version_counts() == {version: len(loop_events)}
    first = loop_events[0]
    found, got = shadow.take(first["run_id"], first["trigger_event_id"])
    assert (found[0], got) == ((first["detector"], first["action"], first["tool"]), version)
    assert shadow.take(first["run_id"], first["trigger_event_id"]) == ([], None)  # taken once
    assert shadow.left() == len(loop_events) - len(found)


def test_the_shadow_topic_gives_the_report_of_replaying_its_policy(traces) -> None:
    shadow = read_shadow_decisions(_lines(_control(SHADOW, traces)))
    current = load_policy(ON)
    got = compare_shadow(current, shadow, TOPIC, FileInput(str(traces))).to_json()
    want = compare(current, load_policy(SHADOW), FileInput(str(traces))).to_json()

    source = got.pop("candidate_topic")
    assert source == {
        "topic": TOPIC,
        "policy_versions": {load_policy(SHADOW).version: source["decisions"]},
        "decisions": sum(sum(d.values()) for d in want["decisions"]["candidate"].values()),
        "unmatched": 0,
    }
    assert got["thresholds"]["candidate"] is None  # only its version is known
    for key in ("policies", "thresholds"):
        got.pop(key), want.pop(key)
    assert got == want
    p1 = next(r for r in got["stopped_runs"] if r["run_id"] == P1_RUN)
    assert (p1["current"]["first_stop_call"], p1["candidate"]["first_stop_call"]) == (24, 15)


def test_the_summary_and_page_name_the_topic_and_version(traces) -> None:
    shadow = read_shadow_decisions(_lines(_control(SHADOW, traces)))
    report = compare_shadow(load_policy(ON), shadow, TOPIC, FileInput(str(traces)))
    note = f"candidate decisions read from topic {TOPIC}: "
    version = load_policy(SHADOW).version
    summary = render_summary(report)
    assert note in summary and version in summary and "thresholds changed" not in summary
    page = render_html(report)
    assert note in page and "Thresholds changed" not in page


def test_decisions_outside_the_input_are_unmatched_and_refused_when_nothing_matches(
    traces, tmp_path: Path
) -> None:
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"".join(line for line in traces.read_bytes().splitlines(True)[:3]))
    shadow = read_shadow_decisions(_lines(_control(SHADOW, traces)))
    report = compare_shadow(load_policy(ON), shadow, TOPIC, FileInput(str(other)))
    assert report.shadow is not None and report.shadow.decisions == 0
    assert report.shadow.unmatched == shadow.decisions
    with pytest.raises(CliError) as refused:
        _check_shadow_side(report, TOPIC)
    assert refused.value.code == EXIT_NO_EVENTS
    assert "is about an event of the input" in refused.value.message


def test_several_policy_versions_are_refused(traces) -> None:
    control = _control(SHADOW, traces)
    p1 = [m for m in control if m["run_id"] == P1_RUN]
    others = [{**m, "policy_version": "sha256:0000000000000000"} for m in control if m not in p1]
    shadow = read_shadow_decisions(_lines([*p1, *others]))
    report = compare_shadow(load_policy(ON), shadow, TOPIC, FileInput(str(traces)))
    with pytest.raises(CliError) as refused:
        _check_shadow_side(report, TOPIC)
    assert refused.value.code == EXIT_NO_EVENTS
    assert "decisions of 2 policy versions" in refused.value.message
