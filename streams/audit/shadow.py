"""A shadow group's decisions read back from its control topic, for `compare --candidate-topic`.

A worker group running a candidate in observe mode publishes each decision as a `loop_event`
with `enforced: false` and no command (docs/policy.md, "Shadow mode"). These are grouped per
run and per trigger event, in the topic's order (a run's messages share one partition), so
that `compare` can count them at the input event that caused them, exactly where a replay of
the candidate would have produced them (docs/audit.md, "compare").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from loopguard_fleet.detectors.jsjson import NotJSON, loads

__all__ = ["LoopEvent", "ShadowDecisions", "read_shadow_decisions"]

#: (detector, action, tool) of one loop event: what `compare` counts.
LoopEvent = tuple[str, str, str]
_NO_VERSION = "null"  # a loop event without a policy_version (the engine used without a policy)


@dataclass(slots=True)
class ShadowDecisions:
    """A control topic's shadow loop events by run and trigger event, with what was skipped."""

    #: run id -> trigger event id -> that event's loop events, in the topic's order.
    runs: dict[str, dict[str, list[LoopEvent]]] = field(default_factory=dict)
    #: the policy version of each trigger's loop events, by (run id, trigger event id).
    versions: dict[tuple[str, str], str] = field(default_factory=dict)
    records: int = 0  # records read
    decisions: int = 0  # shadow loop events kept (a repeated `id` counts once)
    enforced: int = 0  # loop events with `enforced: true`: decisions that were enforced
    unreadable: int = 0  # records that are not JSON objects, or loop events missing a field

    def take(self, run_id: str, event_id: str) -> tuple[list[LoopEvent], str | None]:
        """The loop events the shadow group published for this input event and their policy
        version, removed so that a later copy of the event gets none (as the worker's
        duplicate rule gives it none); ([], None) when there are none."""
        run = self.runs.get(run_id)
        if run is None:
            return [], None
        found = run.pop(event_id, None)
        if found is None:
            return [], None
        if not run:
            del self.runs[run_id]
        return found, self.versions.pop((run_id, event_id))

    def left(self) -> int:
        """Loop events not taken: their trigger event was not in the compared input."""
        return sum(len(found) for run in self.runs.values() for found in run.values())

    def version_counts(self) -> Counter[str]:
        """Loop events per policy version, over those not yet taken."""
        out: Counter[str] = Counter()
        for run_id, run in self.runs.items():
            for event_id, found in run.items():
                out[self.versions[(run_id, event_id)]] += len(found)
        return out


def read_shadow_decisions(values: Iterable[tuple[int, bytes]]) -> ShadowDecisions:
    """Group a control topic's shadow loop events (`enforced: false`) per run and trigger.

    Commands, verdicts and other messages are not decisions and are passed over; a loop event
    seen again with the same `id` (a producer's resend) counts once.
    """
    out = ShadowDecisions()
    seen: set[str] = set()
    for _, raw in values:
        out.records += 1
        try:
            msg = loads(raw)
        except NotJSON:
            out.unreadable += 1
            continue
        if not isinstance(msg, dict):
            out.unreadable += 1
            continue
        if msg.get("type") != "loop_event":
            continue
        found = _loop_event(msg)
        if found is None:
            out.unreadable += 1
            continue
        run_id, event_id, decision_id, event, version = found
        if msg.get("enforced") is not False:
            out.enforced += 1
            continue
        if decision_id in seen:
            continue
        seen.add(decision_id)
        out.runs.setdefault(run_id, {}).setdefault(event_id, []).append(event)
        out.versions.setdefault((run_id, event_id), version)
        out.decisions += 1
    return out


def _loop_event(msg: dict[str, object]) -> tuple[str, str, str, LoopEvent, str] | None:
    """(run id, trigger event id, decision id, loop event, policy version) of a well-formed
    loop event, None when a field `compare` needs is missing or not a string."""
    fields = [msg.get(k) for k in ("run_id", "trigger_event_id", "id", "detector", "action")]
    tool, version = msg.get("tool"), msg.get("policy_version")
    if not all(isinstance(f, str) for f in fields) or not isinstance(tool, str):
        return None
    if version is not None and not isinstance(version, str):
        return None
    run_id, event_id, decision_id, detector, action = (str(f) for f in fields)
    return run_id, event_id, decision_id, (detector, action, tool), version or _NO_VERSION
