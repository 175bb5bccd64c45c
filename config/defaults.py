"""LoopGuard's default names, in one place: the worker's `Settings`, the runtime client and
`loopguard up` all take their topic names from here (the OpenClaw plugin's defaults are the
same strings, checked by tests/unit/test_defaults.py), and the worker and the security recipe
(`loopguard_acls`) the fleet topic's name."""

from __future__ import annotations

from typing import Final

__all__ = [
    "DISTRIBUTION",
    "OTLP_DEDUPE_MEMORY_S",
    "OTLP_REORDER_WINDOW_S",
    "OTLP_RUN_ID_KEYS",
    "TOPIC_COMPACTIONS",
    "TOPIC_CONTROL",
    "TOPIC_DEAD_LETTER",
    "TOPIC_OTLP_SPANS",
    "TOPIC_POLICY",
    "TOPIC_TOOL_CALLS",
    "fleet_topic_of",
]

TOPIC_TOOL_CALLS: Final = "loopguard.tool-calls"
TOPIC_COMPACTIONS: Final = "loopguard.compactions"
TOPIC_CONTROL: Final = "loopguard.control"
TOPIC_DEAD_LETTER: Final = "loopguard.dead-letter"
#: The live policy (compacted, one partition, one key): `loopguard policy push` and `show`.
TOPIC_POLICY: Final = "loopguard.policy"
#: The OTLP traces topic of the documented Collector config (deploy/otel-collector/); the
#: bridge reads it only when `LOOPGUARD_TOPIC_OTLP_SPANS` names it.
TOPIC_OTLP_SPANS: Final = "loopguard.otlp-spans"

# How OTLP spans become events, for the live bridge (`LOOPGUARD_OTLP_*`) and the audits'
# `--otlp-*` flags alike (streams/otlp/options.py).
#: The span or resource attributes that name the run, first found wins (else the trace id).
OTLP_RUN_ID_KEYS: Final = ("gen_ai.conversation.id",)
#: How long (span time) the live bridge holds a span for its run's earlier spans: a
#: Collector batch's delay, with margin.
OTLP_REORDER_WINDOW_S: Final = 2.0
#: How long (span time) a quiet run remembers its span ids past the window: how long a
#: Collector's retried span is still recognised as a duplicate.
OTLP_DEDUPE_MEMORY_S: Final = 3_600.0

#: The distribution's name on the package index (`pip install loopguard-fleet`); the import root
#: is `loopguard_fleet`. PyPI's `loopguard` is an unrelated project.
DISTRIBUTION: Final = "loopguard-fleet"


def fleet_topic_of(app_id: str) -> str:
    """Name of the fleet topic of the workers whose app id (consumer group) is `app_id`."""
    return f"{app_id}-fleet"
