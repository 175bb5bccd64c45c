"""Schema of one `tools.loopDetection` block: strict pydantic models and its validation.

Rules: docs/semantics.md §2.

    PolicyError           a policy that cannot be used; `.issues` lists every problem
    └── .issues: list[PolicyIssue(path, message)]

`validate_block` checks one block on its own and reports every problem as a `PolicyIssue`
whose path is the full path in the file (`agents.list[2].tools.loopDetection.historySize`).
pydantic checks keys and value types; its errors are translated into the documented paths
and into messages that name the culprit and the valid alternatives. The two ordering checks run
on the raw values, outside pydantic, so they are reported even when another key of the block fails
(a pydantic `model_validator` would be skipped then).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, NoReturn

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from loopguard_fleet.detectors.errors import LoopGuardError


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    """One problem in a policy: where (full dotted path, "" for the root) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PolicyError(LoopGuardError):
    """A policy that cannot be used; `issues` lists every problem: global block, then agents."""

    def __init__(self, issues: list[PolicyIssue]) -> None:
        super().__init__("\n".join(str(issue) for issue in issues))
        self.issues = issues

    def __reduce__(self) -> tuple[type[PolicyError], tuple[list[PolicyIssue]]]:
        return (type(self), (self.issues,))  # so a pickled error keeps its issues


WARNING_BEFORE_CRITICAL = (
    "tools.loopDetection.warningThreshold must be lower than criticalThreshold."
)
CRITICAL_BEFORE_GLOBAL = (
    "tools.loopDetection.criticalThreshold must be lower than globalCircuitBreakerThreshold."
)


def show(value: object) -> str:
    """Render a raw value as it would appear in the JSON5 file, shortened for messages."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def as_whole(value: object) -> int | None:
    """Return `value` as an int when it is a whole number > 0 (10.0 counts), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None  # also NaN and ±Infinity
    return int(value) if value > 0 else None


def reject(rule: str, value: object, unquoted: str | None = None) -> NoReturn:
    """Fail one value with our own message; pydantic keeps it verbatim as the error's msg."""
    hint = ""
    if value is None:
        hint = " (leave the key out to inherit or use the default)"
    elif isinstance(value, bool):
        hint = " (a boolean is never a number)"
    elif unquoted is not None:
        hint = f" (a string; write {unquoted} without quotes)"
    detail = f"{rule}, got {show(value)}{hint}"
    raise PydanticCustomError("policy_value", "{detail}", {"detail": detail})


def _whole(value: object) -> int:
    whole = as_whole(value)
    if whole is None:
        unquoted = None
        digits = value.strip() if isinstance(value, str) else ""
        if digits.isdecimal() and len(digits) <= 18 and int(digits) > 0:
            unquoted = str(int(digits))
        reject("must be a whole number > 0", value, unquoted)
    return whole


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        spelled = value.strip().lower() if isinstance(value, str) else None
        reject("must be a boolean (true/false)", value, spelled if spelled in _BOOLS else None)
    return value


_BOOLS = ("true", "false")


def object_check(model: type[BaseModel]) -> BeforeValidator:
    """A before-validator refusing null for a nested block, with the block's own message."""

    def check(value: object) -> object:
        if value is None:
            reject(object_rule(model), value)
        return value

    return BeforeValidator(check)


# The before-validators own every check, so strict mode never sees 10.0 and every message is
# ours. They wrap `X | None` so that an explicit null is an error; an absent key stays None
# (defaults are not validated).
# WithJsonSchema: the published schema says what the file may hold (null is refused).
PositiveWhole = Annotated[
    int | None,
    BeforeValidator(_whole),
    WithJsonSchema({"type": "integer", "minimum": 1}),
]
Flag = Annotated[bool | None, BeforeValidator(_flag), WithJsonSchema({"type": "boolean"})]
STRICT = ConfigDict(strict=True, extra="forbid", frozen=True)


class DetectorsBlock(BaseModel):
    """`detectors`: per-detector switches; None means unset (inherit, then default true)."""

    model_config = STRICT

    generic_repeat: Flag = Field(default=None, alias="genericRepeat")
    known_poll_no_progress: Flag = Field(default=None, alias="knownPollNoProgress")
    ping_pong: Flag = Field(default=None, alias="pingPong")


class PostCompactionGuardBlock(BaseModel):
    """`postCompactionGuard`: only `windowSize`; the guard's switch is the block's `enabled`."""

    model_config = STRICT

    window_size: PositiveWhole = Field(default=None, alias="windowSize")


class LoopDetectionBlock(BaseModel):
    """One validated `tools.loopDetection` block as written; None means unset."""

    model_config = STRICT

    enabled: Flag = None
    history_size: PositiveWhole = Field(default=None, alias="historySize")
    warning_threshold: PositiveWhole = Field(default=None, alias="warningThreshold")
    critical_threshold: PositiveWhole = Field(default=None, alias="criticalThreshold")
    unknown_tool_threshold: PositiveWhole = Field(default=None, alias="unknownToolThreshold")
    global_circuit_breaker_threshold: PositiveWhole = Field(
        default=None, alias="globalCircuitBreakerThreshold"
    )
    detectors: Annotated[DetectorsBlock | None, object_check(DetectorsBlock)] = None
    post_compaction_guard: Annotated[
        PostCompactionGuardBlock | None, object_check(PostCompactionGuardBlock)
    ] = Field(default=None, alias="postCompactionGuard")


def _keys(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(field.alias or name for name, field in model.model_fields.items())


_MODELS: dict[tuple[str | int, ...], type[BaseModel]] = {
    (): LoopDetectionBlock,
    ("detectors",): DetectorsBlock,
    ("postCompactionGuard",): PostCompactionGuardBlock,
}


def join(path: str, *parts: str | int) -> str:
    """Extend a dotted path: join("agents", "list", 2) == "agents.list[2]"."""
    for part in parts:
        if isinstance(part, int):
            path = f"{path}[{part}]"
        elif path:
            path = f"{path}.{part}"
        else:
            path = part
    return path


def object_rule(model: type[BaseModel]) -> str:
    return f"must be an object (keys: {', '.join(_keys(model))})"


def not_an_object(model: type[BaseModel], value: object) -> str:
    """The message for a block (or nested object) that is not a JSON object."""
    return f"{object_rule(model)}, got {show(value)}"


def issue_of(
    error: ErrorDetails,
    path: str,
    models: Mapping[tuple[str | int, ...], type[BaseModel]] | None = None,
    pattern: Callable[[tuple[str | int, ...]], tuple[str | int, ...]] = tuple,
) -> PolicyIssue:
    """One pydantic error as a PolicyIssue at its full path; `models` maps nested locations
    (as `pattern` spells them) to their model, for the valid keys; the root model is `()`."""
    models = _MODELS if models is None else models
    root = models[()]
    loc = tuple(part for part in error["loc"] if isinstance(part, str | int))
    if error["type"] == "extra_forbidden":
        key = str(loc[-1])
        valid = _keys(models.get(pattern(loc[:-1]), root))
        close = difflib.get_close_matches(key, valid, n=1)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        message = f"unknown key {key!r}{guess}; valid keys: {', '.join(valid)}"
        return PolicyIssue(join(path, *loc[:-1]), message)
    if error["type"] in {"model_type", "model_attributes_type", "dict_type"}:
        model = models.get(pattern(loc), root)
        return PolicyIssue(join(path, *loc), not_an_object(model, error["input"]))
    return PolicyIssue(join(path, *loc), error["msg"])


def _ordering(raw: Mapping[str, object], path: str) -> list[PolicyIssue]:
    warning, critical, breaker = (
        as_whole(raw.get(key))
        for key in ("warningThreshold", "criticalThreshold", "globalCircuitBreakerThreshold")
    )
    issues = []
    if warning is not None and critical is not None and warning >= critical:
        issues.append(PolicyIssue(join(path, "criticalThreshold"), WARNING_BEFORE_CRITICAL))
    if critical is not None and breaker is not None and critical >= breaker:
        issues.append(
            PolicyIssue(join(path, "globalCircuitBreakerThreshold"), CRITICAL_BEFORE_GLOBAL)
        )
    return issues


def validate_block(raw: object, path: str) -> tuple[LoopDetectionBlock | None, list[PolicyIssue]]:
    """Validate one block on its own; return it (None if invalid) and every issue found."""
    if not isinstance(raw, Mapping):
        return None, [PolicyIssue(path, not_an_object(LoopDetectionBlock, raw))]
    # Strict models take only dicts; a caller's other Mapping types are copied one level down.
    data = {key: dict(value) if isinstance(value, Mapping) else value for key, value in raw.items()}
    issues = _ordering(data, path)
    try:
        block = LoopDetectionBlock.model_validate(data)
    except ValidationError as exc:
        return None, [issue_of(error, path) for error in exc.errors()] + issues
    return (None if issues else block), issues
