"""Hand the memory the C allocator keeps after frees back to the system, after each commit.

A checkpoint writes every changed run at once (one ~1 KB changelog value per run, plus
Faust's and aiokafka's objects around each record), and a batch decodes up to
`LOOPGUARD_BATCH_MAX_EVENTS` messages; all of it is freed soon after, but glibc's malloc
keeps freed heap memory for reuse, so the worker's resident size follows its processing peaks,
not what it holds (docs/performance.md). `malloc_trim(0)` (glibc only, malloc(3))
returns the free pages of every arena to the kernel. The worker calls it once per offset
commit, after the checkpoint and the producer drain (`before_commit` hooks run in order, and
this one is added last), when the changelog burst of that checkpoint has been handed over.

glibc also raises its mmap threshold each time it frees a mapped block (mallopt(3),
M_MMAP_THRESHOLD: "dynamic" up to 32 MiB), so after the first large buffers (the consumer's
fetches, the producer's batches) are freed, later ones of the same size come from the heap
and pin it. `fix_thresholds` sets the mmap and trim thresholds once at start, which turns
the dynamic adjustment off: blocks above 272 KiB stay mapped and go back to the system when
freed. Not lower: asyncio reads a socket into a fresh 256 KiB bytes object every time and
shrinks it to what arrived (`SOCKET_READ_BYTES`); mapped, every read mapped, faulted in,
remapped and unmapped memory (at glibc's initial 128 KiB: ~3,000 page faults a second on
workload L, 7 % of the worker's CPU, docs/performance.md). The trim threshold, how much free
memory the heap's top keeps before `free` shrinks it, is 1 MiB for the same buffer: at 128
KiB, freeing it at the top shrank the heap and the next read faulted the pages back in. The
trim after each checkpoint returns that top too.

`LOOPGUARD_MALLOC_TRIM=false` turns both off; on a C library other than glibc they do nothing.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from time import monotonic, perf_counter
from typing import Any

__all__ = [
    "SOCKET_READ_BYTES",
    "HeapTrimmer",
    "fix_thresholds",
    "glibc_function",
    "glibc_malloc_trim",
]

log = logging.getLogger(__name__)

# Faust commits every 2.8 s by default and also every 10,000 acked messages; on a fast
# worker that is several commits a second. Trimming more often than this buys nothing: the
# next batches take the pages back.
MIN_INTERVAL_S = 1.0


M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
# What asyncio's socket transports allocate for every read (`selector_events`: `max_size`).
SOCKET_READ_BYTES = 256 * 1024
MMAP_THRESHOLD_BYTES = SOCKET_READ_BYTES + 16 * 1024  # the read buffer comes from the heap
TRIM_THRESHOLD_BYTES = 1024 * 1024  # and freeing it at the heap's top keeps the top


def glibc_function(name: str, *argtypes: type[Any]) -> Callable[..., int] | None:
    """A function of this process's C library when that is glibc, else None."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")  # "glibc 2.36"; absent on musl and macOS
    except (ValueError, OSError, AttributeError):
        return None
    if not version or not version.startswith("glibc"):
        return None
    function = getattr(ctypes.CDLL(None), name, None)  # the loaded libc's symbols
    if function is None:
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]  # a ctypes function returning int


def glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim(pad)`, or None when this process's C library is not glibc."""
    return glibc_function("malloc_trim", ctypes.c_size_t)


def fix_thresholds(mallopt: Callable[[int, int], int] | None = None) -> bool:
    """Fix glibc's mmap and trim thresholds (not dynamic); True when glibc accepted both."""
    mallopt = mallopt or glibc_function("mallopt", ctypes.c_int, ctypes.c_int)
    if mallopt is None:
        return False
    return (
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )


class HeapTrimmer:
    """Calls a `malloc_trim` at most once per `min_interval_s` (a no-op without one)."""

    def __init__(
        self,
        trim: Callable[[int], int] | None,
        min_interval_s: float = MIN_INTERVAL_S,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._trim = trim
        self._min_interval_s = min_interval_s
        self._clock = clock
        self._last: float | None = None
        self.trims = 0  # how many times it ran (the memory probe reports it)
        self.seconds = 0.0  # and how long they took in all

    @property
    def enabled(self) -> bool:
        """True when there is a `malloc_trim` to call (glibc)."""
        return self._trim is not None

    def trim(self) -> bool:
        """Trim now unless the last trim was under `min_interval_s` ago; True when it ran."""
        if self._trim is None:
            return False
        now = self._clock()
        if self._last is not None and now - self._last < self._min_interval_s:
            return False
        self._last = now
        started = perf_counter()
        self._trim(0)
        self.trims += 1
        self.seconds += perf_counter() - started
        return True

    async def after_checkpoint(self) -> None:
        """The last `before_commit` hook: trim once the hooks before it have checkpointed."""
        self.trim()
