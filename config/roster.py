"""The agent roster of an openclaw.json: per-agent loopDetection blocks in either shape.

    agents.list[i]      {id, default?, tools.loopDetection?}   the configurable era's shape
    agents.entries.<id> {default?, tools.loopDetection?}        OpenClaw 2026.9's keyed shape

Choices (docs/semantics.md, "Policy shapes"):
- OpenClaw 2026.9 reads `agents.entries` whenever it is present and then ignores
  `agents.list`; a file with both where `agents.list` still holds a loopDetection block is an
  error at `agents.list` (the block would silently never apply).
- Keyed ids are normalised as OpenClaw normalises agent ids (trim, lower-case, other
  characters as `-`), so `"Safe Runner"` is the agent `safe-runner`; two keys naming the same
  agent are an error when either has a block. List ids stay exact (docs/semantics.md §2).
- `default: true` marks the agent whose block applies to events without `agent_id`. It must
  be a boolean; more than one marked agent, or a marker under `agents.ownership: "explicit"`
  (where OpenClaw ignores markers), is an error at the marker. OpenClaw's sole-agent fallback
  is not applied: such runtimes send `agent_id`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loopguard_fleet.config.policy_schema import (
    LoopDetectionBlock,
    PolicyIssue,
    join,
    show,
    validate_block,
)

__all__ = ["Roster", "normalize_agent_id", "read_roster"]

_VALID_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$", re.IGNORECASE | re.ASCII)
_INVALID_RUN = re.compile(r"[^a-z0-9_-]+")
_ABSENT = object()


def normalize_agent_id(raw: str) -> str:
    """An agent id as OpenClaw normalises it (normalizeAgentId); `main` when nothing is left."""
    trimmed = raw.strip()
    lowered = trimmed.lower()
    if _VALID_ID.match(trimmed):
        return lowered
    return _INVALID_RUN.sub("-", lowered).strip("-")[:64] or "main"


@dataclass(frozen=True, slots=True)
class Roster:
    """The agents that carry a loopDetection block, in file order, and the default agent."""

    blocks: tuple[tuple[str, LoopDetectionBlock], ...] = ()
    default_agent: str | None = None
    is_keyed: bool = False  # agents.entries: ids are matched after OpenClaw's normalisation


def _block_of(
    entry: Mapping[str, object], path: str, issues: list[PolicyIssue]
) -> LoopDetectionBlock | None:
    tools = entry.get("tools", _ABSENT)
    if tools is _ABSENT:
        return None
    if not isinstance(tools, Mapping):
        issues.append(PolicyIssue(join(path, "tools"), f"must be an object, got {show(tools)}"))
        return None
    if "loopDetection" not in tools:
        return None
    block, found = validate_block(tools["loopDetection"], join(path, "tools", "loopDetection"))
    issues.extend(found)
    return block


def _has_block(entry: object) -> bool:
    tools = entry.get("tools") if isinstance(entry, Mapping) else None
    return isinstance(tools, Mapping) and "loopDetection" in tools


def _marker(entry: Mapping[str, object], path: str, issues: list[PolicyIssue]) -> bool:
    value = entry.get("default", _ABSENT)
    if value is _ABSENT:
        return False
    if not isinstance(value, bool):
        message = f"must be a boolean (true marks the default agent), got {show(value)}"
        issues.append(PolicyIssue(join(path, "default"), message))
        return False
    return value


def _list_entries(
    entries: object, issues: list[PolicyIssue]
) -> list[tuple[str, str, Mapping[str, object]]]:
    """(id, path, entry) of `agents.list`; ids exact, duplicates with a block reported."""
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        issues.append(PolicyIssue("agents.list", f"must be an array, got {show(entries)}"))
        return []
    first_at: dict[str, int] = {}
    with_block: set[str] = set()
    for index, entry in enumerate(entries):
        if isinstance(entry, Mapping) and isinstance(agent_id := entry.get("id"), str):
            first_at.setdefault(agent_id, index)
            if _has_block(entry):
                with_block.add(agent_id)
    found: list[tuple[str, str, Mapping[str, object]]] = []
    for index, entry in enumerate(entries):
        path = join("agents.list", index)
        if not isinstance(entry, Mapping):
            message = f"must be an object (an agent entry), got {show(entry)}"
            issues.append(PolicyIssue(path, message))
            continue
        agent_id = entry.get("id")
        named = isinstance(agent_id, str) and bool(agent_id)
        if (_has_block(entry) or entry.get("default") is True) and not named:
            message = f"must be a non-empty string naming the agent, got {show(agent_id)}"
            issues.append(PolicyIssue(join(path, "id"), message))
        elif isinstance(agent_id, str) and agent_id in with_block and first_at[agent_id] != index:
            message = (
                f"duplicate agent id {agent_id!r} (first at agents.list[{first_at[agent_id]}]);"
                " ids must be unique when an entry has a loopDetection block"
            )
            issues.append(PolicyIssue(join(path, "id"), message))
        if isinstance(agent_id, str) and agent_id and first_at.get(agent_id) == index:
            found.append((agent_id, path, entry))
        else:
            _block_of(entry, path, issues)  # still validated, so every error is listed
    return found


def _keyed_entries(
    entries: object, issues: list[PolicyIssue]
) -> list[tuple[str, str, Mapping[str, object]]]:
    """(normalised id, path, entry) of `agents.entries`; colliding ids with a block reported."""
    if not isinstance(entries, Mapping):
        message = f"must be an object keyed by agent id, got {show(entries)}"
        issues.append(PolicyIssue("agents.entries", message))
        return []
    first_key: dict[str, str] = {}
    found: list[tuple[str, str, Mapping[str, object]]] = []
    for key, entry in entries.items():
        path = join("agents.entries", str(key))
        if not isinstance(entry, Mapping):
            message = f"must be an object (an agent entry), got {show(entry)}"
            issues.append(PolicyIssue(path, message))
            continue
        agent_id = normalize_agent_id(str(key))
        earlier = first_key.setdefault(agent_id, str(key))
        if earlier != key:
            if _has_block(entry) or _has_block(entries[earlier]):
                message = (
                    f"names the agent {agent_id!r} like agents.entries.{earlier} (OpenClaw "
                    "normalises agent ids); only the first would apply"
                )
                issues.append(PolicyIssue(path, message))
            _block_of(entry, path, issues)
            continue
        found.append((agent_id, path, entry))
    return found


def read_roster(document: Mapping[str, object], issues: list[PolicyIssue]) -> Roster:
    """Validate the roster of a parsed openclaw.json; problems are appended to `issues`."""
    agents = document.get("agents", _ABSENT)
    if agents is _ABSENT:
        return Roster()
    if not isinstance(agents, Mapping):
        issues.append(PolicyIssue("agents", f"must be an object, got {show(agents)}"))
        return Roster()
    listed = agents.get("list", _ABSENT)
    keyed = agents.get("entries", _ABSENT)
    if keyed is not _ABSENT:
        if isinstance(listed, Sequence) and any(_has_block(e) for e in listed):
            message = (
                "has loopDetection blocks, but agents.entries is present and OpenClaw then "
                "ignores agents.list; move them to agents.entries.<id>.tools.loopDetection"
            )
            issues.append(PolicyIssue("agents.list", message))
        rows = _keyed_entries(keyed, issues)
    elif listed is not _ABSENT:
        rows = _list_entries(listed, issues)
    else:
        rows = []
    blocks: list[tuple[str, LoopDetectionBlock]] = []
    marked: list[tuple[str, str]] = []
    for agent_id, path, entry in rows:
        block = _block_of(entry, path, issues)
        if block is not None:
            blocks.append((agent_id, block))
        if _marker(entry, path, issues):
            marked.append((agent_id, path))
    default_agent = _default_agent(agents, marked, issues)
    return Roster(tuple(blocks), default_agent, keyed is not _ABSENT)


def _default_agent(
    agents: Mapping[str, object], marked: list[tuple[str, str]], issues: list[PolicyIssue]
) -> str | None:
    if not marked:
        return None
    if agents.get("ownership") == "explicit":
        for _, path in marked:
            message = (
                'has no effect under agents.ownership "explicit" (OpenClaw ignores it); '
                "remove it, or send agent_id with every event"
            )
            issues.append(PolicyIssue(join(path, "default"), message))
        return None
    if len(marked) > 1:
        first = marked[0][1]
        for _, path in marked[1:]:
            message = f"a second default agent (first: {first}); mark exactly one"
            issues.append(PolicyIssue(join(path, "default"), message))
        return None
    return marked[0][0]
