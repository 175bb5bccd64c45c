"""OpenTelemetry ingestion: GenAI tool spans (OTLP traces) become LoopGuard wire events.

`decode` reads the Collector's Kafka payloads, `mapping` turns one tool span into its two
wire events, `order` orders and deduplicates each run's spans, `bridge` is the worker's
Faust agent around them (docs/integrations.md, "From OpenTelemetry").
"""
