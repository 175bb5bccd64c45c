"""A policy as a record of the policy topic: its bytes, their validation, and what changes.

The record's value is the policy document (openclaw.json's content) as JSON, key `policy`
(one key: the compacted topic keeps the latest). It is read with the same validation as a
file (`load_policy`), so `loopguard policy push` refuses what `policy check` refuses and a
worker that reads an invalid record anyway gets the same issues, with a reason for its dead
letter: `policy_not_json`, `policy_too_large` or `policy_invalid` (docs/policy.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from loopguard_fleet.config.policy import Policy, load_policy
from loopguard_fleet.config.policy_schema import PolicyError, PolicyIssue, show

__all__ = [
    "MAX_POLICY_RECORD_BYTES",
    "POLICY_KEY",
    "PolicyRecordError",
    "effective_changes",
    "encode_policy_record",
    "read_policy_record",
]

#: The policy topic's one key.
POLICY_KEY: Final = b"policy"
#: A policy record's largest value; a fleet's policy is a few kilobytes.
MAX_POLICY_RECORD_BYTES: Final = 256 * 1024


class PolicyRecordError(PolicyError):
    """A policy record that cannot be used; `reason` names it for its dead letter."""

    def __init__(self, reason: str, issues: list[PolicyIssue]) -> None:
        super().__init__(issues)
        self.reason = reason

    def __reduce__(self) -> tuple[type[PolicyRecordError], tuple[str, list[PolicyIssue]]]:  # type: ignore[override]
        return (type(self), (self.reason, self.issues))


def encode_policy_record(document: object) -> bytes:
    """A parsed policy document as the policy topic's value (compact JSON)."""
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode()


def read_policy_record(value: bytes | None) -> Policy:
    """The policy a record holds; raises PolicyRecordError (with its reason) otherwise."""
    if value is None:
        raise PolicyRecordError("policy_not_json", [PolicyIssue("", "an empty record")])
    if len(value) > MAX_POLICY_RECORD_BYTES:
        message = f"{len(value)} bytes, more than the {MAX_POLICY_RECORD_BYTES} a policy may have"
        raise PolicyRecordError("policy_too_large", [PolicyIssue("", message)])
    try:
        document = json.loads(value)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise PolicyRecordError("policy_not_json", [PolicyIssue("", f"not JSON: {exc}")]) from exc
    if not isinstance(document, Mapping):
        message = f"must be an object (openclaw.json's root), got {show(document)}"
        raise PolicyRecordError("policy_invalid", [PolicyIssue("", message)])
    try:
        return load_policy(document)
    except PolicyError as exc:
        raise PolicyRecordError("policy_invalid", exc.issues) from exc


def effective_changes(live: Policy | None, new: Policy) -> list[str]:
    """One line per effective setting that differs (global, default agent, each agent, the
    tool table), `path: old → new`; every line of the new policy when none is live."""
    before = _flat(live.effective_all()) if live is not None else {}
    after = _flat(new.effective_all())
    lines = []
    for path in sorted(before.keys() | after.keys()):
        old, now = before.get(path, _ABSENT), after.get(path, _ABSENT)
        if old != now:
            lines.append(f"{path}: {_show(old)} → {_show(now)}")
    return lines


_ABSENT: Final = object()


def _show(value: object) -> str:
    return "(none)" if value is _ABSENT else json.dumps(value, ensure_ascii=False)


def _flat(tree: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, path))
        else:
            out[path] = value
    return out
