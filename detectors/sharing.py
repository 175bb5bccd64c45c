"""One object for equal hash strings and keys that recur, without `sys.intern`'s cost.

Records of many runs hold the same recurring hashes (a poll that never changes, a file read
by every run); giving them one object saves ~113 B a record. `sys.intern` did that, but it
also kept a table entry for every *unique* hash alive in a record (~40-50 B each, ~0.5 KB per
run at 10,000 runs in bench/memory.py's workload, docs/performance.md). This memo is
bounded instead: it is emptied when full, so a value that recurs is shared again from its
next occurrence on, and a unique one costs nothing once its records are gone.
"""

from __future__ import annotations

from typing import Final, TypeVar, cast

__all__ = ["SHARED", "SHARED_ENTRIES", "remember", "share", "share_new"]

#: Entries the memo holds before it is emptied (at most ~0.7 MB with 64-hex-digit hashes).
SHARED_ENTRIES: Final = 4096
#: The memo itself: read it inline where one lookup per event matters (`SHARED.get(s)`).
#: Its values are texts and hash keys (detectors/hashkeys.py), each its own key.
SHARED: dict[str | bytes, str | bytes] = {}

_Shared = TypeVar("_Shared", bound=str | bytes)
_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def share_new(s: _Shared) -> _Shared:
    """Remember `s` as the shared object of its value (after a `SHARED` miss) and return it."""
    if len(SHARED) >= SHARED_ENTRIES:
        SHARED.clear()
    SHARED[s] = s
    return s


def share(s: _Shared) -> _Shared:
    """The shared object equal to `s`: an earlier equal value still in the memo, else `s`."""
    shared = SHARED.get(s)
    return share_new(s) if shared is None else cast(_Shared, shared)


def remember(
    memo: dict[_Key, _Value], key: _Key, value: _Value, entries: int = SHARED_ENTRIES
) -> _Value:
    """Put `value` in a memo of at most `entries` (emptied when full) and return it."""
    if len(memo) >= entries:
        memo.clear()
    memo[key] = value
    return value
