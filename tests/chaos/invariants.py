"""The chaos invariants, checked after each scenario, and the figures each scenario reports.

(a) the control topic, deduplicated by decision id, equals the oracle's decisions exactly;
(b) the number of duplicates before deduplication is reported (never asserted: at-least-once);
(c) the group's committed offsets reach the end of every input partition (the drain barrier);
(d) the run-state table (latest changelog value per key) holds the oracle's state per run,
    byte for byte (the table value's envelope adds the stream time, which the oracle, reading
    no record times, does not have: streams/processing/stored.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loopguard_fleet.streams.processing.stored import decode_stored
from tests.chaos.fleet import Oracle
from tests.chaos.harness import Cluster, Record

#: Figures of every scenario run in this session, printed at its end (conftest.py).
FIGURES: list[Figures] = []


def decision_id(message: dict[str, Any]) -> str:
    """The stable id of a control message (`command_id` for commands)."""
    return str(message["command_id"] if message.get("type") == "command" else message["id"])


@dataclass
class Figures:
    """What one scenario measured."""

    scenario: str
    events: int  # input messages produced (copies included)
    decisions: int  # distinct decisions expected (the oracle's)
    lost: int  # expected decisions missing from the control topic
    extra: int  # decisions on the topic the oracle does not have, or with other content
    duplicates: int  # control messages beyond the first of their id
    control_messages: int
    states: int  # runs whose table state was compared
    state_mismatches: int
    notes: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """One summary line."""
        notes = " ".join(f"{k}={v}" for k, v in self.notes.items())
        return (
            f"{self.scenario}: {self.events} events, {self.decisions} decisions, lost "
            f"{self.lost}, extra {self.extra}, duplicates before dedupe {self.duplicates} "
            f"(of {self.control_messages} messages), {self.states} run states, "
            f"{self.state_mismatches} differ {notes}".rstrip()
        )


def latest_states(changelog: Sequence[Record]) -> dict[str, bytes | None]:
    """Latest changelog value per run key (None: deleted)."""
    latest: dict[str, bytes | None] = {}
    for r in sorted(changelog, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None, "changelog record without a key"
        latest[r.key.decode()] = r.value
    return latest


def by_decision_id(
    control: Sequence[Record], topic: str, after_offsets: dict[tuple[str, int], int] | None = None
) -> tuple[dict[str, dict[str, Any]], list[str], int]:
    """Control messages deduplicated by decision id (at least once: a decision re-sent after
    a fault is the same message again), the ids published with two contents, and how many
    messages were read (those below `after_offsets` skipped)."""
    got: dict[str, dict[str, Any]] = {}
    different: list[str] = []
    n_messages = 0
    for r in control:
        if after_offsets and r.offset < after_offsets.get((topic, r.partition), 0):
            continue
        n_messages += 1
        msg = orjson.loads(r.value or b"null")
        did = decision_id(msg)
        if did in got and got[did] != msg:
            different.append(did)
        got.setdefault(did, msg)
    return got, different, n_messages


async def check(
    scenario: str,
    cluster: Cluster,
    oracle: Oracle,
    *,
    runs: Sequence[str] | None = None,
    after_offsets: dict[tuple[str, int], int] | None = None,
    notes: dict[str, Any] | None = None,
) -> Figures:
    """Check invariants (a)-(d) against the oracle; record and return the figures.

    `runs` limits the state comparison (d) to those runs (default: every run the oracle saw).
    `after_offsets` skips control records below those offsets (read from a recreated topic).
    """
    assert oracle.duplicates == 0, "the oracle itself produced two decisions with one id"
    committed = await cluster.committed()
    behind = cluster.behind(committed)
    control = await cluster.read(cluster.control)
    changelog = await cluster.read(cluster.changelog)

    got, different, n_messages = by_decision_id(control, cluster.control, after_offsets)
    expected = oracle.decisions
    lost = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    changed = sorted(d for d in set(got) & set(expected) if got[d] != expected[d])

    latest = latest_states(changelog)
    wanted = oracle.states(runs)
    mismatched: dict[str, tuple[str | None, str]] = {}
    for run_id, state in wanted.items():
        raw = latest.get(run_id)
        have = decode_stored(raw).state.to_json() if raw is not None else None
        want = state.to_json()
        if have != want:
            mismatched[run_id] = (have, want)

    figures = Figures(
        scenario=scenario,
        events=cluster.produced,
        decisions=len(expected),
        lost=len(lost),
        extra=len(extra) + len(changed) + len(different),
        duplicates=n_messages - len(got),
        control_messages=n_messages,
        states=len(wanted),
        state_mismatches=len(mismatched),
        notes=dict(notes or {}),
    )
    FIGURES.append(figures)
    print(figures.line())
    problems = []
    if behind:
        problems.append(f"(c) committed offsets behind the end: {behind}")
    if lost:
        problems.append(f"(a) {len(lost)} decisions lost, e.g. {[expected[d] for d in lost[:3]]}")
    if extra:
        problems.append(f"(a) {len(extra)} decisions extra, e.g. {[got[d] for d in extra[:3]]}")
    if changed:
        sample = [(got[d], expected[d]) for d in changed[:2]]
        problems.append(f"(a) {len(changed)} decisions differ, e.g. {sample}")
    if different:
        problems.append(f"(a) {len(different)} ids published with two contents: {different[:3]}")
    if mismatched:
        sample_runs = list(mismatched.items())[:3]
        problems.append(f"(d) {len(mismatched)} run states differ, e.g. {sample_runs}")
    assert not problems, f"{scenario}: " + "\n".join(problems)
    return figures
