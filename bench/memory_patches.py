"""Candidate memory savings, applied by monkeypatching (measurement only; nothing is changed).

(`evict` and `trim` were measured here first and are now settings:
`LOOPGUARD_RUN_CACHE_IDLE_SECONDS=0` evicts every written run, `LOOPGUARD_MALLOC_TRIM`
trims after each checkpoint; bench/memory.py `--env`/`--variant` measures them.)

Each patch stands for a small diff to detectors/ or streams/, so that bench/memory.py
(`--patches`, in the worker) can measure it before
anyone edits those packages. (Interned tool names and hashes, and completed records without
a tool_call_id, were measured here first and are now in detectors/.)
`apply(names)` applies a comma-separated list:

    pack_cache=N     detectors.state._pack memo of N entries instead of 4,096 (to_json)
    unpack_cache=N   detectors.state._unpack memo likewise (from_json: every cache miss)
    rightsize_args   detectors.canonical's orjson output copied to its length (the signature
                     cache keeps canonical args: orjson >= 3.12 returns bytes whose buffer is
                     4 KB and up whatever the length, and never shrinks it)
    rightsize_values detectors.jsjson's likewise (table values, decisions, dead letters)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["PATCHES", "apply"]

PATCHES = (
    "pack_cache",
    "unpack_cache",
    "rightsize_args",
    "rightsize_values",
)


class _RightSized:
    """orjson with `dumps` copying its result into a bytes object of the exact length."""

    def __getattr__(self, name: str) -> Any:
        import orjson

        return getattr(orjson, name)

    @staticmethod
    def dumps(*args: Any, **kwargs: Any) -> bytes:
        import orjson

        return bytes(memoryview(orjson.dumps(*args, **kwargs)))


def _rightsize(module_name: str) -> None:
    import importlib

    importlib.import_module(module_name).orjson = _RightSized()


def _pack_cache(size: int) -> None:
    import loopguard_fleet.detectors.state as state

    state._pack = lru_cache(maxsize=size)(state._pack.__wrapped__)


def _unpack_cache(size: int) -> None:
    import loopguard_fleet.detectors.state as state

    state._unpack = lru_cache(maxsize=size)(state._unpack.__wrapped__)


def apply(names: str) -> list[str]:
    """Apply the named patches (comma-separated); the names applied."""
    done = []
    for item in filter(None, (n.strip() for n in names.split(","))):
        name, _, arg = item.partition("=")
        if name == "pack_cache":
            _pack_cache(int(arg or 4096))
        elif name == "unpack_cache":
            _unpack_cache(int(arg or 4096))
        elif name == "rightsize_args":
            _rightsize("loopguard_fleet.detectors.canonical")
        elif name == "rightsize_values":
            _rightsize("loopguard_fleet.detectors.jsjson")
        else:
            raise ValueError(f"unknown patch {name!r}; known: {', '.join(PATCHES)}")
        done.append(item)
    return done
