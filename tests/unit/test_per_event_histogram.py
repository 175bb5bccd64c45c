"""A batch observed at once exposes what prometheus-client's Histogram shows after one
observation per event of the batch's mean (streams/processing/metrics.py)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from loopguard_fleet.streams.processing.metrics import _PROCESSING_BUCKETS, Metrics

NAME = "loopguard_processing_seconds"
batches = st.lists(
    st.tuples(st.floats(min_value=0, max_value=20, allow_nan=False), st.integers(-1, 3000)),
    max_size=20,
)


def _samples(body: bytes) -> tuple[list[str], float]:
    """The histogram's bucket and count lines, and its sum (without `_created`: a collector of
    our own has none). The sum is the batches' times added once each, where the reference
    adds each event's share: equal but for float rounding."""
    lines = [line for line in body.decode().splitlines() if line.startswith(NAME)]
    (total,) = [float(line.split()[1]) for line in lines if line.startswith(f"{NAME}_sum")]
    kept = [line for line in lines if not line.startswith((f"{NAME}_created", f"{NAME}_sum"))]
    return kept, total


@given(batches)
def test_the_exposition_is_one_observation_per_event(observed: list[tuple[float, int]]) -> None:
    metrics = Metrics()
    registry = CollectorRegistry()
    reference = Histogram(NAME, "doc", buckets=_PROCESSING_BUCKETS, registry=registry)
    for seconds, events in observed:
        metrics.observe_batch(seconds, events)
        for _ in range(max(events, 0)):
            reference.observe(seconds / events)
    (ours, our_sum), (theirs, their_sum) = (
        _samples(metrics.render()),
        _samples(generate_latest(registry)),
    )
    assert ours == theirs
    assert math.isclose(our_sum, their_sum, rel_tol=1e-9, abs_tol=1e-9)


def test_a_batch_lands_in_the_bucket_of_its_mean() -> None:
    metrics = Metrics()
    metrics.observe_batch(0.003, 6)  # 0.5 ms an event: the 0.0005 bucket, inclusive
    body = metrics.render().decode()
    assert f'{NAME}_bucket{{le="0.00025"}} 0.0' in body
    assert f'{NAME}_bucket{{le="0.0005"}} 6.0' in body
    assert f"{NAME}_count 6.0" in body
    assert f"{NAME}_sum 0.003" in body
