"""Prometheus rules and alerts: promtool checks them, runs their unit tests, and the alerts
carry what on-call needs (for, severity, summary, description, runbook)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.contract.deploy_files import (
    K8S_BASE,
    PROMETHEUS_CONFIG,
    RUNBOOKS_DIR,
    alerting_rules,
    recording_rules,
    rule_files,
    rule_groups,
    rule_test_files,
    yaml_file,
)

# The alerts the deployment promises (deploy/README.md); renaming one is a contract change.
EXPECTED_ALERTS = {
    "LoopStorm",
    "SustainedCriticalBlocks",
    "DeadLetterRate",
    "WorkerDown",
    "NoEvents",
    "ProcessingLatencyHigh",
    "RunsActiveGrowing",
    "FleetSignalFiring",
    "FleetToolUnhealthy",
}
SEVERITIES = {"warning", "critical"}
RUNBOOK_URL_PATH = "/deploy/runbooks/"


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)


def alert_ids(rule: dict[str, Any]) -> str:
    return str(rule["alert"])


@pytest.mark.parametrize("path", rule_files(), ids=lambda path: path.name)
def test_promtool_check_rules_accepts_the_rule_file(promtool: str, path: Path) -> None:
    checked = run([promtool, "check", "rules", str(path)])
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("path", rule_test_files(), ids=lambda path: path.name)
def test_promtool_unit_tests_pass(promtool: str, path: Path) -> None:
    tested = run([promtool, "test", "rules", str(path)])
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_check_config_accepts_the_compose_prometheus_config(promtool: str) -> None:
    checked = run([promtool, "check", "config", str(PROMETHEUS_CONFIG)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "2 rule files found" in checked.stdout, "prometheus.yml must load every rule file"


def test_the_rule_files_define_exactly_the_promised_alerts() -> None:
    names = [rule["alert"] for rule in alerting_rules()]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


def test_the_recording_rules_cover_detections_blocks_dead_letters_and_latency() -> None:
    records = {rule["record"]: rule for rule in recording_rules()}
    assert "job_detector_level:loopguard_detections:rate5m" in records
    assert "job:loopguard_blocks:rate5m" in records
    assert "job:loopguard_events_rejected:rate5m" in records
    quantiles = {
        rule["labels"]["quantile"]
        for rule in recording_rules()
        if rule["record"] == "job:loopguard_processing_seconds:histogram_quantile"
    }
    assert quantiles == {"0.5", "0.99"}


def test_rule_group_names_are_unique() -> None:
    names = [group["name"] for group in rule_groups()]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("rule", alerting_rules(), ids=alert_ids)
def test_every_alert_waits_has_a_severity_and_explains_itself(rule: dict[str, Any]) -> None:
    assert rule.get("for"), "an alert without `for:` pages on a single evaluation"
    assert rule.get("labels", {}).get("severity") in SEVERITIES
    annotations = rule.get("annotations", {})
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert all(text.strip() for text in annotations.values())


@pytest.mark.parametrize("rule", alerting_rules(), ids=alert_ids)
def test_every_alert_links_to_its_runbook(rule: dict[str, Any]) -> None:
    url = rule["annotations"]["runbook_url"]
    assert url.startswith("https://")
    assert url.endswith(f"{RUNBOOK_URL_PATH}{rule['alert']}.md")
    assert (RUNBOOKS_DIR / f"{rule['alert']}.md").is_file()


def test_every_runbook_url_shares_one_prefix() -> None:
    prefixes = {
        rule["annotations"]["runbook_url"].rsplit(RUNBOOK_URL_PATH, 1)[0]
        for rule in alerting_rules()
    }
    assert len(prefixes) == 1, f"runbook URLs point at several places: {prefixes}"


def unit_test_cases() -> list[tuple[str, bool]]:
    """(alertname, fires?) for every alert_rule_test of every promtool test file."""
    return [
        (case["alertname"], bool(case.get("exp_alerts")))
        for path in rule_test_files()
        for test in yaml_file(path)["tests"]
        for case in test.get("alert_rule_test", [])
    ]


@pytest.mark.parametrize("rule", alerting_rules(), ids=alert_ids)
def test_every_alert_has_a_firing_and_a_not_firing_unit_test(rule: dict[str, Any]) -> None:
    outcomes = {fires for alertname, fires in unit_test_cases() if alertname == rule["alert"]}
    assert outcomes == {True, False}, f"{rule['alert']}: cases seen {outcomes or 'none'}"


def test_the_unit_tests_load_every_rule_file() -> None:
    loaded = {
        (path.parent / name).resolve()
        for path in rule_test_files()
        for name in yaml_file(path)["rule_files"]
    }
    assert loaded == {path.resolve() for path in rule_files()}


def test_the_prometheusrule_carries_the_same_groups_as_the_rule_files() -> None:
    manifest = yaml_file(K8S_BASE / "prometheusrule.yaml")
    assert manifest["kind"] == "PrometheusRule"
    assert manifest["spec"]["groups"] == rule_groups(), (
        "deploy/k8s/base/prometheusrule.yaml is stale: "
        "run .venv/bin/python deploy/prometheus/render_prometheusrule.py"
    )
