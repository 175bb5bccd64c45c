"""`--variant`: how the benches read a candidate setting, and how bench/latency.py reports one
against the base worker and the relay of the same rounds."""

from __future__ import annotations

import json

import pytest

from bench.latency import variant_figures
from bench.variants import parse_variant


def test_a_variant_is_a_label_and_its_environment() -> None:
    assert parse_variant("c1:LOOPGUARD_COMMIT_INTERVAL_SECONDS=1 PYTHONPATH=/x=y") == (
        "c1",
        {"LOOPGUARD_COMMIT_INTERVAL_SECONDS": "1", "PYTHONPATH": "/x=y"},
    )


@pytest.mark.parametrize("text", ["noenv", ":A=1", "c1:A", "c1:", "c1:=1"])
def test_a_malformed_variant_stops_the_bench_with_what_is_wrong(text: str) -> None:
    with pytest.raises(SystemExit, match="--variant"):
        parse_variant(text)


def _window(p50: float, p99: float) -> list[float]:
    """100 latencies whose p50 and p99 (as the bench takes them) are the given ones."""
    return [1.0] * 50 + [p50] * 49 + [p99]


def test_a_variant_s_figures_are_against_the_relay_and_the_base_of_the_same_rounds() -> None:
    base = [_window(2.0, 8.0), _window(2.0, 9.0), _window(2.0, 7.0)]
    variant = [_window(3.0, 6.0), _window(3.0, 4.0), _window(3.0, 5.0)]
    relay = [_window(1.5, 4.0), _window(1.5, 4.0), _window(1.5, 2.0)]
    figures = [json.loads(x) for x in variant_figures("c1", {"A": "1"}, 5, base, variant, relay)]
    p50, p99, peak = figures
    assert [f["figure"] for f in figures] == ["verdict_p50_ms", "verdict_p99_ms", "verdict_max_ms"]
    assert all(f["variant"] == "c1" and f["variant_env"] == {"A": "1"} for f in figures)
    assert p50["median"] == 3.0 and p50["ratio"] == 2.0 and p50["ratio_to_base"] == 1.5
    assert p99["runs"] == [6.0, 4.0, 5.0] and p99["baseline_median"] == 4.0
    assert p99["ratio"] == 1.25 and p99["base_worker_median"] == 8.0
    assert p99["ratio_to_base"] == 0.625
    assert p99["window_p99_ratios"] == [1.5, 1.0, 2.5]
    assert peak["median"] == 5.0 and peak["lost_per_run"] == [0, 0, 0]


def test_an_unanswered_call_makes_the_variant_s_figure_unknown_not_a_number() -> None:
    lost = _window(3.0, float("inf"))
    figures = variant_figures("c1", {"A": "1"}, 5, [_window(2.0, 8.0)], [lost], [_window(1.5, 4.0)])
    p99 = json.loads(figures[1])
    assert p99["median"] is None and p99["ratio_to_base"] is None
    assert p99["window_p99_ratios"] == [None] and p99["lost_per_run"] == [1]
