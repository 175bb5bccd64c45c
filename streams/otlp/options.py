"""How OTLP spans become events: one `OtlpOptions`, built from the worker's settings
(`LOOPGUARD_OTLP_*`, `otlp_options`) or from an audit's `--otlp-*` flags, from which the
live bridge and `--input-format otlp` alike build their core (`SpanBridge.of_options`), so
live and replay decide the same spans the same way.

This module imports nothing of the `[otlp]` extra: settings are read without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from loopguard_fleet.config.defaults import (
    OTLP_DEDUPE_MEMORY_S,
    OTLP_REORDER_WINDOW_S,
    OTLP_RUN_ID_KEYS,
)
from loopguard_fleet.config.settings import Settings
from loopguard_fleet.detectors.values import DEFAULT_CHANNEL_TOOLS

__all__ = ["AUDIT_OPTIONS", "OtlpOptions", "otlp_options"]


@dataclass(frozen=True, slots=True)
class OtlpOptions:
    """The span mapping and the reorder window of one bridge core (live or offline)."""

    run_id_keys: tuple[str, ...] = OTLP_RUN_ID_KEYS  # empty: the trace id is the run
    openinference: bool = False  # also read OpenInference TOOL spans
    privacy: bool = False  # hash arguments and results at the bridge
    # Span time a span is held for its run's earlier spans; None: until the end of the input
    # (an audit's default; a live bridge always has a window).
    reorder_window_s: float | None = OTLP_REORDER_WINDOW_S
    dedupe_memory_s: float = OTLP_DEDUPE_MEMORY_S  # a quiet run's span ids, past the window
    channel_tools: frozenset[str] = field(default=DEFAULT_CHANNEL_TOOLS)


#: An audit's defaults: the live mapping, but every span held to the end of the input, so
#: the output does not depend on arrival order (`--otlp-reorder-window` bounds it).
AUDIT_OPTIONS: Final = OtlpOptions(reorder_window_s=None)


def otlp_options(settings: Settings) -> OtlpOptions:
    """The live bridge's options, from the worker's settings."""
    return OtlpOptions(
        run_id_keys=settings.otlp_run_id_keys,
        openinference=settings.otlp_openinference,
        privacy=settings.otlp_privacy,
        reorder_window_s=settings.otlp_reorder_window_seconds,
        dedupe_memory_s=settings.otlp_dedupe_memory_seconds,
        channel_tools=frozenset(settings.channel_tools),
    )
