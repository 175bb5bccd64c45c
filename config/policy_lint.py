"""Warnings for a valid policy that probably does not say what its author meant.

`load_policy` refuses what OpenClaw would refuse; this finds what both accept and ignore: no
`tools.loopDetection` anywhere (detection stays at OpenClaw's defaults, rolling detectors
off), a top-level key one typo away from `tools` or `agents`, an agent entry's or a tools
block's key one typo away from the one LoopGuard reads. `loopguard policy check` prints them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from loopguard_fleet.config.policy_schema import PolicyIssue

__all__ = ["policy_warnings"]

_TOP_LEVEL: Final = ("tools", "agents")
_AGENTS: Final = ("list", "entries", "defaults")
_AGENT_ENTRY: Final = ("id", "tools", "default")
_TOOLS: Final = ("loopDetection",)
_CUTOFF: Final = 0.8


def policy_warnings(document: object) -> list[PolicyIssue]:
    """Every warning for a parsed openclaw.json, each with its path."""
    if not isinstance(document, Mapping):
        return []
    out: list[PolicyIssue] = []
    _near_misses(document, "", _TOP_LEVEL, out)
    blocks = _has_block(document.get("tools"), "tools", out)
    agents = document.get("agents")
    if isinstance(agents, Mapping):
        _near_misses(agents, "agents", _AGENTS, out)
        for path, entry in _agent_entries(agents):
            _near_misses(entry, path, _AGENT_ENTRY, out)
            blocks += _has_block(entry.get("tools"), f"{path}.tools", out)
    if blocks == 0:
        out.insert(
            0,
            PolicyIssue(
                "tools.loopDetection",
                "absent everywhere: OpenClaw's defaults apply, so the rolling detectors stay "
                "off (add {tools: {loopDetection: {enabled: true}}})",
            ),
        )
    return out


def _agent_entries(
    agents: Mapping[object, object],
) -> Iterator[tuple[str, Mapping[object, object]]]:
    listed = agents.get("list")
    if isinstance(listed, Sequence) and not isinstance(listed, str):
        for i, entry in enumerate(listed):
            if isinstance(entry, Mapping):
                yield f"agents.list[{i}]", entry
    keyed = agents.get("entries")
    if isinstance(keyed, Mapping):
        for key, entry in keyed.items():
            if isinstance(entry, Mapping):
                yield f"agents.entries.{key}", entry


def _has_block(tools: object, path: str, out: list[PolicyIssue]) -> int:
    """1 if this tools object has a loopDetection block; warns about a near miss."""
    if not isinstance(tools, Mapping):
        return 0
    if "loopDetection" in tools:
        return 1
    _near_misses(tools, path, _TOOLS, out)
    return 0


def _near_misses(
    obj: Mapping[object, object], path: str, known: Sequence[str], out: list[PolicyIssue]
) -> None:
    for key in obj:
        if not isinstance(key, str) or key in known:
            continue
        near = difflib.get_close_matches(key, known, n=1, cutoff=_CUTOFF)
        if near:
            where = f"{path}.{key}" if path else key
            out.append(PolicyIssue(where, f"unknown key, ignored; did you mean {near[0]!r}?"))
