"""A real Prometheus scrapes a real worker that caught a loop; the deploy/ rules evaluate on it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from tests.contract.deploy_files import RULES_DIR
from tests.contract.deploy_metrics import exported_sample_names, metric_names_used_in_deploy
from tests.contract.prom_server import start_prometheus

from .conftest import KafkaIO, TopicSet
from .test_worker import Run, WorkerProcess, produce, start_worker  # noqa: F401  # fixture


async def test_prometheus_sees_the_detection_and_the_recording_rules_evaluate(
    start_worker: Callable[..., WorkerProcess],  # noqa: F811  # the imported fixture
    topics: TopicSet,
    kafka: KafkaIO,
) -> None:
    worker = start_worker()
    await worker.wait_until("/healthz", lambda b: True, 60)
    target = worker.web.removeprefix("http://")
    server = await asyncio.to_thread(start_prometheus, target, RULES_DIR)
    try:
        await asyncio.to_thread(server.wait_for, "up{job='loopguard'} == 1", 30)
        run = Run("prom-loop")
        for _ in range(21):
            run.call("read", {"path": "/missing"}, {"error": "File not found"})
        await produce(
            kafka.bootstrap,
            [(topics.tool_calls, b"prom-loop", orjson.dumps(e)) for e in run.events],
        )
        rose = await asyncio.to_thread(
            server.wait_for,
            'loopguard_detections_total{detector="generic_repeat",level="critical"} >= 1',
            60,
        )
        assert rose[0]["metric"]["job"] == "loopguard"
        # A rate needs the counter to rise between two scrapes: three more blocked retries.
        for _ in range(3):
            run.call("read", {"path": "/missing"}, {"error": "File not found"})
        await produce(
            kafka.bootstrap,
            [(topics.tool_calls, b"prom-loop", orjson.dumps(e)) for e in run.events[-6:]],
        )
        recorded = await asyncio.to_thread(
            server.wait_for,
            'job_detector_level:loopguard_detections:rate5m{level="critical"} > 0',
            60,
        )
        assert recorded[0]["metric"]["detector"] == "generic_repeat"
        assert all(rule.get("health") != "err" for rule in server.rules())
    finally:
        server.stop()

    _, body = await asyncio.to_thread(worker.get, "/metrics")
    exported = exported_sample_names(body)
    assert metric_names_used_in_deploy() <= exported
