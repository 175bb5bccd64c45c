"""The worker's metric contract, and the metric names that deploy/ uses.

`metric_names_used_in_deploy()` is what a test compares with what a worker exports: against
the documented contract here (tests/contract/), and against a real worker's /metrics
(tests/integration/) through `exported_sample_names(exposition_text)`:

    assert metric_names_used_in_deploy() <= exported_sample_names(scraped_text)

Names are sample names as PromQL sees them (`loopguard_events_total`,
`loopguard_processing_seconds_bucket`), not family names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from tests.contract.deploy_files import (
    alerting_rules,
    dashboard,
    dashboard_files,
    dashboard_panels,
    fenced_blocks,
    recording_rules,
    runbook_files,
)

# Family name -> type, as prometheus-client declares them (streams/processing/metrics.py).
EXPORTED_METRICS: dict[str, str] = {
    "loopguard_events": "counter",
    "loopguard_detections": "counter",
    "loopguard_commands": "counter",
    "loopguard_events_rejected": "counter",
    "loopguard_duplicates": "counter",
    "loopguard_runs_active": "gauge",
    "loopguard_runs_cached": "gauge",
    "loopguard_runs_packed": "gauge",
    "loopguard_processing_seconds": "histogram",
    "loopguard_verdict_stage_seconds": "histogram",
    "loopguard_policy_info": "gauge",
    "loopguard_engine_info": "gauge",
    "loopguard_fleet_signatures_firing": "gauge",
    "loopguard_fleet_signals": "counter",
    "loopguard_fleet_dropped": "counter",
    "loopguard_fleet_tool_bad_ratio": "gauge",
    "loopguard_fleet_tool_signals": "counter",
    "loopguard_fleet_tools_firing": "gauge",
    "loopguard_otlp_spans_ignored": "counter",
}

# Family name -> label name -> allowed values (None: open set, e.g. dead-letter reasons).
EXPORTED_LABELS: dict[str, dict[str, frozenset[str] | None]] = {
    "loopguard_events": {
        "type": frozenset({"tool_call", "tool_result", "compaction", "run_end"}),
    },
    "loopguard_detections": {
        "detector": frozenset(
            {
                "generic_repeat",
                "known_poll_no_progress",
                "ping_pong",
                "unknown_tool_repeat",
                "global_circuit_breaker",
                "compaction_loop_persisted",
                "fleet_signal",
            }
        ),
        "level": frozenset({"warning", "critical"}),
        "mode": frozenset({"enforce", "observe"}),
    },
    "loopguard_commands": {"command": frozenset({"block_call", "abort_run"})},
    "loopguard_events_rejected": {"reason": None},
    "loopguard_duplicates": {},
    "loopguard_runs_active": {},
    "loopguard_runs_cached": {},
    "loopguard_runs_packed": {},
    "loopguard_processing_seconds": {"le": None},
    "loopguard_verdict_stage_seconds": {
        "stage": frozenset({"fetch", "queue", "engine", "send", "ack"}),
        "le": None,
    },
    "loopguard_policy_info": {"version": None},
    "loopguard_engine_info": {"engine": frozenset({"python", "compiled"})},
    "loopguard_fleet_signatures_firing": {},
    "loopguard_fleet_signals": {"state": frozenset({"firing", "resolved"})},
    "loopguard_fleet_dropped": {"reason": frozenset({"late", "full"})},
    # Tool names are bounded by the exporter (top tools, the rest as "_other"), not by value.
    "loopguard_fleet_tool_bad_ratio": {"tool": None},
    "loopguard_fleet_tool_signals": {"state": frozenset({"firing", "resolved"})},
    "loopguard_fleet_tools_firing": {},
    "loopguard_otlp_spans_ignored": {"reason": frozenset({"other_kind", "duplicate"})},
}

# Labels Prometheus attaches to every scraped series (target labels), never exported.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod", "service", "endpoint"})

_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def sample_names(family: str, kind: str) -> set[str]:
    """The sample names a family of this type can expose (unknown types: the name itself)."""
    return {family + suffix for suffix in _SUFFIXES.get(kind, ("",))}


def documented_sample_names() -> set[str]:
    """Every sample name the documented contract allows."""
    return {
        name for family, kind in EXPORTED_METRICS.items() for name in sample_names(family, kind)
    }


def family_of(sample: str) -> str | None:
    """The documented family a sample name belongs to, or None."""
    for family, kind in EXPORTED_METRICS.items():
        if sample in sample_names(family, kind):
            return family
    return None


def exported_sample_names(exposition: str) -> set[str]:
    """Sample names a /metrics page (Prometheus text format) exports.

    Derived from the families' declared types, so that a labelled counter that has not been
    incremented yet (HELP/TYPE lines, no sample) still counts as exported.
    """
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names |= sample_names(family.name, family.type)
        names |= {sample.name for sample in family.samples}
    return names


def promql_expressions() -> Iterator[tuple[str, str]]:
    """(where, expression) for every PromQL expression under deploy/.

    Rules and alerts, dashboard targets (and query variables), and the ```promql blocks of
    the runbooks. The PrometheusRule under k8s/ is a rendering of the same rules (a test
    checks that), so it is not read twice.
    """
    for rule in recording_rules():
        yield f"record {rule['record']}", rule["expr"]
    for rule in alerting_rules():
        yield f"alert {rule['alert']}", rule["expr"]
    for path in dashboard_files():
        board = dashboard(path)
        for panel in dashboard_panels(board):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    yield f"{path.name} panel {panel['title']!r}", target["expr"]
        for variable in board.get("templating", {}).get("list", []):
            if variable.get("type") == "query":
                yield f"{path.name} variable ${variable['name']}", variable["definition"]
    for path in runbook_files():
        for block in fenced_blocks(path.read_text(encoding="utf-8"), "promql"):
            yield f"runbook {path.name}", block


# A metric name that starts with loopguard_, and is not part of a recorded series name
# (job:loopguard_detections:rate5m) or of some longer identifier.
_METRIC = re.compile(r"(?<![\w:])loopguard_\w+(?![\w:])")
# A recorded series name: level:metric:operations.
_RECORDED = re.compile(r"(?<![\w:])[a-z_]+:\w+:\w+(?![\w:])")
# A selector with matchers, and its matchers.
_SELECTOR = re.compile(r"(?<![\w:])(loopguard_\w+)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(=~|!~|!=|=)\s*\"([^\"]*)\"")
# by (...) / without (...) / on (...) / ignoring (...) label lists.
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def metric_names(expression: str) -> set[str]:
    """The loopguard_* sample names an expression reads."""
    return set(_METRIC.findall(expression))


def recorded_names(expression: str) -> set[str]:
    """The recorded (level:metric:operation) series names an expression reads."""
    return set(_RECORDED.findall(expression))


def selector_matchers(expression: str) -> Iterator[tuple[str, str, str, str]]:
    """(sample name, label, operator, value) for each matcher on a loopguard_* selector."""
    for name, matchers in _SELECTOR.findall(expression):
        for label, operator, value in _MATCHER.findall(matchers):
            yield name, label, operator, value


def grouping_labels(expression: str) -> set[str]:
    """Label names used in by/without/on/ignoring clauses."""
    return {
        label.strip()
        for group in _GROUPING.findall(expression)
        for label in group.split(",")
        if label.strip()
    }


def metric_names_used_in_deploy() -> set[str]:
    """Every loopguard_* sample name that rules, alerts, dashboards and runbooks read."""
    return {name for _, expression in promql_expressions() for name in metric_names(expression)}
