"""A run's window counts kept as its history changes (`Tally`), so that a call costs a dict
lookup instead of a walk of the window.

The tally is a cache: never stored, derived from the history alone (a run loaded from the table,
unpacked or restored gets its tally rebuilt on its next call, in one pass of the window), so the
stored state and the verdicts do not change. Per call of the window (its args hash and tool) it
keeps what the walks of detectors/history.py (`repeat_counts`) and detectors/streaks.py
(`counts_2026_9`, same-args part) count, updated as a record is appended, completed or evicted:

- `recent`: records of the call; `open`: pending ones an outcome may pair with; `hashed`: ones
  with an outcome's hash (not vetoes);
- the trailing run of one outcome: `latest` (the newest hash), `run_h` (hashed records in the
  run), `run_all` (those and the vetoes between them, openclaw-2026.9), `tail_v` (vetoes newer
  than the newest hash; all of them when there is none).

A record evicted from the front only shortens the run when the run reaches back to it; a veto
inside the run that then falls out of it, or an outcome paired with a pending record that is not
the newest, leaves the call's run `exact = False` and its next query walks the window for that
call alone. The tally describes one list object: a history replaced, restored, grown or
shrunk behind its back (length or newest record changed) is rebuilt; the history functions
(detectors/history.py, detectors/history_2026_9.py) are the only code that changes a history
in place, and they keep it in step.
"""

from __future__ import annotations

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.profiles import OPENCLAW_2026_9
from loopguard_fleet.detectors.records import Record
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.streaks import VETO

__all__ = ["Tally", "live_tally", "tally_of", "trim"]


class _Call:
    """The counts of one call (args hash and tool) over the window."""

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
        self._calls: dict[str, _Call] = {}
        # Two tools with one args hash (a privacy-mode client's own hashes may collide so)
        # would share an entry: the tally gives up and the walks answer.
        self.is_off = False
        for rec in history:
            self.add(rec)
        self.sync()

    def sync(self) -> None:
        """Note the history's length and newest record (what `live_tally` checks)."""
        history = self.history
        self.n = len(history)
        self.last = history[-1] if history else None

    def add(self, rec: Record) -> None:
        """Count a record appended as the newest."""
        if self.is_off:
            return
        ahash = rec.args_hash
        c = self._calls.get(ahash)
        if c is None:
            c = self._calls[ahash] = _Call(rec.tool)
        elif c.tool != rec.tool:
            self.is_off = True
            return
        c.recent += 1
        rare = rec._rare  # read from the slot, as the walks do (detectors/streaks.py)
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

    def evict(self, rec: Record) -> None:
        """Uncount the window's oldest record, which leaves it."""
        if self.is_off:
            return
        ahash = rec.args_hash
        c = self._calls[ahash]
        c.recent -= 1
        if c.recent == 0:
            del self._calls[ahash]
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

    def complete(self, i: int, old: Record, new: Record) -> None:
        """Count `new` in place of the open record `old` at index `i` of the history."""
        if self.is_off:
            return
        c = self._calls[old.args_hash]
        c.recent -= 1
        c.open -= 1
        if i == len(self.history) - 1:  # the newest: as appended
            self.add(new)
            return
        # Newer records of the call may hold the run's hash: count it, walk the run again.
        self.add(new)
        c.exact = False

    def counts(self, tool: str, args_hash: str) -> tuple[int, HashKey | None, int]:
        """`repeat_counts` (configurable) or `counts_2026_9`'s same-args walk of this call:
        (no-progress streak, its outcome's hash key, recent count)."""
        c = self._calls.get(args_hash)
        if c is None or c.tool != tool:
            return 0, None, 0
        if not c.exact:
            self._rescan(c, args_hash)
        if self._is_2026_9:
            if c.latest is None:
                return c.tail_v, None, c.recent
            return c.run_all + c.tail_v, c.latest, c.recent
        return c.run_h, c.latest, c.recent

    def has_open(self, args_hash: str) -> bool:
        """True when a pending record of this args hash may take an outcome (or the tally
        cannot tell)."""
        if self.is_off:
            return True
        c = self._calls.get(args_hash)
        return c is not None and c.open > 0

    def _rescan(self, c: _Call, args_hash: str) -> None:
        """The call's run, counted again from the window (oldest first, as `add` does)."""
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


def live_tally(state: RunState, semantics: str) -> Tally | None:
    """The state's tally when it still describes its history under `semantics`, else None
    (dropped: the next query builds it again)."""
    tally, history = state.tally, state.history
    if tally is None:
        return None
    if (
        tally.history is not history
        or tally.n != len(history)
        or tally.semantics != semantics
        or (tally.last is not history[-1] if history else tally.last is not None)
    ):
        state.keep_tally(None)
        return None
    return tally


def tally_of(state: RunState, semantics: str) -> Tally:
    """The state's tally, built from its history when missing or stale."""
    tally = live_tally(state, semantics)
    if tally is None:
        tally = Tally(state.history, semantics)
        state.keep_tally(tally)
    return tally


def trim(history: list[Record], size: int, tally: Tally | None) -> None:
    """Drop the oldest records beyond `size`, uncounted from `tally` first."""
    excess = len(history) - size
    if excess > 0:
        if tally is not None:
            for i in range(excess):
                tally.evict(history[i])
        del history[:excess]
