"""One runbook per alert, each saying what the alert means, how to confirm it (a PromQL query
and a command), and what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.contract.deploy_files import RUNBOOKS_DIR, alerting_rules, fenced_blocks, runbook_files

ALERTS = sorted(rule["alert"] for rule in alerting_rules())
SECTIONS = ["## What it means", "## Confirm", "## What to do"]


def test_there_is_one_runbook_per_alert_and_no_other() -> None:
    assert sorted(path.stem for path in runbook_files()) == ALERTS


@pytest.mark.parametrize("alert", ALERTS)
def test_every_runbook_has_its_sections_in_order(alert: str) -> None:
    text = (RUNBOOKS_DIR / f"{alert}.md").read_text(encoding="utf-8")
    assert text.startswith(f"# {alert}\n")
    positions = [text.find(section) for section in SECTIONS]
    assert -1 not in positions, f"missing one of {SECTIONS}"
    assert positions == sorted(positions)


@pytest.mark.parametrize("alert", ALERTS)
def test_every_runbook_confirms_with_promql_and_a_command(alert: str) -> None:
    text = (RUNBOOKS_DIR / f"{alert}.md").read_text(encoding="utf-8")
    confirm = text[text.find("## Confirm") : text.find("## What to do")]
    assert fenced_blocks(confirm, "promql"), "no ```promql query to confirm the alert"
    commands = "\n".join(fenced_blocks(confirm, "sh"))
    assert re.search(r"^(loopguard|kubectl|docker|time loopguard)\b", commands, re.MULTILINE)


@pytest.mark.parametrize("alert", ALERTS)
def test_every_runbook_states_the_alert_severity_and_rule(alert: str) -> None:
    text = (RUNBOOKS_DIR / f"{alert}.md").read_text(encoding="utf-8")
    (rule,) = [rule for rule in alerting_rules() if rule["alert"] == alert]
    assert f"**Severity:** {rule['labels']['severity']}" in text
    assert "deploy/prometheus/rules/loopguard.alerts.yml" in text


@pytest.mark.parametrize("path", runbook_files(), ids=lambda path: path.name)
def test_runbook_links_to_other_runbooks_resolve(path: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+\.md)\)", path.read_text(encoding="utf-8")):
        assert (path.parent / target).is_file(), target


@pytest.mark.parametrize("path", runbook_files(), ids=lambda path: path.name)
def test_runbook_commands_use_the_real_cli(path: Path) -> None:
    from loopguard_fleet.streams.cli import build_parser

    parser = build_parser()
    commands = [
        line.strip().removeprefix("time ")
        for block in fenced_blocks(path.read_text(encoding="utf-8"), "sh")
        for line in block.replace("\\\n", " ").splitlines()
        if line.strip().removeprefix("time ").startswith("loopguard ")
    ]
    for command in commands:
        arguments = command.split()[1:]
        try:
            parser.parse_args(arguments)
        except SystemExit as error:
            pytest.fail(f"{command!r} is not a valid loopguard command line ({error})")
