"""The openclaw-2026.9 no-progress count: veto records count, exec failures keep identity.

Walks the history newest first (docs/semantics.md, "openclaw-2026.9: counts"):
- same-args walk: records of this tool and args; a veto adds one to a pending tally that the
  next hashed record of the streak takes with it; unhashed records are skipped; the first
  hashed record is `latest`; equal hashes extend the streak, a different one ends it. No
  hashed record at all: the count is the vetoes alone.
- terminal-failure walk (`exec` only): any args, but another tool or a hashed record that is
  not a terminal exec failure ends it; after crossing to other args, meeting this call's args
  again ends it; a record extends the streak when its hash or its failure identity equals
  `latest`'s.
`exec` takes the larger of the two (ties: same-args).

    exec "npm test" fails "… 10:00:01 attempt 1", then "npm run test" fails "… 10:00:09
    attempt 2": one failure identity, so the terminal-failure walk counts 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.records import Record

__all__ = [
    "VETO",
    "HistoryRecord",
    "as_records",
    "counts_2026_9",
    "no_progress_2026_9",
    "recent_count",
    "terminal_walk",
]

VETO = "tool-loop-veto"
TERMINAL = "terminal-exec-failure"


class HistoryRecord(Protocol):
    """What the 2026.9 counts read from a history record."""

    @property
    def tool(self) -> str: ...
    @property
    def args_hash(self) -> str: ...
    @property
    def result_key(self) -> HashKey | None: ...
    @property
    def outcome_kind(self) -> str | None: ...
    @property
    def failure_identity(self) -> str | None: ...
    @property
    def no_progress(self) -> bool: ...


def as_records(history: Sequence[HistoryRecord]) -> list[Record]:
    """The history as a list of `Record`s: the engine's own window as is, another's records
    copied into `Record`s with their facts (the compiled engine reads a record's slots only
    so; setup.py)."""
    if type(history) is list and (not history or type(history[-1]) is Record):
        return history
    return [
        Record(
            r.tool,
            r.args_hash,
            None,
            r.result_key,
            None,
            outcome_kind=r.outcome_kind,
            failure_identity=r.failure_identity,
            no_progress=r.no_progress,
        )
        for r in history
    ]


# The walks read a record's outcome kind and failure identity from its `_rare` slot
# (detectors/records.py) instead of through their properties: in a blocked loop every call
# walks a window of vetoes, and a property read cost ~0.1 µs a record, most of the walk. The
# windows are typed as lists: the compiled engine (setup.py) indexes and reverses a list by
# its own loop, any other sequence by the generic protocol.
def terminal_walk(history: list[Record], tool: str, args_hash: str) -> tuple[int, HashKey | None]:
    """exec's terminal-failure streak: newest exec records failing with one identity."""
    streak = 0
    pending_vetoes = 0
    latest: Record | None = None
    latest_identity: str | None = None
    crossed = False
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        if rec.tool != tool:
            break
        rare = rec._rare
        kind = None if rare is None else rare[2]
        if kind == VETO:
            pending_vetoes += 1
            continue
        rhash = rec.result_key
        if not rhash:
            continue
        if kind != TERMINAL:
            break
        assert rare is not None  # a terminal failure has its facts
        if latest is None:
            latest = rec
            latest_identity = rare[3]
            crossed = rec.args_hash != args_hash
            streak = pending_vetoes + 1
            pending_vetoes = 0
            continue
        if crossed and rec.args_hash == args_hash:
            break
        if rec.args_hash != args_hash:
            crossed = True
        identity = rare[3]
        same_failure = identity is not None and identity == latest_identity
        if rhash != latest.result_key and not same_failure:
            break
        streak += pending_vetoes + 1
        pending_vetoes = 0
    if latest is None:
        return 0, None
    return streak, latest.result_key


def counts_2026_9(
    history: Sequence[HistoryRecord], tool: str, args_hash: str
) -> tuple[int, HashKey | None, int]:
    """(no-progress count, the streak's latest outcome's hash key, recent count) for a call of
    `tool`/`args_hash`, in one walk of the window (two for exec)."""
    records = as_records(history)
    streak = 0
    pending_vetoes = 0
    latest: HashKey | None = None
    recent = 0
    counting = True
    for rec in reversed(records):
        if rec.args_hash != args_hash or rec.tool != tool:
            continue
        recent += 1
        if not counting:
            continue
        rare = rec._rare
        if rare is not None and rare[2] == VETO:
            pending_vetoes += 1
            continue
        rhash = rec.result_key
        if not rhash:
            continue
        if latest is None:
            latest = rhash
            streak = pending_vetoes + 1
        elif rhash != latest:
            counting = False  # the streak ends; the recent count goes on
            continue
        else:
            streak += pending_vetoes + 1
        pending_vetoes = 0
    if latest is None:
        streak = pending_vetoes
    if tool == "exec":
        failures = terminal_walk(records, tool, args_hash)
        if failures[0] > streak:
            return failures[0], failures[1], recent
    return streak, latest, recent


def no_progress_2026_9(
    history: Sequence[HistoryRecord], tool: str, args_hash: str
) -> tuple[int, HashKey | None]:
    """(no-progress count, the streak's latest outcome's hash key, detectors/hashkeys.py) for
    a call of `tool`/`args_hash`."""
    streak, latest, _ = counts_2026_9(history, tool, args_hash)
    return streak, latest


def recent_count(history: Sequence[HistoryRecord], tool: str, args_hash: str) -> int:
    """Records of this call in the window: pending, completed and vetoed alike."""
    return counts_2026_9(history, tool, args_hash)[2]
