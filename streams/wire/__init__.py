"""The wire: bytes to events as JavaScript writes them, dead letters, the JSON Schema."""
