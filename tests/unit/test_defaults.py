"""Each default name has one home (config/defaults.py) and every consumer takes it from there."""

from __future__ import annotations

import json
from pathlib import Path

from loopguard_fleet.config import defaults
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors import hashing
from loopguard_fleet.detectors.outcome_facts import outcome_facts
from loopguard_fleet.detectors.values import DEFAULT_CHANNEL_TOOLS, Outcome, Thresholds
from loopguard_fleet.streams.client import Topics

ROOT = Path(__file__).parents[2]


def test_settings_and_the_client_default_to_the_same_topics() -> None:
    settings = Settings()
    assert (settings.topic_tool_calls, settings.topic_compactions, settings.topic_control) == (
        Topics().tool_calls,
        Topics().compactions,
        Topics().control,
    )
    assert settings.topic_dead_letter == defaults.TOPIC_DEAD_LETTER
    assert Topics() == Topics(
        defaults.TOPIC_TOOL_CALLS, defaults.TOPIC_COMPACTIONS, defaults.TOPIC_CONTROL
    )


def test_the_openclaw_plugin_defaults_to_the_same_topics() -> None:
    manifest = json.loads((ROOT / "integrations/openclaw/openclaw.plugin.json").read_text())
    found: dict[str, str] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("toolCalls", "compactions", "control") and isinstance(value, dict):
                    found[key] = value.get("default")
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(manifest)
    assert found == {
        "toolCalls": defaults.TOPIC_TOOL_CALLS,
        "compactions": defaults.TOPIC_COMPACTIONS,
        "control": defaults.TOPIC_CONTROL,
    }


def test_one_default_channel_tool_list() -> None:
    assert hashing.DEFAULT_CHANNEL_TOOLS is DEFAULT_CHANNEL_TOOLS
    assert Thresholds().channel_tools is DEFAULT_CHANNEL_TOOLS
    assert frozenset(Settings().channel_tools) == DEFAULT_CHANNEL_TOOLS
    # `outcome_facts` takes the list when given none (its default is None, so no copy of it
    # can sit there): telegram, a channel tool, is a send whose delivery ids do not count.

    def result_hash(message_id: str, tools: frozenset[str] | None = None) -> str | None:
        outcome = Outcome.result({"content": "sent", "details": {"messageId": message_id}})
        return outcome_facts("telegram", {}, outcome, tools).result_hash

    assert result_hash("1") == result_hash("2") == result_hash("1", DEFAULT_CHANNEL_TOOLS)
    assert result_hash("1", frozenset()) != result_hash("2", frozenset())


def test_no_module_spells_a_default_topic_name_itself() -> None:
    names = {
        defaults.TOPIC_TOOL_CALLS,
        defaults.TOPIC_COMPACTIONS,
        defaults.TOPIC_CONTROL,
        defaults.TOPIC_DEAD_LETTER,
    }
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("detectors", "config", "streams")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "defaults.py" and any(f'"{n}"' in path.read_text() for n in names)
    ]
    assert offenders == []
