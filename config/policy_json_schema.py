"""The JSON Schema of a policy file, generated from the models that validate it.

`loopguard schema --policy` prints it. The validating models are the single source: the
`tools.loopDetection` block (config/policy_schema.py) wherever OpenClaw reads one, and the
`loopguard` section (config/loopguard_section.py). The rest of an openclaw.json is OpenClaw's
and is left open (`additionalProperties` true); the checks JSON Schema cannot say (warning
below critical, duplicate ids) are `loopguard policy check`'s.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

from loopguard_fleet.config.loopguard_section import SECTION, LoopGuardSection
from loopguard_fleet.config.policy_schema import LoopDetectionBlock

__all__ = ["policy_schema"]

_REFS = "#/$defs/{model}"


def policy_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an openclaw.json as LoopGuard reads it."""
    roots, top = models_json_schema(
        [(LoopDetectionBlock, "validation"), (LoopGuardSection, "validation")],
        by_alias=True,
        ref_template=_REFS,
    )
    block = roots[(LoopDetectionBlock, "validation")]
    tools = {"type": "object", "properties": {"loopDetection": block}}
    entry: dict[str, Any] = {
        "type": "object",
        "properties": {"default": {"type": "boolean"}, "tools": tools},
    }
    named = {"id": {"type": "string", "minLength": 1}}
    listed = {"type": "object", "properties": {**named, **entry["properties"]}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "LoopGuard policy (openclaw.json)",
        "type": "object",
        "properties": {
            "tools": tools,
            "agents": {
                "type": "object",
                "properties": {
                    "list": {"type": "array", "items": listed},
                    "entries": {"type": "object", "additionalProperties": entry},
                },
            },
            SECTION: roots[(LoopGuardSection, "validation")],
        },
        "$defs": _what_the_file_may_hold(top.get("$defs", {})),
    }


def _what_the_file_may_hold(node: Any) -> Any:
    """Drop pydantic's `default: null` and null branches: absent means unset; null is refused."""
    if isinstance(node, list):
        return [_what_the_file_may_hold(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _what_the_file_may_hold(v) for k, v in node.items() if k != "title"}
    if out.get("default", 0) is None:
        del out["default"]
    branches = [b for b in out.get("anyOf", []) if b != {"type": "null"}]
    if "anyOf" in out and len(branches) == 1:
        del out["anyOf"]
        out.update(branches[0])
    return out
