"""Policy switches as input records (docs/policy.md, "Where a switch applies").

The worker that owns the policy topic writes each valid version as a `policy_switch` record to
every partition of the tool-calls topic (streams/worker/policy_follower.py). Each input
partition decides with the version of the last switch read on it, in offset order. Its last
switches, each with its input offset, and the policy before the first, are stored in the run
table under `SWITCH_KEY`: a worker that resumes the partition at its committed offset decides
each event it reads again with the switch in force at that event's offset. Replay reads the
same records, so it switches at the same offsets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from loopguard_fleet.config import Policy, load_policy
from loopguard_fleet.config.policy_record import encode_policy_record
from loopguard_fleet.config.policy_schema import PolicyError
from loopguard_fleet.detectors import Thresholds
from loopguard_fleet.streams.wire.codec import InputRejected

__all__ = [
    "BEFORE_FIRST",
    "EVERY_POLICY_TOPIC",
    "MAX_SWITCHES",
    "SWITCH_KEY",
    "SWITCH_TYPE",
    "InForce",
    "dump_switches",
    "encode_switch",
    "follows",
    "load_switches",
    "read_switch",
    "switch_at",
    "switch_entry",
]

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


def dump_switches(switches: list[tuple[int, dict[str, Any]]]) -> bytes:
    """A partition's switches (input offset, record) as the table stores them."""
    doc = {"v": 1, "switches": [[offset, obj] for offset, obj in switches]}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def load_switches(raw: bytes | None) -> list[tuple[int, dict[str, Any]]]:
    """The switches `dump_switches` stored; none when absent or unreadable."""
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return []
    entries = doc.get("switches") if isinstance(doc, dict) else None
    return [
        (e[0], e[1])
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, list) and len(e) == 2 and type(e[0]) is int and isinstance(e[1], dict)
    ]


def switch_at(switches: list[tuple[int, dict[str, Any]]], offset: int) -> dict[str, Any] | None:
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


class InForce:
    """A policy deciding an input partition, with its thresholds per agent cached."""

    __slots__ = ("policy", "thresholds", "tuned")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.thresholds: dict[str | None, Thresholds] = {}
        self.tuned = policy.has_tool_tuning

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
