"""Shadow mode in a live worker on the real broker: a run that enforce would block is only
observed. The control topic gets the loop events (`enforced: false`), no command, exactly as
`loopguard replay` decides under the same policy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.worker_process import WorkerProcess

from .conftest import KafkaIO, TopicSet
from .test_worker import of_run, produce
from .test_worker_policy import TRACE, _replayed, start_worker  # noqa: F401  # the fixture

POLICY = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"mode": "observe"}}


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    """The observing policy, written where both the worker and replay read it."""
    path = tmp_path / "openclaw.json"
    path.write_bytes(orjson.dumps(POLICY))
    return path


async def test_a_run_that_would_be_blocked_is_only_observed(
    start_worker: Callable[..., WorkerProcess],  # noqa: F811  # the imported fixture
    topics: TopicSet,
    kafka: KafkaIO,
    policy_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = _replayed(policy_file, capsys)
    assert expected and {d["type"] for d in expected} == {"loop_event"}
    assert any(d["action"] == "block" for d in expected)  # enforce would block this run
    events = [json.loads(line) for line in TRACE.read_text().splitlines()]
    run_id = events[0]["run_id"]
    start_worker()
    await produce(
        kafka.bootstrap,
        [(topics.tool_calls, run_id.encode(), orjson.dumps(event)) for event in events],
    )
    got = await kafka.consume_until(
        topics.control, lambda ms: len(ms) >= len(expected), deadline=60
    )
    assert of_run(got, run_id) == expected
    assert {d["enforced"] for d in of_run(got, run_id)} == {False}
