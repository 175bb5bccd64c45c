"""Every loopguard_* metric that rules, alerts, dashboards and runbooks read is one the
worker exports, with labels and label values it really has."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.contract.deploy_files import recording_rules
from tests.contract.deploy_metrics import (
    EXPORTED_LABELS,
    EXPORTED_METRICS,
    TARGET_LABELS,
    documented_sample_names,
    exported_sample_names,
    family_of,
    grouping_labels,
    metric_names,
    metric_names_used_in_deploy,
    promql_expressions,
    recorded_names,
    selector_matchers,
)


def test_deploy_reads_metrics() -> None:
    # Guards the extraction itself: an empty set would make every check below vacuous.
    assert len(list(promql_expressions())) > 30
    assert {"loopguard_events_total", "loopguard_processing_seconds_bucket"} <= (
        metric_names_used_in_deploy()
    )


def test_every_metric_used_in_deploy_is_exported_by_the_worker_contract() -> None:
    unknown = {
        (where, name)
        for where, expression in promql_expressions()
        for name in metric_names(expression)
        if name not in documented_sample_names()
    }
    assert not unknown, f"metrics the worker does not export: {sorted(unknown)}"


def test_every_exported_metric_family_is_used_somewhere_in_deploy() -> None:
    used = {family_of(name) for name in metric_names_used_in_deploy()}
    assert used == set(EXPORTED_METRICS)


def test_selectors_use_only_exported_labels_and_values() -> None:
    problems = []
    for where, expression in promql_expressions():
        for name, label, operator, value in selector_matchers(expression):
            family = family_of(name)
            assert family is not None
            labels = EXPORTED_LABELS[family]
            if label in TARGET_LABELS:
                continue
            if label not in labels:
                problems.append(f"{where}: {name} has no label {label!r}")
                continue
            allowed = labels[label]
            if operator == "=" and allowed is not None and value not in allowed:
                problems.append(f"{where}: {name}{{{label}={value!r}}} never exists")
    assert not problems, "\n".join(problems)


def test_aggregations_group_by_labels_that_exist() -> None:
    known = (
        TARGET_LABELS
        | {"le", "quantile"}
        | {label for labels in EXPORTED_LABELS.values() for label in labels}
    )
    problems = [
        f"{where}: grouping by unknown label(s) {sorted(grouping_labels(expression) - known)}"
        for where, expression in promql_expressions()
        if grouping_labels(expression) - known
    ]
    assert not problems, "\n".join(problems)


def test_every_recorded_series_that_is_read_is_defined_by_a_recording_rule() -> None:
    defined = {rule["record"] for rule in recording_rules()}
    missing = {
        (where, name)
        for where, expression in promql_expressions()
        for name in recorded_names(expression)
        if name not in defined
    }
    assert not missing, f"recorded series nobody records: {sorted(missing)}"


def contract_registry() -> CollectorRegistry:
    """A registry declared like the worker's, with no label child created yet."""
    registry = CollectorRegistry()
    for family, kind in EXPORTED_METRICS.items():
        labels = sorted(set(EXPORTED_LABELS[family]) - {"le"})
        if kind == "counter":
            Counter(family, family, labels, registry=registry)
        elif kind == "gauge":
            Gauge(family, family, labels, registry=registry)
        else:
            Histogram(family, family, labels, registry=registry)
    return registry


def test_exported_sample_names_reads_a_real_exposition_without_any_sample_yet() -> None:
    exposition = generate_latest(contract_registry()).decode()

    assert exported_sample_names(exposition) == documented_sample_names()


def test_exported_sample_names_covers_what_deploy_uses_on_a_real_exposition() -> None:
    # The same comparison a live worker's /metrics gets in tests/integration/.
    exposition = generate_latest(contract_registry()).decode()

    assert metric_names_used_in_deploy() <= exported_sample_names(exposition)


def test_exported_sample_names_notices_a_renamed_metric() -> None:
    registry = CollectorRegistry()
    Counter("loopguard_event", "renamed", ["type"], registry=registry)
    exposition = generate_latest(registry).decode()

    assert not metric_names_used_in_deploy() <= exported_sample_names(exposition)


def test_every_metric_used_in_deploy_is_exported_by_the_worker_registry() -> None:
    from loopguard_fleet.streams.processing.metrics import Metrics

    exposition = Metrics().render().decode()

    assert metric_names_used_in_deploy() <= exported_sample_names(exposition)


def test_the_worker_registry_labels_match_the_contract() -> None:
    from loopguard_fleet.streams.processing.metrics import Metrics

    metrics = Metrics()
    for event_type in EXPORTED_LABELS["loopguard_events"]["type"] or ():
        metrics.count_events(event_type)
    metrics.count_detection("generic_repeat", "critical")
    metrics.count_command("block_call")
    metrics.count_rejected("not_json")
    metrics.observe_batch(0.01, 2)
    exposition = metrics.render().decode()

    for family in text_string_to_metric_families(exposition):
        contract = family_of(family.samples[0].name) if family.samples else None
        for sample in family.samples:
            assert contract is not None, f"{sample.name} is not in the contract"
            assert set(sample.labels) <= set(EXPORTED_LABELS[contract]), sample


def test_the_tool_label_stays_bounded_however_many_tools_the_fleet_calls() -> None:
    """loopguard_fleet_tool_bad_ratio names the busiest tools and folds the rest into one
    label (docs/fleet.md, "Tool health"): 500 tools export TOOL_LABELS + 1 series."""
    from loopguard_fleet.detectors.fleet.tools import OTHER_TOOLS, TOOL_LABELS, ToolRatio, top_tools
    from loopguard_fleet.streams.processing.metrics import Metrics

    metrics = Metrics()
    ratios = {f"tool-{i}": ToolRatio(i + 1, i % 3, i % 3, 0, 0.1) for i in range(500)}
    metrics.set_tool_ratios(top_tools(ratios))
    exposition = metrics.render().decode()
    tools = [
        sample.labels["tool"]
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "loopguard_fleet_tool_bad_ratio"
    ]
    assert len(tools) == TOOL_LABELS + 1
    assert OTHER_TOOLS in tools and "tool-499" in tools and "tool-0" not in tools
