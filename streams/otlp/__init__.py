"""OpenTelemetry ingestion: GenAI tool spans (OTLP traces) become LoopGuard wire events.

`decode` reads the Collector's payloads, `mapping` turns one tool span into its two wire
events, `order` orders and deduplicates each run's spans, `core` (`SpanBridge`) puts them
together. The worker's live bridge (streams/worker/otlp_bridge.py) and the audits'
`--input-format otlp` (streams/audit/otlp_input.py) run that core (docs/audit.md).

This package imports nothing of the `[otlp]` extra itself: `OTLP_EXTRA` says how to get it.
"""

from typing import Final

__all__ = ["OTLP_EXTRA"]

#: What installs the OTLP decoder (opentelemetry-proto and protobuf).
OTLP_EXTRA: Final = "pip install 'loopguard-fleet[otlp]'"
