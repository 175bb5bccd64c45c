"""LoopGuard's I/O layer: Faust worker, codec, metrics, dead letters, client, broker, CLI."""
