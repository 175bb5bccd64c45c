"""The OpenTelemetry Collector config LoopGuard documents (docs/integrations.md, "From
OpenTelemetry", and deploy/otel-collector/collector.yaml) sends what the OTLP bridge
consumes: the topic the workers are told to read, an encoding the bridge decodes, messages
keyed by trace id, through a batch delay inside the bridge's reorder window."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, get_args

import pytest
import yaml

from loopguard_fleet.config.defaults import OTLP_REORDER_WINDOW_S, TOPIC_OTLP_SPANS
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.streams.otlp.core import SpanBridge
from loopguard_fleet.streams.otlp.decode import Encoding, decode_request, detect_encoding
from loopguard_fleet.streams.otlp.options import AUDIT_OPTIONS
from tests.contract.deploy_files import DEPLOY, REPO, yaml_file
from tests.otlp import export_request, looping_script

COLLECTOR_FILE = DEPLOY / "otel-collector" / "collector.yaml"
INTEGRATIONS = REPO / "docs" / "integrations.md"
EXPORTER = "kafka/loopguard"


def _section() -> str:
    text = INTEGRATIONS.read_text(encoding="utf-8")
    start = text.index("\n## From OpenTelemetry\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _documented() -> Any:
    """The YAML block of the docs' section, parsed."""
    blocks = re.findall(r"```yaml\n(.*?)```", _section(), re.DOTALL)
    assert len(blocks) == 1, "the section shows one Collector config"
    return yaml.safe_load(blocks[0])


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    documented = _documented()
    assert documented == yaml_file(COLLECTOR_FILE), "docs and deploy/ show different configs"
    assert isinstance(documented, dict)
    return documented


def _exporter(config: dict[str, Any]) -> dict[str, Any]:
    exporter: dict[str, Any] = config["exporters"][EXPORTER]
    return exporter


def test_the_traces_pipeline_sends_the_otlp_receivers_spans_through_the_kafka_exporter(
    config: dict[str, Any],
) -> None:
    pipelines = config["service"]["pipelines"]
    (pipeline,) = [p for name, p in pipelines.items() if name.split("/")[0] == "traces"]
    assert pipeline["exporters"] == [EXPORTER]
    assert set(pipeline["receivers"]) <= set(config["receivers"])
    assert set(pipeline["processors"]) <= set(config["processors"])


def test_the_topic_is_the_one_the_workers_are_told_to_read(config: dict[str, Any]) -> None:
    topic = _exporter(config)["traces"]["topic"]
    assert topic == TOPIC_OTLP_SPANS
    told = re.findall(r"LOOPGUARD_TOPIC_OTLP_SPANS=(\S+)", _section())
    assert told and set(told) == {topic}
    assert Settings(topic_otlp_spans=topic).topic_otlp_spans == topic  # a legal, distinct name
    assert "topic" not in _exporter(config) and "encoding" not in _exporter(config), (
        "the pre-v0.124.0 layout: this exporter's traces would go to its default topic"
    )


def test_the_encoding_is_one_the_bridge_decodes(config: dict[str, Any]) -> None:
    encoding = _exporter(config)["traces"]["encoding"]
    assert encoding == "otlp_proto" and encoding in get_args(Encoding)
    # What the exporter writes in that encoding: an ExportTraceServiceRequest, serialised.
    request = export_request(looping_script()[:2])
    payload = request.SerializeToString()
    assert detect_encoding(payload) == encoding
    assert decode_request(payload, 1 << 20) == request


def test_messages_are_keyed_by_trace_id_the_run_a_trace_keyed_bridge_forms(
    config: dict[str, Any],
) -> None:
    # The bridge orders each partition alone: with the documented
    # `LOOPGUARD_OTLP_RUN_ID_KEYS=` (empty), every run is the trace id the exporter keys by.
    assert _exporter(config)["partition_traces_by_id"] is True
    assert "LOOPGUARD_OTLP_RUN_ID_KEYS=`" in _section()
    calls = looping_script()[:4]
    options = replace(AUDIT_OPTIONS, run_id_keys=())
    bridge = SpanBridge.of_options(options, 1 << 20)
    bridge.feed(export_request(calls).SerializeToString())
    runs = {span_id: run_id for run_id, span_id in bridge.finish().released}
    assert runs == {c.span().span_id.hex(): c.span().trace_id.hex() for c in calls}


def test_a_batch_waits_less_than_the_bridges_reorder_window(config: dict[str, Any]) -> None:
    (batch_name,) = [n for n in config["processors"] if n.split("/")[0] == "batch"]
    timeout = config["processors"][batch_name]["timeout"]
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", timeout)
    assert match is not None, f"batch timeout {timeout!r}"
    number, unit = match.groups()
    seconds = float(number) / (1000 if unit == "ms" else 1)
    assert seconds < OTLP_REORDER_WINDOW_S
