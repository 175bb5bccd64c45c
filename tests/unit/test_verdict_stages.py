"""Where a verdict's time goes: the worker's `loopguard_verdict_stage_seconds` and how
bench/latency.py reads a window's quantiles from two scrapes of it."""

from __future__ import annotations

import os

from bench.latency import cpu_seconds, stage_buckets, stage_quantiles
from loopguard_fleet.streams.processing.metrics import Metrics


def test_a_window_s_stage_quantiles_come_from_the_increase_between_two_scrapes() -> None:
    metrics = Metrics()
    metrics.observe_verdict_batch(0.2, 0.1, 0.0001, 0.00005)  # before the window: not counted
    before = stage_buckets(metrics.render().decode())
    for _ in range(99):
        metrics.observe_verdict_batch(0.004, 0.0004, 0.0002, 0.00005)
        metrics.observe_verdict_ack(0.0012)
    metrics.observe_verdict_batch(0.04, 0.0004, 0.0002, 0.00005)  # the window's slowest wait
    metrics.observe_verdict_ack(0.0012)
    after = stage_buckets(metrics.render().decode())
    assert stage_quantiles(before, after) == {
        "fetch": {"p50": 5.0, "p99": 5.0},  # 4 ms falls in the (3, 5] ms bucket
        "queue": {"p50": 0.5, "p99": 0.5},
        "engine": {"p50": 0.25, "p99": 0.25},
        "send": {"p50": 0.05, "p99": 0.05},
        "ack": {"p50": 1.5, "p99": 1.5},
    }
    assert stage_quantiles(after, after)["fetch"] == {"p50": None, "p99": None}


def test_a_side_s_cpu_time_is_its_process_user_and_system_time() -> None:
    times = os.times()
    used = cpu_seconds(os.getpid())
    assert used is not None
    # Both count every thread of the process, in clock ticks (10 ms here) for /proc.
    assert abs(used - (times.user + times.system)) < 0.05
    assert cpu_seconds(None) is None
