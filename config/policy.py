"""The loop-detection policy: load an openclaw.json, overlay per agent, resolve.

Rules: docs/semantics.md §2.

Choices where docs/semantics.md §2 is silent:
- Only the path to each block is checked: `tools`, `agents` and each agent entry (and its
  `tools`) must be objects, `agents.list` an array and `agents.entries` an object when
  present, else an error at their path. Every other key of the file is ignored, whatever it
  holds. Both roster shapes (`agents.list[]`, `agents.entries.<id>`) and their `default: true`
  marker are read by config/roster.py, whose docstring has the rules.
- An `agents.list` entry without `tools.loopDetection` (or `default`) has no agent block and
  is otherwise ignored (its `id` is not checked). An entry with a block needs a non-empty
  string `id`, and no two entries may share an id if either has a block (the second would
  silently never apply); both are errors at `agents.list[i].id`. List ids are matched exactly
  as written; `agents.entries` keys after OpenClaw's agent-id normalisation.
- The default agent (`default: true`) decides for events whose run names no agent.
- `postCompactionGuard` is strict like the rest and takes only `windowSize` (OpenClaw's type
  has only that key); the guard is switched by the block's `enabled`. `effective()` prints a
  derived `postCompactionGuard.enabled`, which is output only, not an input key.
- `null` is never "unset": a key present with null is an error like any other wrong type.
- A file is read as UTF-8 JSON5; a repeated key keeps its last value, as JSON5.parse does.
- Resolved thresholds are computed once per agent at load, so `for_agent` is a dict lookup;
  ids without a block (and None) get the global result.
- The `loopguard` section (config/loopguard_section.py) tunes tools: the most specific layer
  wins per key (agent's tool, global tool, then the agent's resolved block); a tool's
  critical is raised above its warning, and the breaker above its critical, as for blocks.
  `exempt` turns the rolling detectors off for that tool's calls (`enabled` false in its
  thresholds); `knownPoll` makes its calls known polls. Resolved per (agent, tool) at load.
  `loopguard.fleet` is fleet-wide, not per agent (docs/fleet.md).
- `loopguard.mode` and `loopguard.agents.<id>.mode` (shadow mode) resolve agent first, then
  the section, then "enforce", into each `Thresholds.enforce`; an agent with a mode and no
  block of its own gets the global block in its mode. The mode is part of the version.
- Channel tools (docs/semantics.md §3 rule 7) are service settings, not policy: `with_channel_tools`
  bakes them into every resolved `Thresholds`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import json5

from loopguard_fleet.config.loopguard_section import (
    LoopGuardSection,
    Mode,
    ToolTuning,
    read_section,
)
from loopguard_fleet.config.policy_schema import (
    LoopDetectionBlock,
    PolicyError,
    PolicyIssue,
    join,
    show,
    validate_block,
)
from loopguard_fleet.config.roster import normalize_agent_id, read_roster
from loopguard_fleet.detectors.fleet.settings import FleetSettings, ToolHealthSettings
from loopguard_fleet.detectors.hashing import normalize_tool
from loopguard_fleet.detectors.profiles import CONFIGURABLE, Semantics
from loopguard_fleet.detectors.values import Thresholds

__all__ = [
    "DETECTION_ON",
    "DETECTION_ON_TEXT",
    "Policy",
    "PolicyError",
    "PolicyIssue",
    "load_policy",
    "read_policy_document",
]

# The policy `loopguard up` runs and the audits use without --policy: OpenClaw's defaults
# with detection on (OpenClaw itself ships the rolling detectors off).
DETECTION_ON: dict[str, object] = {"tools": {"loopDetection": {"enabled": True}}}
DETECTION_ON_TEXT = "{tools: {loopDetection: {enabled: true}}}\n"

_DEFAULTS = Thresholds()
_T = TypeVar("_T")
_L = TypeVar("_L")


def _pick(layers: Iterable[_L], get: Callable[[_L], _T | None], default: _T) -> _T:
    """The first value set in the layers (most specific first), else the default."""
    for layer in layers:
        value = get(layer)
        if value is not None:
            return value
    return default


def _resolve(
    agent: LoopDetectionBlock | None,
    global_block: LoopDetectionBlock | None,
    channel_tools: frozenset[str],
    semantics: Semantics,
) -> Thresholds:
    """Overlay the agent block on the global one (one level deep), default, then clamp."""
    layers = [block for block in (agent, global_block) if block is not None]
    detectors = [b.detectors for b in layers if b.detectors is not None]
    guards = [b.post_compaction_guard for b in layers if b.post_compaction_guard is not None]
    enabled = _pick(layers, lambda b: b.enabled, None)
    warning = _pick(layers, lambda b: b.warning_threshold, _DEFAULTS.warning_threshold)
    critical = _pick(layers, lambda b: b.critical_threshold, _DEFAULTS.critical_threshold)
    breaker = _pick(
        layers,
        lambda b: b.global_circuit_breaker_threshold,
        _DEFAULTS.global_circuit_breaker_threshold,
    )
    if critical <= warning:
        critical = warning + 1
    if breaker <= critical:
        breaker = critical + 1
    return Thresholds(
        enabled=enabled is True,
        history_size=_pick(layers, lambda b: b.history_size, _DEFAULTS.history_size),
        warning_threshold=warning,
        critical_threshold=critical,
        unknown_tool_threshold=_pick(
            layers, lambda b: b.unknown_tool_threshold, _DEFAULTS.unknown_tool_threshold
        ),
        global_circuit_breaker_threshold=breaker,
        generic_repeat=_pick(detectors, lambda d: d.generic_repeat, _DEFAULTS.generic_repeat),
        known_poll_no_progress=_pick(
            detectors, lambda d: d.known_poll_no_progress, _DEFAULTS.known_poll_no_progress
        ),
        ping_pong=_pick(detectors, lambda d: d.ping_pong, _DEFAULTS.ping_pong),
        # docs/semantics.md §2: the guard is on unless `enabled` is exactly false; unset
        # leaves it on even though the rolling detectors stay off.
        post_compaction_guard=enabled is not False,
        post_compaction_window_size=_pick(
            guards, lambda g: g.window_size, _DEFAULTS.post_compaction_window_size
        ),
        channel_tools=channel_tools,
        semantics=semantics,
    )


ToolTunings = tuple[tuple[str, ToolTuning], ...]


def _tune(base: Thresholds, layers: list[ToolTuning]) -> Thresholds:
    """One tool's thresholds: its tuning layers (most specific first) over the agent's."""
    warning = _pick(layers, lambda t: t.warning_threshold, base.warning_threshold)
    critical = _pick(layers, lambda t: t.critical_threshold, base.critical_threshold)
    if critical <= warning:
        critical = warning + 1
    breaker = max(base.global_circuit_breaker_threshold, critical + 1)
    return replace(
        base,
        enabled=base.enabled and not _pick(layers, lambda t: t.exempt, False),
        warning_threshold=warning,
        critical_threshold=critical,
        global_circuit_breaker_threshold=breaker,
        known_poll=_pick(layers, lambda t: t.known_poll, False),
    )


def _tool_table(
    base: Thresholds, specific: Mapping[str, ToolTuning], general: Mapping[str, ToolTuning]
) -> dict[str, Thresholds]:
    """Thresholds of every tool named in either layer, over one agent's resolved block."""
    names = list(dict.fromkeys([*specific, *general]))
    return {
        name: _tune(base, [t for t in (specific.get(name), general.get(name)) if t is not None])
        for name in names
    }


def _exempt_set(*layers: ToolTuning | None) -> bool:
    """Whether the most specific layer that sets `exempt` sets it true."""
    return _pick([t for t in layers if t is not None], lambda t: t.exempt, False)


def _normalized(tools: Mapping[str, ToolTuning]) -> ToolTunings:
    """A tool table keyed as the engine names tools (the section refuses collisions)."""
    return tuple((normalize_tool(name), tuning) for name, tuning in tools.items())


@dataclass(frozen=True, slots=True)
class Policy:
    """A validated policy: the global block and each agent's block, resolved once at load."""

    global_block: LoopDetectionBlock | None = None
    agent_blocks: tuple[tuple[str, LoopDetectionBlock], ...] = ()
    channel_tools: frozenset[str] = _DEFAULTS.channel_tools
    default_agent: str | None = None  # `default: true`: decides for runs that name no agent
    keyed_ids: bool = False  # agents.entries: run agent ids are normalised before lookup
    semantics: Semantics = CONFIGURABLE
    tool_tunings: ToolTunings = ()  # loopguard.tools, normalised tool names
    agent_tool_tunings: tuple[tuple[str, ToolTunings], ...] = ()  # loopguard.agents.<id>.tools
    mode: Mode = "enforce"  # loopguard.mode
    agent_modes: tuple[tuple[str, Mode], ...] = ()  # loopguard.agents.<id>.mode
    fleet: FleetSettings = field(default_factory=FleetSettings)  # loopguard.fleet
    _global: Thresholds = field(init=False, repr=False, compare=False)
    _agents: Mapping[str, Thresholds] = field(init=False, repr=False, compare=False)
    _tools: Mapping[str | None, Mapping[str, Thresholds]] = field(
        init=False, repr=False, compare=False
    )
    _exempt: Mapping[str | None, frozenset[str]] = field(init=False, repr=False, compare=False)
    _version: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        modes = dict(self.agent_modes)
        resolved = {
            agent_id: replace(
                _resolve(block, self.global_block, self.channel_tools, self.semantics),
                enforce=modes.get(agent_id, self.mode) == "enforce",
            )
            for agent_id, block in self.agent_blocks
        }
        global_th = replace(
            _resolve(None, self.global_block, self.channel_tools, self.semantics),
            enforce=self.mode == "enforce",
        )
        for agent_id, mode in self.agent_modes:  # an agent with a mode and no block of its own
            if agent_id not in resolved:
                resolved[agent_id] = replace(global_th, enforce=mode == "enforce")
        object.__setattr__(self, "_global", global_th)
        object.__setattr__(self, "_agents", resolved)
        general = dict(self.tool_tunings)
        per_agent = dict(self.agent_tool_tunings)
        tools: dict[str | None, Mapping[str, Thresholds]] = {}
        if general or per_agent:
            tools[None] = _tool_table(global_th, {}, general)
            for agent_id in dict.fromkeys([*resolved, *per_agent]):
                base = resolved.get(agent_id, global_th)
                tools[agent_id] = _tool_table(base, dict(per_agent.get(agent_id, ())), general)
        object.__setattr__(self, "_tools", tools)
        # As set, not as read from `enabled`: an agent with detection off still shows them.
        exempt: dict[str | None, frozenset[str]] = {}
        for key, table in tools.items():
            specific = dict(per_agent.get(key, ())) if key is not None else {}
            exempt[key] = frozenset(
                tool for tool in table if _exempt_set(specific.get(tool), general.get(tool))
            )
        object.__setattr__(self, "_exempt", exempt)
        object.__setattr__(self, "_version", self._canonical_version())
        self._stamp(self._version)

    def _stamp(self, version: str) -> None:
        """Name the version on every resolved `Thresholds`, so each decision carries it."""

        def stamped(th: Thresholds) -> Thresholds:
            return replace(th, policy_version=version)

        object.__setattr__(self, "_global", stamped(self._global))
        object.__setattr__(
            self, "_agents", {agent: stamped(th) for agent, th in self._agents.items()}
        )
        object.__setattr__(
            self,
            "_tools",
            {
                key: {tool: stamped(th) for tool, th in table.items()}
                for key, table in self._tools.items()
            },
        )

    @classmethod
    def default(cls) -> Policy:
        """The policy without a file: every value default, rolling detectors off."""
        return cls()

    def for_agent(self, agent_id: str | None) -> Thresholds:
        """Resolved thresholds for a run's agent; None → the default agent, else global."""
        if agent_id is None:
            agent_id = self.default_agent
            if agent_id is None:
                return self._global
        found = self._agents.get(agent_id)
        if found is None and self.keyed_ids:
            found = self._agents.get(normalize_agent_id(agent_id))
        return self._global if found is None else found

    @property
    def has_tool_tuning(self) -> bool:
        """True when the `loopguard` section tunes any tool (else `for_call` is `for_agent`)."""
        return bool(self._tools)

    def for_call(self, agent_id: str | None, tool: str) -> Thresholds:
        """Resolved thresholds for one call of a (normalised) tool by a run's agent."""
        if not self._tools:
            return self.for_agent(agent_id)
        table = self._tools.get(self._agent_key(agent_id))
        if table is None:
            table = self._tools[None]
        found = table.get(tool)
        return self.for_agent(agent_id) if found is None else found

    def _agent_key(self, agent_id: str | None) -> str | None:
        """The id under which an agent's tool table is kept; None for the global table."""
        if agent_id is None:
            agent_id = self.default_agent
            if agent_id is None:
                return None
        if agent_id in self._tools:
            return agent_id
        if self.keyed_ids and normalize_agent_id(agent_id) in self._tools:
            return normalize_agent_id(agent_id)
        return None

    def tool_table(self) -> dict[str, dict[str, dict[str, object]]]:
        """The effective settings of every tuned tool, globally and per agent (`policy check`)."""
        return {
            ("*" if agent_id is None else agent_id): {
                tool: {
                    "warningThreshold": th.warning_threshold,
                    "criticalThreshold": th.critical_threshold,
                    "globalCircuitBreakerThreshold": th.global_circuit_breaker_threshold,
                    "exempt": tool in self._exempt.get(agent_id, ()),
                    "knownPoll": th.known_poll,
                }
                for tool, th in table.items()
            }
            for agent_id, table in self._tools.items()
        }

    def agent_ids(self) -> tuple[str, ...]:
        """Ids of the agents that have their own block, in file order."""
        return tuple(agent_id for agent_id, _ in self.agent_blocks)

    def effective(self, agent_id: str | None) -> dict[str, object]:
        """The resolved block for an agent in OpenClaw's key names (for `policy check`), with
        its per-tool table under `tools` when the policy tunes tools."""
        out = _render(self.for_agent(agent_id))
        if self._tools:
            key = self._agent_key(agent_id)
            out["tools"] = self.tool_table()["*" if key is None else key]
        return out

    def effective_all(self) -> dict[str, object]:
        """Every agent's resolved block, the global one and the default agent (`policy check`);
        with `tools`, the per-tool table keyed by agent (`*`: every other agent), when tuned;
        the fleet settings (`loopguard.fleet`, every key resolved)."""
        out: dict[str, object] = {
            "semantics": self.semantics,
            "defaultAgent": self.default_agent,
            "global": _render(self._global),
            "agents": {agent_id: _render(th) for agent_id, th in self._agents.items()},
        }
        if self._tools:
            out["tools"] = self.tool_table()
        out["fleet"] = self.fleet.to_doc()
        return out

    @property
    def version(self) -> str:
        """The policy's version: a hash of its canonical effective form (`sha256:` + 16 hex).

        Two files that resolve to the same decisions for every agent and tool (whatever their
        comments, key order, spelling of defaults or OpenClaw keys LoopGuard ignores) share it.
        Channel tools are a service setting, not policy, and are not part of it.
        """
        return self._version

    def _canonical_version(self) -> str:
        """Hash the canonical effective form (computed once, at load)."""
        canonical = {**self.effective_all(), "agentIds": "keyed" if self.keyed_ids else "exact"}
        if self.fleet.tool_health == ToolHealthSettings():
            # Tool health at its defaults leaves the version what it was before the key
            # existed: recorded decisions name the versions of policies that never set it.
            fleet = dict(self.fleet.to_doc())
            del fleet["toolHealth"]
            canonical["fleet"] = fleet
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def with_channel_tools(self, tools: Iterable[str]) -> Policy:
        """The same policy whose resolved thresholds carry these provider channel tools."""
        return replace(self, channel_tools=frozenset(tools))

    def with_semantics(self, semantics: Semantics) -> Policy:
        """The same policy whose resolved thresholds carry this semantics profile."""
        return replace(self, semantics=semantics)


def _render(th: Thresholds) -> dict[str, object]:
    return {
        "mode": "enforce" if th.enforce else "observe",
        "enabled": th.enabled,
        "historySize": th.history_size,
        "warningThreshold": th.warning_threshold,
        "criticalThreshold": th.critical_threshold,
        "unknownToolThreshold": th.unknown_tool_threshold,
        "globalCircuitBreakerThreshold": th.global_circuit_breaker_threshold,
        "detectors": {
            "genericRepeat": th.generic_repeat,
            "knownPollNoProgress": th.known_poll_no_progress,
            "pingPong": th.ping_pong,
        },
        "postCompactionGuard": {
            "enabled": th.post_compaction_guard,
            "windowSize": th.post_compaction_window_size,
        },
    }


def load_policy(source: str | os.PathLike[str] | Mapping[str, object]) -> Policy:
    """Load and validate a policy from an openclaw.json path or its parsed document."""
    document: object = source if isinstance(source, Mapping) else _read(source)
    issues: list[PolicyIssue] = []
    if not isinstance(document, Mapping):
        message = f"must be an object (openclaw.json's root), got {show(document)}"
        raise PolicyError([PolicyIssue("", message)])
    global_block = _block(_child(document, "", ["tools"], issues), "tools", issues)
    roster = read_roster(document, issues)
    section = read_section(document, issues)
    if issues:
        raise PolicyError(issues)
    section = section or LoopGuardSection()
    return Policy(
        global_block,
        roster.blocks,
        default_agent=roster.default_agent,
        keyed_ids=roster.is_keyed,
        tool_tunings=_normalized(section.tools),
        agent_tool_tunings=tuple(
            (agent_id, _normalized(entry.tools)) for agent_id, entry in section.agents.items()
        ),
        mode=section.mode or "enforce",
        agent_modes=tuple(
            (agent_id, entry.mode)
            for agent_id, entry in section.agents.items()
            if entry.mode is not None
        ),
        fleet=section.fleet.resolve(),
    )


def read_policy_document(path: str | os.PathLike[str]) -> object:
    """The parsed openclaw.json at `path` (raises PolicyError naming the file)."""
    return _read(path)


def _read(path: str | os.PathLike[str]) -> object:
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(
            [PolicyIssue(name, f"not UTF-8 text: {exc.reason} at byte {exc.start}")]
        ) from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise PolicyError([PolicyIssue(name, f"cannot read the policy file: {reason}")]) from exc
    try:
        return json5.loads(text)
    except (ValueError, RecursionError) as exc:
        detail = re.sub(r"^<string>:(\d+) ", r"line \1: ", str(exc))
        raise PolicyError([PolicyIssue(name, f"not valid JSON5: {detail}")]) from exc


_ABSENT = object()


def _child(
    parent: Mapping[str, object] | None, path: str, keys: list[str], issues: list[PolicyIssue]
) -> Mapping[str, object] | None:
    """Follow object keys from `parent`; None when one is absent; an error when not an object."""
    for key in keys:
        if parent is None:
            return None
        value = parent.get(key, _ABSENT)
        path = join(path, key)
        if value is _ABSENT:
            return None
        if not isinstance(value, Mapping):
            issues.append(PolicyIssue(path, f"must be an object, got {show(value)}"))
            return None
        parent = value
    return parent


def _block(
    tools: Mapping[str, object] | None, tools_path: str, issues: list[PolicyIssue]
) -> LoopDetectionBlock | None:
    """Validate `<tools>.loopDetection` when present."""
    if tools is None or "loopDetection" not in tools:
        return None
    block, found = validate_block(tools["loopDetection"], join(tools_path, "loopDetection"))
    issues.extend(found)
    return block
