"""A run's window counts kept as its history changes (`Tally`), so that a call costs a dict
lookup instead of a walk of the window.

The tally is a cache: never stored, derived from the history alone, so the stored state and
the verdicts do not change. A run's window is walked, as before, until a walk meets
`TALLY_FROM` records of one call (a loop); the tally is then built in one pass and the history
functions (detectors/history.py, detectors/history_2026_9.py, the only code that changes a
history in place) keep it in step while the run stays in memory (dropping it when the loop
ends and building it at the next cost more in bench/engine.py's `bursts`). Per call of the
window (its args hash) it keeps what the walks of `repeat_counts` (detectors/history.py) and
`counts_2026_9` (detectors/streaks.py, its same-args part) count:

- `recent`: records of the call; `open`: pending ones an outcome may pair with; `hashed`: ones
  with an outcome's hash (not vetoes);
- the trailing run of one outcome: `latest` (the newest hash), `run_h` (hashed records in the
  run), `run_all` (those and the vetoes between them, openclaw-2026.9), `tail_v` (vetoes newer
  than the newest hash; all of them when there is none).

A call with one record in the window is that record in the table (no counts object: most calls
of a window that reads a new file each time). A record evicted from the front shortens the run
only when the run reaches back to it; a veto inside the run that then falls out of it, or an
outcome paired with a pending record that is not the newest, leaves the call's run `exact =
False` and its next query walks the window for that call alone. A history replaced (restored,
loaded), or grown or shrunk behind the tally's back (its length or newest record changed),
drops its tally: it is walked again, and tallied again at its next loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.records import Record
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.streaks import VETO

__all__ = ["TALLY_FROM", "Counts", "Tally", "tally_after_walk", "tally_counts", "trim"]

# A run gets a tally once a walk of its window meets this many records of the call it counts
# for. Keeping counts in step costs a few method calls a record: for runs that do not loop
# (bench/engine.py's `unique` and `mixed`) that is more instructions than the walks it saves.
TALLY_FROM = 8
Counts = tuple[int, HashKey | None, int]  # (no-progress streak, its outcome's key, recent)
_NONE: Counts = (0, None, 0)


class _Call:
    """The counts of one call (args hash and tool) with more than one record in the window."""

    __slots__ = (
        "exact",
        "hashed",
        "latest",
        "open",
        "recent",
        "run_all",
        "run_h",
        "tail_v",
        "tool",
    )

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.recent = 0
        self.open = 0
        self.hashed = 0
        self.latest: HashKey | None = None
        self.run_h = 0
        self.run_all = 0
        self.tail_v = 0
        self.exact = True


class Tally:
    """The window counts of one history list under one semantics profile."""

    __slots__ = ("_calls", "_is_2026_9", "history", "is_off", "last", "n", "semantics")

    def __init__(self, history: list[Record], semantics: str) -> None:
        self.history = history
        self.semantics = semantics
        self._is_2026_9 = semantics == OPENCLAW_2026_9
        self._calls: dict[str, Record | _Call] = {}
        # Two tools with one args hash (a privacy-mode client's own hashes may collide so)
        # would share an entry: the tally gives up and the walks answer.
        self.is_off = False
        calls = self._calls
        for rec in history:
            c = calls.get(rec.args_hash)
            if c is None:
                calls[rec.args_hash] = rec
            else:
                self._add(c, rec)
        self.n = len(history)
        self.last = history[-1] if history else None

    # The entry points below test that the tally is in step themselves, inline: a call to a
    # shared test cost about as much as the walk a call of a run of new files saves.
    def append(self, history: list[Record], rec: Record, semantics: str, size: int) -> bool:
        """Append `rec` to `history`, drop its records beyond the newest `size`, and count
        both; False, with nothing done, when the tally does not describe `history`."""
        if (
            history is not self.history
            or self.n != len(history)
            or (history and history[-1] is not self.last)
            or semantics != self.semantics
        ):
            return False
        history.append(rec)
        calls = self._calls
        c = calls.get(rec.args_hash)
        if c is None:
            calls[rec.args_hash] = rec  # the call's only record stands for its counts
        elif type(c) is _Call and c.tool == rec.tool:
            self._count(c, rec)
        else:
            self._add(c, rec)
        excess = len(history) - size
        if excess > 0:
            for i in range(excess):
                old = history[i]
                c = calls.pop(old.args_hash, None)  # the call's only record, usually
                if type(c) is _Call:
                    calls[old.args_hash] = c
                    self._evict(c, old)
            del history[:excess]
        self.n = len(history)
        self.last = rec
        return True

    def has_open(self, history: list[Record], args_hash: str, semantics: str) -> bool | None:
        """Whether a pending record of this args hash may take an outcome (True when the tally
        cannot tell); None when the tally does not describe `history`."""
        if (
            history is not self.history
            or self.n != len(history)
            or (history and history[-1] is not self.last)
            or semantics != self.semantics
        ):
            return None
        c = self._calls.get(args_hash)
        if self.is_off:
            return True
        if c is None:
            return False
        if type(c) is Record:
            if c.result_key is not None:
                return False
            rare = c._rare  # read from the slot, as the walks do (detectors/streaks.py)
            return rare is None or rare[2] is None or not self._is_2026_9
        if TYPE_CHECKING:  # narrowed for mypy; a call at run time
            assert isinstance(c, _Call)
        return c.open > 0

    def put(self, history: list[Record], i: int, new: Record, semantics: str) -> bool:
        """Put `new` in place of the open record at index `i` of `history` (its call's) and
        count it; False, with nothing done, when the tally does not describe `history`."""
        if (
            history is not self.history
            or self.n != len(history)
            or (history and history[-1] is not self.last)
            or semantics != self.semantics
        ):
            return False
        old = history[i]
        history[i] = new
        calls = self._calls
        c = calls.get(old.args_hash)
        newest = i == len(history) - 1
        if newest:
            self.last = new
        if type(c) is Record:
            calls[old.args_hash] = new  # a call's only record: its place does not matter
        elif c is not None:
            if TYPE_CHECKING:  # narrowed for mypy; a call at run time
                assert isinstance(c, _Call)
            c.recent -= 1
            c.open -= 1
            self._count(c, new)
            if not newest:  # newer records of the call may hold the run's hash: walk it again
                c.exact = False
        return True

    def _add(self, c: Record | _Call, rec: Record) -> None:
        """Count a record appended as the newest to a call with records in the window."""
        if c.tool != rec.tool:
            self.is_off = True
            return
        if type(c) is Record:
            only = c
            c = self._calls[rec.args_hash] = _Call(rec.tool)
            self._count(c, only)
        if TYPE_CHECKING:  # narrowed for mypy; a call at run time
            assert isinstance(c, _Call)
        self._count(c, rec)

    def _count(self, c: _Call, rec: Record) -> None:
        """Count a record of the call newer than every record `c` counts."""
        c.recent += 1
        rare = rec._rare
        kind = None if rare is None else rare[2]
        if kind == VETO and self._is_2026_9:
            c.tail_v += 1
            return
        key = rec.result_key
        if not key:
            if key is None and (kind is None or not self._is_2026_9):
                c.open += 1
            return
        c.hashed += 1
        if not c.exact:
            return
        if c.latest == key:
            c.run_h += 1
            c.run_all += c.tail_v + 1
        else:  # a new outcome: vetoes older than it belong to no run of it
            c.latest = key
            c.run_h = c.run_all = 1
        c.tail_v = 0

    def _evict(self, c: _Call, rec: Record) -> None:
        """Uncount the window's oldest record, which leaves it, from its call's counts."""
        c.recent -= 1
        if c.recent == 0:
            del self._calls[rec.args_hash]
            return
        rare = rec._rare
        kind = None if rare is None else rare[2]
        if kind == VETO and self._is_2026_9:
            if c.latest is None:  # the count is the vetoes alone; older than every hash else
                c.tail_v -= 1
            return
        key = rec.result_key
        if not key:
            if key is None and (kind is None or not self._is_2026_9):
                c.open -= 1
            return
        covered = c.run_h == c.hashed  # the run reaches back to the oldest hashed record
        c.hashed -= 1
        if not c.exact or not covered:
            return
        if c.run_all != c.run_h:  # vetoes after it leave the run with it: count them again
            c.exact = False
            return
        c.run_h -= 1
        c.run_all -= 1
        if not c.run_h:
            c.latest = None

    def _rescan(self, c: _Call, args_hash: str) -> None:
        """The call's run, counted again from the window (oldest first, as `_count` does)."""
        c.latest, c.run_h, c.run_all, c.tail_v, c.exact = None, 0, 0, 0, True
        is_2026_9, tool = self._is_2026_9, c.tool
        for rec in self.history:
            if rec.args_hash != args_hash or rec.tool != tool:
                continue
            rare = rec._rare
            if is_2026_9 and rare is not None and rare[2] == VETO:
                c.tail_v += 1
                continue
            key = rec.result_key
            if not key:
                continue
            if c.latest == key:
                c.run_h += 1
                c.run_all += c.tail_v + 1
            else:
                c.latest = key
                c.run_h = c.run_all = 1
            c.tail_v = 0


def tally_counts(state: RunState, tool: str, args_hash: str, semantics: str) -> Counts | None:
    """The call's counts from the state's tally; None when it has none that describes its
    history (a stale one is dropped) or it gave up: the caller walks."""
    tally, history = state.tally, state.history
    if tally is None:
        return None
    if (
        history is not tally.history
        or tally.n != len(history)
        or (history and history[-1] is not tally.last)
        or semantics != tally.semantics
    ):
        state.keep_tally(None)
        return None
    if tally.is_off:
        return None
    c = tally._calls.get(args_hash)
    if c is None or c.tool != tool:
        return _NONE
    if type(c) is _Call:
        # `repeat_counts` (configurable) or `counts_2026_9`'s same-args walk of the call
        if not c.exact:
            tally._rescan(c, args_hash)
        if not tally._is_2026_9:
            return c.run_h, c.latest, c.recent
        if c.latest is None:
            return c.tail_v, None, c.recent
        return c.run_all + c.tail_v, c.latest, c.recent
    if TYPE_CHECKING:  # narrowed for mypy; a call at run time
        assert isinstance(c, Record)
    rare = c._rare  # read from the slot, as the walks do (detectors/streaks.py)
    if rare is not None and rare[2] == VETO and tally._is_2026_9:
        return 1, None, 1
    key = c.result_key
    return (1, key, 1) if key else (0, None, 1)


def tally_after_walk(state: RunState, semantics: str) -> None:
    """Give the state a tally (a walk of its window met `TALLY_FROM` records of one call)."""
    if state.tally is None:  # not one that gave up
        state.keep_tally(Tally(state.history, semantics))


def trim(history: list[Record], size: int) -> None:
    """Drop the oldest records beyond the newest `size` (a history without a tally)."""
    excess = len(history) - size
    if excess > 0:
        del history[:excess]
