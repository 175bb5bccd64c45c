"""One options object for the live bridge and the audits (streams/otlp/options.py): the
worker's `LOOPGUARD_OTLP_*` settings and replay's `--otlp-*` flags give equal options, and
the core built from them maps and holds spans as they say."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.cli import _otlp_options, build_parser
from loopguard_fleet.streams.cli_errors import CliError
from loopguard_fleet.streams.otlp.core import SpanBridge
from loopguard_fleet.streams.otlp.options import AUDIT_OPTIONS, OtlpOptions, otlp_options
from tests.otlp import export_request, looping_script

ENV = {
    "LOOPGUARD_OTLP_RUN_ID_KEYS": "app.run, tenant.run",
    "LOOPGUARD_OTLP_OPENINFERENCE": "true",
    "LOOPGUARD_OTLP_PRIVACY": "true",
    "LOOPGUARD_OTLP_REORDER_WINDOW_SECONDS": "5",
    "LOOPGUARD_OTLP_DEDUPE_MEMORY_SECONDS": "60",
    "LOOPGUARD_CHANNEL_TOOLS": '["slack", "telegram"]',
}
FLAGS = [
    "--otlp-run-id-keys", "app.run,tenant.run", "--otlp-openinference", "--otlp-privacy",
    "--otlp-reorder-window", "5", "--otlp-dedupe-memory", "60",
    "--channel-tools", "slack,telegram",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("LOOPGUARD_"):
            monkeypatch.delenv(name)


def _flags(*flags: str) -> OtlpOptions:
    args = build_parser().parse_args(["replay", "spans.jsonl", "--input-format", "otlp", *flags])
    return _otlp_options(args)


def test_the_worker_settings_and_the_matching_replay_flags_give_equal_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    live = otlp_options(Settings())
    assert live == _flags(*FLAGS)
    assert live.run_id_keys == ("app.run", "tenant.run") and live.reorder_window_s == 5
    assert live.channel_tools == {"slack", "telegram"}


def test_the_defaults_are_one_mapping_live_and_offline_but_the_window() -> None:
    # An audit holds every span to the end of its input unless given a window.
    assert otlp_options(Settings()) == replace(_flags(), reorder_window_s=2.0)
    assert _flags() == AUDIT_OPTIONS and AUDIT_OPTIONS.reorder_window_s is None


def test_an_empty_run_id_key_list_makes_every_run_its_trace_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPGUARD_OTLP_RUN_ID_KEYS", "")
    live = otlp_options(Settings())
    assert live.run_id_keys == () == _flags("--otlp-run-id-keys", "").run_id_keys
    (call,) = looping_script()[:1]
    step = SpanBridge.of_options(replace(live, reorder_window_s=0), 1 << 20).feed(
        export_request([call]).SerializeToString()
    )
    assert step.released == [(call.span().trace_id.hex(), call.span().span_id.hex())]


@pytest.mark.parametrize(("window", "released"), [(0, 1), (2, 0)])
def test_the_window_setting_decides_how_long_the_live_core_holds_a_span(
    monkeypatch: pytest.MonkeyPatch, window: float, released: int
) -> None:
    monkeypatch.setenv("LOOPGUARD_OTLP_REORDER_WINDOW_SECONDS", str(window))
    bridge = SpanBridge.of_options(otlp_options(Settings()), 1 << 20)
    (call,) = looping_script()[:1]  # lasts 0.4 s: within a 2 s window of its own end
    step = bridge.feed(export_request([call]).SerializeToString())
    assert len(step.released) == released


def test_a_zero_dedupe_memory_is_refused_live_and_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOOPGUARD_OTLP_DEDUPE_MEMORY_SECONDS", "0")
    with pytest.raises(ValueError, match="otlp_dedupe_memory_seconds"):
        Settings()
    with pytest.raises(CliError, match="--otlp-dedupe-memory: must be a finite number > 0"):
        _flags("--otlp-dedupe-memory", "0")
