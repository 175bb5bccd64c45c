"""`--variant LABEL:KEY=VALUE ...`: a candidate setting measured beside the base in the same
run (bench/memory.py, bench/latency.py, bench/pipeline.py), so both saw the same host."""

from __future__ import annotations

__all__ = ["parse_variant"]


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """`LABEL:KEY=VALUE KEY=VALUE` as (label, environment)."""
    label, sep, rest = text.partition(":")
    if not sep or not label:
        raise SystemExit(f"--variant {text!r}: expected LABEL:KEY=VALUE ...")
    env = {}
    for item in rest.split():
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SystemExit(f"--variant {text!r}: {item!r} is not KEY=VALUE")
        env[key] = value
    if not env:
        raise SystemExit(f"--variant {text!r}: names no KEY=VALUE")
    return label, env
