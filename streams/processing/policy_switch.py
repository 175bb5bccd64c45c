"""Policy switches as input records (docs/policy.md, "Where a switch applies").

The worker that owns the policy topic writes each valid version as a `policy_switch` record to
every partition of both input topics (streams/worker/policy_follower.py). Each input
topic-partition decides an event with the version of the last switch read on it before the
event's offset. Its last switches, each with its input offset, and the policy before the
first, are stored in the run table under `SWITCH_KEY` (one record per table partition, which
holds the runs of both topics' partition of that number): a worker that resumes a
topic-partition at its committed offset decides each event it reads again with the switch in
force at that event's offset. Replay reads the same records, so it switches at the same
offsets, also when it merges both topics into each run's seq order.
"""

from __future__ import annotations

import json
import logging
from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from loopguard_fleet.config import Policy, load_policy
from loopguard_fleet.config.policy_record import encode_policy_record
from loopguard_fleet.config.policy_schema import PolicyError
from loopguard_fleet.detectors import Thresholds
from loopguard_fleet.detectors.fleet import WindowPolicy
from loopguard_fleet.streams.wire.codec import InputRejected

__all__ = [
    "BEFORE_FIRST",
    "EVERY_POLICY_TOPIC",
    "MAX_SWITCHES",
    "SWITCH_KEY",
    "SWITCH_TYPE",
    "InForce",
    "StoredSwitches",
    "SwitchTimeline",
    "dump_switches",
    "encode_switch",
    "follows",
    "load_switches",
    "read_switch",
    "switch_at",
    "switch_entry",
    "switch_offset",
]

log = logging.getLogger(__name__)

Switches = list[tuple[int, dict[str, Any]]]  # (input offset, switch record), in offset order

#: The `type` of a policy switch input record.
SWITCH_TYPE: Final = "policy_switch"
#: The table key of an input partition's policy switch: bytes no run id's UTF-8 key can hold
#: (as the fleet's FIRING_KEY).
SWITCH_KEY: Final = b"\xff\xfeloopguard-policy-switch"
#: How many switches a partition keeps, with the policy before the first: a worker that takes
#: a partition over reads the events after its committed offset again, each decided by the
#: switch in force at its offset (a partition switches far less often than it commits).
MAX_SWITCHES: Final = 16
#: The offset of the entry that holds the policy a partition decided with before its first
#: switch (a worker's start-up policy, which its successor's may not be).
BEFORE_FIRST: Final = -1
#: `RunDriver(follows=…)`: the switch records of every policy topic apply (a replay without
#: --policy-topic). No Kafka topic name holds a `*`.
EVERY_POLICY_TOPIC: Final = "*"


def encode_switch(version: str, document: object, policy_topic: str, policy_offset: int) -> bytes:
    """The `policy_switch` input record of a policy document read at `policy_offset` of
    `policy_topic` (`version`: its version, for readers; the document is what applies)."""
    head = {"type": SWITCH_TYPE, "version": version, "policy_topic": policy_topic,
            "policy_offset": policy_offset}  # fmt: skip
    # The document as the policy record holds it (json: any number a valid policy may hold).
    return encode_policy_record(head)[:-1] + b',"policy":' + encode_policy_record(document) + b"}"


def switch_entry(document: Mapping[str, Any], version: str, policy_topic: str) -> dict[str, Any]:
    """The stored entry of the policy a partition decided with before its first switch."""
    return {"type": SWITCH_TYPE, "version": version, "policy_topic": policy_topic,
            "policy_offset": BEFORE_FIRST, "policy": dict(document)}  # fmt: skip


@dataclass(slots=True)
class StoredSwitches:
    """One table partition's switches: each input topic's (its partition of that number).

    `others`: what a topic not in `topics` starts with. A record of the first format (v1,
    tool-calls switches only, when compaction events were decided with the tool-calls
    partition's policy) gives the other topics its last switch as their policy before their
    first own switch: the version the worker decided them with at that checkpoint."""

    topics: dict[str, Switches] = field(default_factory=dict)
    others: Switches = field(default_factory=list)

    def of(self, topic: str) -> Switches:
        """A topic's switches (the list the caller appends to, stored with the others)."""
        found = self.topics.get(topic)
        if found is None:
            found = self.topics[topic] = list(self.others)
        return found


def dump_switches(stored: StoredSwitches) -> bytes:
    """A table partition's switches as the table stores them (format v2)."""
    doc: dict[str, Any] = {
        "v": 2,
        "topics": {t: [[o, obj] for o, obj in s] for t, s in sorted(stored.topics.items())},
    }
    if stored.others:
        doc["others"] = [[o, obj] for o, obj in stored.others]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def load_switches(raw: bytes | None, v1_topic: str | None) -> StoredSwitches:
    """The switches `dump_switches` stored; none when absent or unreadable. `v1_topic`: the
    input topic whose switches a v1 record holds (the tool-calls topic; None: v1 is ignored)."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return StoredSwitches()
    if not isinstance(doc, dict):
        return StoredSwitches()
    if doc.get("v") == 1:
        entries = _entries(doc.get("switches"))
        if v1_topic is None or not entries:
            return StoredSwitches()
        return StoredSwitches({v1_topic: entries}, [(BEFORE_FIRST, entries[-1][1])])
    topics = doc.get("topics")
    return StoredSwitches(
        {t: _entries(s) for t, s in topics.items()} if isinstance(topics, dict) else {},
        _entries(doc.get("others")),
    )


def _entries(raw: object) -> Switches:
    """The well-formed (offset, record) entries of a stored list."""
    return [
        (e[0], e[1])
        for e in (raw if isinstance(raw, list) else [])
        if isinstance(e, list) and len(e) == 2 and type(e[0]) is int and isinstance(e[1], dict)
    ]


def switch_at(switches: Switches, offset: int) -> dict[str, Any] | None:
    """The switch in force for an event at `offset`: the last one read before it."""
    found = None
    for at, obj in switches:
        if at >= offset:
            break
        found = obj
    return found


def read_switch(obj: Mapping[str, Any], like: Policy) -> Policy:
    """The policy a decoded switch record holds, with `like`'s semantics profile and channel
    tools (a worker's service settings); raises InputRejected(`invalid_policy_switch`)."""
    document = obj.get("policy")
    if not isinstance(document, Mapping) or not isinstance(obj.get("version"), str):
        raise InputRejected("invalid_policy_switch", "a version and a policy object")
    try:
        policy = load_policy(document)
    except PolicyError as exc:
        raise InputRejected("invalid_policy_switch", str(exc).replace("\n", "; ")[:300]) from None
    return policy.with_semantics(like.semantics).with_channel_tools(like.channel_tools)


def follows(obj: Mapping[str, Any], policy_topic: str | None) -> bool:
    """Whether a driver following `policy_topic` applies this switch record: one of its own
    group's policy topic (several worker groups, each following its own, may read one input
    topic: a shadow group's switches are not the enforcing group's). None: no topic. Raises
    InputRejected(`invalid_policy_switch`) for a record that names no topic."""
    source = obj.get("policy_topic")
    if not isinstance(source, str):
        raise InputRejected("invalid_policy_switch", "the policy topic it was read from")
    return policy_topic is not None and policy_topic in (EVERY_POLICY_TOPIC, source)


def switch_offset(obj: Mapping[str, Any]) -> int:
    """The policy-topic offset a switch record names (BEFORE_FIRST: the start-up policy's)."""
    at = obj.get("policy_offset")
    return at if type(at) is int else BEFORE_FIRST


class InForce:
    """A policy deciding an input partition, with its thresholds per agent cached, and, for
    a pushed one (`at`: its policy-topic offset), the window settings its fleet contributions
    carry to the fleet task (None for the start-up policy: the task's own)."""

    __slots__ = ("policy", "thresholds", "tuned", "windows")

    def __init__(self, policy: Policy, at: int = BEFORE_FIRST) -> None:
        self.policy = policy
        self.thresholds: dict[str | None, Thresholds] = {}
        self.tuned = policy.has_tool_tuning
        self.windows = WindowPolicy.of(at, policy.fleet) if at > BEFORE_FIRST else None

    def for_agent(self, agent_id: str | None) -> Thresholds:
        """An agent's thresholds (cached)."""
        th = self.thresholds.get(agent_id)
        if th is None:
            th = self.thresholds[agent_id] = self.policy.for_agent(agent_id)
        return th

    def for_call(self, agent_id: str | None, tool: str | None) -> Thresholds:
        """An agent's thresholds for one call of a (normalised) tool; None: no call."""
        if tool is None or not self.tuned:
            return self.for_agent(agent_id)
        return self.policy.for_call(agent_id, tool)


class SwitchTimeline:
    """One input topic-partition's switches and the policy in force at each of its offsets:
    the last switch before it, else `base`. A worker reads its events in offset order (the
    policy after the last switch, at once); a merged replay reads them in each run's seq
    order, so an event may come before a switch already read."""

    __slots__ = ("_base", "_offsets", "_policies", "entries", "last", "last_at")

    def __init__(self, entries: Switches, base: InForce, where: str) -> None:
        self.entries = entries  # the stored list: appended to in place
        self._base = base
        self._offsets = [at for at, _ in entries]
        self._policies = [self._read(obj, where) for _, obj in entries]
        self.last = self._policies[-1] if entries else base  # in force after the last switch
        self.last_at = entries[-1][0] if entries else BEFORE_FIRST - 1

    def _read(self, obj: dict[str, Any], where: str) -> InForce:
        """A stored switch's policy; the base when it cannot be read (logged)."""
        try:
            return InForce(read_switch(obj, self._base.policy), switch_offset(obj))
        except InputRejected:
            log.exception("dropping an unreadable stored policy switch of %s", where)
            return self._base

    def at(self, offset: int) -> InForce:
        """The policy deciding an event at `offset`."""
        if offset > self.last_at:
            return self.last
        i = bisect_left(self._offsets, offset) - 1  # the last switch before `offset`
        return self._base if i < 0 else self._policies[i]

    def add(self, offset: int, obj: dict[str, Any], policy: InForce) -> None:
        """A switch read at `offset`, after every one held."""
        self.entries.append((offset, obj))
        self._offsets.append(offset)
        self._policies.append(policy)
        self.last, self.last_at = policy, offset

    def trim(self, keep: int) -> None:
        """Keep the last `keep` switches (a worker reads on in offset order)."""
        if len(self.entries) > keep:
            del self.entries[:-keep], self._offsets[:-keep], self._policies[:-keep]
