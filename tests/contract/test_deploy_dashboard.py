"""The Grafana dashboard: a stable uid, its data source chosen through a variable, and a
query behind every panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.contract.deploy_files import (
    DASHBOARDS_DIR,
    GRAFANA_PROVISIONING,
    dashboard,
    dashboard_files,
    dashboard_panels,
    yaml_file,
)
from tests.contract.deploy_metrics import metric_names

# Links, bookmarks and provisioning refer to the dashboard by uid: never change it.
STABLE_UIDS = {"loopguard.json": "loopguard-overview"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

BOARDS = dashboard_files()


def board_ids(path: Path) -> str:
    return path.name


def query_panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in dashboard_panels(board) if panel["type"] != "row"]


def test_the_dashboards_are_the_known_ones() -> None:
    assert {path.name for path in BOARDS} == set(STABLE_UIDS)


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_the_dashboard_uid_is_present_and_stable(path: Path) -> None:
    assert dashboard(path)["uid"] == STABLE_UIDS[path.name]


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_the_data_source_is_a_template_variable(path: Path) -> None:
    variables = {var["name"]: var for var in dashboard(path)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_every_panel_and_query_uses_the_data_source_variable(path: Path) -> None:
    board = dashboard(path)
    for panel in query_panels(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["datasource"] == DATASOURCE, variable["name"]


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_every_panel_has_at_least_one_query(path: Path) -> None:
    for panel in query_panels(dashboard(path)):
        targets = panel.get("targets", [])
        assert targets, f"panel {panel['title']!r} has no target"
        assert all(target.get("expr", "").strip() for target in targets), panel["title"]
        ref_ids = [target["refId"] for target in targets]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_panel_ids_are_unique_and_panels_do_not_overlap(path: Path) -> None:
    panels = dashboard_panels(dashboard(path))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        area = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_the_overview_shows_what_the_issue_asks_for() -> None:
    board = dashboard(DASHBOARDS_DIR / "loopguard.json")
    shown = {
        panel["title"]: {
            name for target in panel["targets"] for name in metric_names(target["expr"])
        }
        for panel in query_panels(board)
    }
    wanted = {
        "Events/s by type": "loopguard_events_total",
        "Detections/s by detector and level": "loopguard_detections_total",
        "Blocks and aborts/s": "loopguard_commands_total",
        "Dead letters/s by reason, and duplicates": "loopguard_events_rejected_total",
        "Processing latency": "loopguard_processing_seconds_bucket",
        "Active runs": "loopguard_runs_active",
    }
    for title, metric in wanted.items():
        assert metric in shown.get(title, set()), f"panel {title!r} should show {metric}"


@pytest.mark.parametrize("path", BOARDS, ids=board_ids)
def test_every_query_filters_on_the_job_and_instance_variables(path: Path) -> None:
    for panel in query_panels(dashboard(path)):
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"], panel["title"]
            assert 'instance=~"$instance"' in target["expr"], panel["title"]


def test_grafana_provisioning_loads_the_dashboards_folder() -> None:
    provider = yaml_file(GRAFANA_PROVISIONING / "dashboards" / "loopguard.yml")
    (entry,) = provider["providers"]
    assert entry["type"] == "file"
    assert entry["options"]["path"] == "/var/lib/grafana/dashboards/loopguard"
    datasource = yaml_file(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    (prometheus,) = datasource["datasources"]
    assert prometheus["type"] == "prometheus"
    assert prometheus["url"] == "http://prometheus:9090"
