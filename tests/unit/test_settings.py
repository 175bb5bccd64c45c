"""Settings: defaults, the LOOPGUARD_* environment contract, and errors reported together."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from loopguard_fleet.config.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("LOOPGUARD_"):
            monkeypatch.delenv(name)


def test_defaults_match_the_documented_contract() -> None:
    s = Settings()
    assert (s.broker, s.partitions, s.store, s.web_host, s.web_port) == (
        "kafka://127.0.0.1:9092",
        4,
        "rocksdb://",
        "127.0.0.1",
        6066,
    )
    assert s.input_topics == ("loopguard.tool-calls", "loopguard.compactions")
    assert (s.topic_control, s.topic_dead_letter) == ("loopguard.control", "loopguard.dead-letter")
    assert (s.run_idle_ttl_seconds, s.max_message_bytes, s.dead_letter_prefix_bytes) == (
        1800.0,
        1_048_576,
        256,
    )
    assert (s.run_cache_idle_seconds, s.run_cache_hot_runs, s.fetch_max_records) == (60.0, 1024, 0)
    assert (s.fetch_max_wait_ms, s.session_timeout_ms, s.heartbeat_ms) == (100, 6000, 1000)
    assert (s.rebalance_timeout_ms, s.recovery_consistency_check) == (6000, True)
    assert (s.log_level, s.app_id, s.channel_tools, s.policy_file) == (
        "info",
        "loopguard",
        ("telegram",),
        None,
    )


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        pytest.param("LOOPGUARD_BROKER", "broker", "kafka://10.0.0.1:9092", id="broker"),
        pytest.param("LOOPGUARD_PARTITIONS", "partitions", 12, id="partitions"),
        pytest.param("LOOPGUARD_STORE", "store", "memory://", id="store"),
        pytest.param(
            "LOOPGUARD_RECOVERY_CONSISTENCY_CHECK",
            "recovery_consistency_check",
            False,
            id="consistency-check",
        ),
        pytest.param(
            "LOOPGUARD_CHANNEL_TOOLS",
            "channel_tools",
            ("telegram", "slack"),
            id="channel-tools-comma",
        ),
        pytest.param("LOOPGUARD_LOG_LEVEL", "log_level", "debug", id="log-level-upper"),
        pytest.param(
            "LOOPGUARD_DEAD_LETTER_PREFIX_BYTES", "dead_letter_prefix_bytes", 0, id="prefix-zero"
        ),
        pytest.param("LOOPGUARD_TOPIC_CONTROL", "topic_control", "ctl", id="topic"),
    ],
)
def test_the_environment_sets_each_field(
    monkeypatch: pytest.MonkeyPatch, env: str, field: str, value: object
) -> None:
    raw = {
        "LOOPGUARD_RECOVERY_CONSISTENCY_CHECK": "false",
        "LOOPGUARD_CHANNEL_TOOLS": "telegram, slack",
        "LOOPGUARD_LOG_LEVEL": "DEBUG",
    }.get(env, str(value))
    monkeypatch.setenv(env, raw)
    assert getattr(Settings(), field) == value


def test_channel_tools_accept_a_json_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPGUARD_CHANNEL_TOOLS", '["a", "b"]')
    assert Settings().channel_tools == ("a", "b")


def test_every_invalid_setting_is_reported_at_once() -> None:
    with pytest.raises(ValidationError) as info:
        Settings(
            broker="http://x",
            partitions=0,
            store="redis://",
            log_level="warn",
            topic_control="bad topic",
            web_port=70000,
        )
    fields = {err["loc"][0] for err in info.value.errors()}
    assert fields == {"broker", "partitions", "store", "log_level", "topic_control", "web_port"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"topic_control": "loopguard.tool-calls"}, "distinct", id="same-topics"),
        pytest.param({"heartbeat_ms": 3000}, "third of session", id="heartbeat"),
        pytest.param(
            {"max_message_bytes": 10, "dead_letter_prefix_bytes": 11},
            "exceeds",
            id="prefix-over-limit",
        ),
        pytest.param(
            {"policy_file": Path("/nonexistent/openclaw.json")}, "policy_file", id="missing-policy"
        ),
        pytest.param({"surprise": 1}, "surprise", id="unknown-field"),
    ],
)
def test_inconsistent_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**kwargs)  # type: ignore[arg-type]  # deliberately wrong


def test_derived_values() -> None:
    s = Settings(broker="kafka://a:1;b:2", data_dir=Path("/d"), app_id="lg", web_port=7000)
    assert s.bootstrap_servers == ["a:1", "b:2"]
    assert s.worker_data_dir == Path("/d/lg-7000")


def test_the_otlp_bridge_is_off_unless_a_legal_distinct_topic_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert Settings().topic_otlp_spans is None
    monkeypatch.setenv("LOOPGUARD_TOPIC_OTLP_SPANS", "")
    assert Settings().topic_otlp_spans is None
    monkeypatch.setenv("LOOPGUARD_TOPIC_OTLP_SPANS", "otlp_spans")
    assert Settings().topic_otlp_spans == "otlp_spans"
    for bad in ("otlp spans", "loopguard.tool-calls"):
        with pytest.raises(ValidationError, match="topic"):
            Settings(topic_otlp_spans=bad)
