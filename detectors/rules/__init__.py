"""One module per detector: each exposes `check(...) -> Verdict | None` and states its rule."""
