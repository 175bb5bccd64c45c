"""Candidate memory savings, applied by monkeypatching (measurement only; nothing is changed).

Each patch stands for a small diff to detectors/ or streams/, so that bench/memory.py
(`--patches`, in the worker) can measure it before
anyone edits those packages. (Interned tool names and hashes, and completed records without
a tool_call_id, were measured here first and are now in detectors/.)
`apply(names, processor=None)` applies a comma-separated list:

    pack_cache=N     detectors.state._pack memo of N entries instead of 4,096 (to_json)
    unpack_cache=N   detectors.state._unpack memo likewise (from_json: every load with evict)
    evict            RunProcessor drops a run from its cache once a checkpoint wrote it
                     (the next event of the run reads it back from the table)
    trim             glibc malloc_trim(0) after every checkpoint (returns freed heap pages)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

__all__ = ["PATCHES", "apply"]

PATCHES = (
    "pack_cache",
    "unpack_cache",
    "evict",
    "trim",
)


def _pack_cache(size: int) -> None:
    import loopguard.detectors.state as state

    state._pack = lru_cache(maxsize=size)(state._pack.__wrapped__)


def _unpack_cache(size: int) -> None:
    import loopguard.detectors.state as state

    state._unpack = lru_cache(maxsize=size)(state._unpack.__wrapped__)


def _evict(processor: Any) -> None:
    checkpoint = processor.checkpoint

    def checkpoint_and_evict() -> None:
        held = processor.driver.partitions
        written = {p: list(runs.dirty) for p, runs in held.items() if runs.dirty}
        checkpoint()
        for partition, keys in written.items():
            live = held[partition].live
            for key in keys:
                live.pop(key, None)

    processor.checkpoint = checkpoint_and_evict


def _trim(processor: Any) -> None:
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    checkpoint = processor.checkpoint

    def checkpoint_and_trim() -> None:
        checkpoint()
        libc.malloc_trim(0)

    processor.checkpoint = checkpoint_and_trim


def apply(names: str, processor: Any = None) -> list[str]:
    """Apply the named patches (`evict`, `trim` only with a processor); the names applied."""
    done = []
    for item in filter(None, (n.strip() for n in names.split(","))):
        name, _, arg = item.partition("=")
        if name == "pack_cache":
            _pack_cache(int(arg or 4096))
        elif name == "unpack_cache":
            _unpack_cache(int(arg or 4096))
        elif name in ("evict", "trim"):
            if processor is None:
                continue
            (_evict if name == "evict" else _trim)(processor)
        else:
            raise ValueError(f"unknown patch {name!r}; known: {', '.join(PATCHES)}")
        done.append(item)
    return done
