"""Schema of LoopGuard's own `loopguard` section of a policy file: strict models, validation.

    loopguard.mode                        "enforce" (default) | "observe" (shadow)
    loopguard.tools.<tool>                {warningThreshold, criticalThreshold, exempt, knownPoll}
    loopguard.agents.<id>.mode            the same, for one agent
    loopguard.agents.<id>.tools.<tool>    the same, for one agent
    loopguard.fleet                       {enabled, windowSeconds, minRuns, earlyAction,
                                           earlyAtCount, toolHealth} (docs/fleet.md, "Tuning")
    loopguard.fleet.toolHealth            {enabled, errorRatio, minRuns} (docs/fleet.md)

This module is the one place that reads the section: every LoopGuard-only policy setting is a
field of `LoopGuardSection`, validated here with the same strictness and error paths as
`tools.loopDetection` (unknown keys, wrong types, `null`, warning ≥ critical are errors at
their full path), and published as JSON Schema by `loopguard schema --policy`.

Choices (docs/policy.md, "Per-tool tuning"):
- Tool names are normalised as the engine normalises a call's tool (trim, lower-case, aliases:
  `bash` is `exec`); two keys naming the same tool in one block are an error.
- Agent ids are kept as written and matched like the roster's (config/policy.py).
- A file without `loopguard` yields None: the policy behaves exactly as without the section.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from loopguard_fleet.config.policy_schema import (
    STRICT,
    WARNING_BEFORE_CRITICAL,
    Flag,
    PolicyIssue,
    PositiveWhole,
    as_whole,
    issue_of,
    join,
    object_check,
    object_rule,
    reject,
    show,
)
from loopguard_fleet.detectors.fleet.settings import (
    EARLY_ACTIONS,
    EarlyAction,
    FleetSettings,
    ToolHealthSettings,
)
from loopguard_fleet.detectors.hashing import normalize_tool

__all__ = [
    "MODES",
    "SECTION",
    "AgentSection",
    "FleetSection",
    "LoopGuardSection",
    "Mode",
    "ToolTuning",
    "read_section",
    "section_schema",
]

SECTION = "loopguard"

Mode = Literal["enforce", "observe"]
#: enforce: decisions are sent as commands; observe (shadow): published as loop events only.
MODES: Final[tuple[Mode, ...]] = ("enforce", "observe")


def _mode(value: object) -> object:
    if value in MODES and isinstance(value, str):
        return value
    spelled = value.strip().lower() if isinstance(value, str) else None
    hint = f" (did you mean {spelled!r}?)" if spelled in MODES else ""
    if value is None:
        hint = " (leave the key out to inherit)"
    detail = f"must be 'enforce' or 'observe', got {show(value)}{hint}"
    raise PydanticCustomError("policy_value", "{detail}", {"detail": detail})


ModeSetting = Annotated[
    Mode | None, BeforeValidator(_mode), WithJsonSchema({"type": "string", "enum": list(MODES)})
]


def _table(what: str) -> BeforeValidator:
    def check(value: object) -> object:
        if not isinstance(value, Mapping):
            reject(f"must be an object keyed by {what}", value)
        return value

    return BeforeValidator(check)


class ToolTuning(BaseModel):
    """One tool's settings; None means unset (inherit the less specific layer)."""

    model_config = STRICT

    warning_threshold: PositiveWhole = Field(default=None, alias="warningThreshold")
    critical_threshold: PositiveWhole = Field(default=None, alias="criticalThreshold")
    exempt: Flag = None  # no rolling detector fires for this tool
    known_poll: Flag = Field(default=None, alias="knownPoll")  # an operator's own polling tool


ToolTable = Annotated[
    dict[str, Annotated[ToolTuning, object_check(ToolTuning)]], _table("tool name")
]


class AgentSection(BaseModel):
    """`loopguard.agents.<id>`: one agent's LoopGuard settings."""

    model_config = STRICT

    mode: ModeSetting = None  # None: the section's mode
    tools: ToolTable = Field(default_factory=dict)


# Bounds that keep the fleet tables' memory and a signal's meaning sane: a window longer
# than an hour keeps an outage firing long after it ended; one run is not a fleet.
MAX_WINDOW_SECONDS: Final = 3600
MIN_RUNS: Final = 2


def _whole_in(low: int, high: int | None) -> BeforeValidator:
    rule = (
        f"must be a whole number from {low} to {high}"
        if high
        else f"must be a whole number ≥ {low}"
    )

    def check(value: object) -> object:
        whole = as_whole(value)
        if whole is None or whole < low or (high is not None and whole > high):
            digits = value.strip() if isinstance(value, str) else ""
            number = int(digits) if digits.isdecimal() and len(digits) <= 18 else None
            fits = number is not None and low <= number <= (high or number)
            reject(rule, value, str(number) if fits else None)
        return whole

    return BeforeValidator(check)


def _early_action(value: object) -> object:
    if value not in EARLY_ACTIONS:
        reject('must be "warn" or "block"', value)
    return value


WindowSeconds = Annotated[
    int | None,
    _whole_in(1, MAX_WINDOW_SECONDS),
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_WINDOW_SECONDS}),
]
RunCount = Annotated[
    int | None, _whole_in(MIN_RUNS, None), WithJsonSchema({"type": "integer", "minimum": MIN_RUNS})
]


def _ratio(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        reject("must be a number above 0 and at most 1", value)
    return float(value)


Ratio = Annotated[
    float | None,
    BeforeValidator(_ratio),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
]


class ToolHealthSection(BaseModel):
    """`loopguard.fleet.toolHealth`: per-tool error/no-progress signals; None means unset."""

    model_config = STRICT

    enabled: Flag = None
    error_ratio: Ratio = Field(default=None, alias="errorRatio")
    min_runs: RunCount = Field(default=None, alias="minRuns")

    def resolve(self) -> ToolHealthSettings:
        """The settings with every unset key at its default."""
        default = ToolHealthSettings()
        return ToolHealthSettings(
            enabled=default.enabled if self.enabled is None else self.enabled,
            error_ratio=self.error_ratio or default.error_ratio,
            min_runs=self.min_runs or default.min_runs,
        )


class FleetSection(BaseModel):
    """`loopguard.fleet`: fleet signals and fleet-informed early warning; None means unset."""

    model_config = STRICT

    enabled: Flag = None
    window_seconds: WindowSeconds = Field(default=None, alias="windowSeconds")
    min_runs: RunCount = Field(default=None, alias="minRuns")
    early_action: Annotated[
        EarlyAction | None,
        BeforeValidator(_early_action),
        WithJsonSchema({"enum": list(EARLY_ACTIONS)}),
    ] = Field(default=None, alias="earlyAction")
    early_at_count: PositiveWhole = Field(default=None, alias="earlyAtCount")
    tool_health: Annotated[ToolHealthSection, object_check(ToolHealthSection)] = Field(
        default_factory=ToolHealthSection, alias="toolHealth"
    )

    def resolve(self) -> FleetSettings:
        """The settings with every unset key at its default."""
        default = FleetSettings()
        return FleetSettings(
            enabled=default.enabled if self.enabled is None else self.enabled,
            window_seconds=self.window_seconds or default.window_seconds,
            min_runs=self.min_runs or default.min_runs,
            early_action=self.early_action or default.early_action,
            early_at_count=self.early_at_count or default.early_at_count,
            tool_health=self.tool_health.resolve(),
        )


class LoopGuardSection(BaseModel):
    """The validated `loopguard` section (mode and per-tool tuning, global then per agent;
    fleet)."""

    model_config = STRICT

    mode: ModeSetting = None  # None: enforce
    tools: ToolTable = Field(default_factory=dict)
    agents: Annotated[
        dict[str, Annotated[AgentSection, object_check(AgentSection)]], _table("agent id")
    ] = Field(default_factory=dict)
    fleet: Annotated[FleetSection, object_check(FleetSection)] = Field(default_factory=FleetSection)


_MODELS: dict[tuple[str | int, ...], type[BaseModel]] = {
    (): LoopGuardSection,
    ("fleet",): FleetSection,
    ("fleet", "toolHealth"): ToolHealthSection,
    ("tools", "*"): ToolTuning,
    ("agents", "*"): AgentSection,
    ("agents", "*", "tools", "*"): ToolTuning,
}


def _pattern(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """A location with its table keys (tool names, agent ids) as `*`, to find its model."""
    out: list[str | int] = []
    is_key = False
    for part in loc:
        out.append("*" if is_key else part)
        is_key = not is_key and part in ("tools", "agents")
    return tuple(out)


def _tool_checks(tools: object, path: str, issues: list[PolicyIssue]) -> None:
    """Warning ≥ critical in one tool block, and two keys naming one tool: errors at a path."""
    if not isinstance(tools, Mapping):
        return
    seen: dict[str, str] = {}
    for key, raw in tools.items():
        tool_path = join(path, str(key))
        name = normalize_tool(str(key))
        first = seen.setdefault(name, str(key))
        if first != key:
            message = f"names the tool {name!r} like {join(path, first)}; only one may be set"
            issues.append(PolicyIssue(tool_path, message))
        if isinstance(raw, Mapping):
            warning = as_whole(raw.get("warningThreshold"))
            critical = as_whole(raw.get("criticalThreshold"))
            if warning is not None and critical is not None and warning >= critical:
                message = WARNING_BEFORE_CRITICAL.replace("tools.loopDetection", tool_path)
                issues.append(PolicyIssue(join(tool_path, "criticalThreshold"), message))


def read_section(
    document: Mapping[str, object], issues: list[PolicyIssue]
) -> LoopGuardSection | None:
    """Validate the `loopguard` section of a parsed policy file; None when it is absent."""
    if SECTION not in document:
        return None
    raw = document[SECTION]
    if not isinstance(raw, Mapping):
        issues.append(PolicyIssue(SECTION, f"{object_rule(LoopGuardSection)}, got {show(raw)}"))
        return None
    found: list[PolicyIssue] = []
    _tool_checks(raw.get("tools"), join(SECTION, "tools"), found)
    agents = raw.get("agents")
    if isinstance(agents, Mapping):
        for agent_id, entry in agents.items():
            if isinstance(entry, Mapping):
                agent_path = join(SECTION, "agents", str(agent_id), "tools")
                _tool_checks(entry.get("tools"), agent_path, found)
    try:
        section = LoopGuardSection.model_validate(_plain(raw))
    except ValidationError as exc:
        errors = [issue_of(e, SECTION, _MODELS, _pattern) for e in exc.errors()]
        issues.extend(sorted(errors + found, key=lambda issue: issue.path))
        return None
    issues.extend(found)
    return None if found else section


def _plain(value: object) -> object:
    """Strict models take only dicts: a caller's other Mapping types are copied."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def section_schema() -> dict[str, object]:
    """The JSON Schema of the `loopguard` section."""
    return LoopGuardSection.model_json_schema(by_alias=True, mode="validation")
