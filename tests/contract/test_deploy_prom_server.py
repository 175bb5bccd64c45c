"""The Prometheus-server helper (prom_server.py) against a tiny exporter on 127.0.0.1: a real
/usr/bin/prometheus scrapes it, loads deploy/'s rules, evaluates them, and accepts every
query of the dashboards and runbooks.

tests/integration/test_prometheus_server.py uses the same helper against a live worker.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tests.contract.deploy_files import RULES_DIR, alerting_rules, recording_rules
from tests.contract.deploy_metrics import promql_expressions
from tests.contract.prom_server import (
    INSTALL_HINT,
    PROMETHEUS_BINARY,
    PrometheusError,
    PrometheusServer,
    start_prometheus,
)

pytestmark = pytest.mark.timeout(180)


@dataclass
class Exporter:
    """A prometheus_client HTTP server on 127.0.0.1 with a few loopguard_* series."""

    server: WSGIServer
    target: str


@pytest.fixture(scope="module")
def exporter() -> Iterator[Exporter]:
    registry = CollectorRegistry()
    events = Counter("loopguard_events", "events", ["type"], registry=registry)
    events.labels(type="tool_call").inc(5)
    runs = Gauge("loopguard_runs_active", "runs", registry=registry)
    runs.set(3)
    detections = Counter("loopguard_detections", "d", ["detector", "level"], registry=registry)
    detections.labels(detector="generic_repeat", level="warning").inc()
    Histogram("loopguard_processing_seconds", "latency", registry=registry).observe(0.001)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield Exporter(server, f"127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def prometheus(exporter: Exporter) -> Iterator[PrometheusServer]:
    if not PROMETHEUS_BINARY.exists():
        pytest.fail(f"{PROMETHEUS_BINARY} not found: {INSTALL_HINT}", pytrace=False)
    server = start_prometheus(exporter.target, RULES_DIR)
    try:
        yield server
    finally:
        server.stop()


def test_the_server_listens_on_loopback_and_is_stopped_by_pid(exporter: Exporter) -> None:
    server = start_prometheus(exporter.target, RULES_DIR)
    assert server.base_url.startswith("http://127.0.0.1:")
    server.stop()
    assert server.process.returncode is not None


def test_targets_off_loopback_are_refused() -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.1"):
        start_prometheus("10.0.0.1:6066", RULES_DIR)


def test_prometheus_scrapes_the_exporter(prometheus: PrometheusServer) -> None:
    (sample,) = prometheus.wait_for('loopguard_events_total{type="tool_call"}')
    assert sample["metric"]["job"] == "loopguard"
    assert float(sample["value"][1]) == 5


def test_a_recording_rule_evaluates_on_the_scraped_series(prometheus: PrometheusServer) -> None:
    (sample,) = prometheus.wait_for("job:loopguard_runs_active:sum")
    assert sample["metric"] == {"__name__": "job:loopguard_runs_active:sum", "job": "loopguard"}
    assert float(sample["value"][1]) == 3


def test_every_rule_loads_and_evaluates_without_error(prometheus: PrometheusServer) -> None:
    expected = len(recording_rules()) + len(alerting_rules())
    prometheus.wait_for("job_type:loopguard_events:rate5m")  # a rate needs two scrapes
    rules = prometheus.rules()
    assert len(rules) == expected
    failing = [
        (rule.get("name"), rule.get("lastError")) for rule in rules if rule["health"] == "err"
    ]
    assert not failing


def test_a_healthy_exporter_fires_no_alert(prometheus: PrometheusServer) -> None:
    prometheus.wait_for("job_type:loopguard_events:rate5m")
    firing = prometheus.api("alerts")["alerts"]
    # Only NoEvents may be pending: the exporter's counters stand still.
    assert {alert["labels"]["alertname"] for alert in firing} <= {"NoEvents"}
    assert all(alert["state"] == "pending" for alert in firing)


def runnable(expression: str) -> str:
    """A dashboard query with Grafana's variables replaced as Grafana would."""
    expression = expression.replace("$__rate_interval", "1m")
    return re.sub(r"\$(job|instance)\b", ".+", expression)


QUERIES = [
    (where, expression)
    for where, expression in promql_expressions()
    if " variable $" not in where  # label_values(...) is Grafana's, not PromQL
]


def test_every_dashboard_runbook_and_rule_query_is_valid_promql(
    prometheus: PrometheusServer,
) -> None:
    errors = []
    for where, expression in QUERIES:
        try:
            prometheus.query(runnable(expression))
        except PrometheusError as error:
            errors.append(f"{where}: {error}")
    assert not errors, "\n".join(errors)


def test_an_invalid_query_is_reported(prometheus: PrometheusServer) -> None:
    with pytest.raises(PrometheusError, match="bad_data"):
        prometheus.query("sum by (")
