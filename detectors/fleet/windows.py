"""Fleet counts in hopping event-time windows and the signals they raise (docs/fleet.md,
"Windows and signals").

`FleetWindows` folds observations (detectors/fleet/contribution.py) into per-signature counts
of distinct runs, distinct agents and calls, and turns them into signal changes as a
watermark (event time, given by the caller) passes. A window is `windowSeconds` long and one
starts every half window, so a burst no longer than half a window always lies in one of them,
wherever the boundaries fall. Each observation is stored once, in the half-window *bucket* it
falls in; a window's counts are its two buckets' together.

- a signature **fires** at the event time a window has `minRuns` distinct runs: the
  `minRuns`-th smallest first-seen time among them, so the result does not depend on the
  order in which observations arrived;
- it stays firing across windows and **resolves** at the end of the first later window in
  which it did not reach `minRuns` runs.

The watermark is exclusive: every observation with an event time before it has arrived.
Changes come out only when the watermark has passed them, sorted by (event time, signature),
a resolution before a firing at the same time. An observation whose windows the watermark has
both closed is late: it is dropped and counted, never silently. Distinct signatures per
bucket are capped (`max_signatures`, so a window holds at most twice that): past the cap a
new signature is dropped and counted, a firing one is still counted.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final, Literal

from loopguard_fleet.detectors.fleet.contribution import Observation

__all__ = [
    "MAX_SIGNATURES",
    "SAMPLE_RUNS",
    "STATE_VERSION",
    "FleetWindows",
    "SignalChange",
    "signal_id",
]

#: Distinct signatures counted per half-window bucket before new ones are dropped: a window
#: holds at most 100,000 (docs/fleet.md).
MAX_SIGNATURES: Final = 50_000
#: Run ids a signal names as samples: the smallest, so they do not depend on arrival order.
SAMPLE_RUNS: Final = 3

#: Version of `FleetWindows.state()`: a state of another version is not restored.
STATE_VERSION: Final = 1

SignalState = Literal["firing", "resolved"]


FirstSeen = dict[str, int]  # run or agent id → its first event time in the window


def _seen(one: tuple[str, int] | FirstSeen | None) -> FirstSeen:
    if one is None:
        return {}
    return {one[0]: one[1]} if type(one) is tuple else one  # type: ignore[return-value]


def _add(one: tuple[str, int] | FirstSeen | None, key: str, ts: int) -> tuple[str, int] | FirstSeen:
    """Note `key` seen at `ts`; a single id stays a tuple (most signatures never get a
    second run or agent: ~300 B less each than two dicts)."""
    if one is None:
        return (key, ts)
    if type(one) is tuple:
        if one[0] == key:
            return (key, min(ts, one[1]))
        return {one[0]: one[1], key: ts}
    assert isinstance(one, dict)
    known = one.get(key)
    if known is None or ts < known:
        one[key] = ts
    return one


@dataclass(slots=True)
class _Count:
    """One signature's counts in one window."""

    tool: str
    first_ms: int
    last_ms: int
    calls: int = 0
    has_failure: bool = False
    run_times: tuple[str, int] | FirstSeen | None = None  # see `_add`
    agent_times: tuple[str, int] | FirstSeen | None = None

    @property
    def runs(self) -> FirstSeen:
        """Each distinct run's first event time."""
        return _seen(self.run_times)

    @property
    def agents(self) -> FirstSeen:
        """Each distinct agent's first event time."""
        return _seen(self.agent_times)

    @property
    def n_runs(self) -> int:
        """How many distinct runs."""
        times = self.run_times
        return 0 if times is None else 1 if type(times) is tuple else len(times)


def _compact(seen: dict[str, int]) -> tuple[str, int] | FirstSeen | None:
    """A restored id → time map in `_add`'s form (a single id as a tuple)."""
    if not seen:
        return None
    if len(seen) == 1:
        [(key, ts)] = seen.items()
        return (key, ts)
    return dict(seen)


def _fields(c: _Count) -> list[object]:
    """A count's fields as its state lists them (`FleetWindows.state`)."""
    return [c.tool, c.first_ms, c.last_ms, c.calls, c.has_failure, c.runs, c.agents]


def _merged(a: _Count, b: _Count) -> _Count:
    """Two buckets' counts of one signature as one window's (each id's earliest time)."""
    runs, agents = dict(a.runs), dict(a.agents)
    for mine, theirs in ((runs, b.runs), (agents, b.agents)):
        for key, ts in theirs.items():
            known = mine.get(key)
            mine[key] = ts if known is None else min(known, ts)
    return _Count(
        a.tool,
        min(a.first_ms, b.first_ms),
        max(a.last_ms, b.last_ms),
        a.calls + b.calls,
        a.has_failure or b.has_failure,
        runs or None,
        agents or None,
    )


@dataclass(frozen=True, slots=True)
class SignalChange:
    """A signature that started firing or resolved, with the evidence of its window."""

    state: SignalState
    signal_id: str
    signature: str
    tool: str
    at_ms: int  # event time of the change
    window_start_ms: int
    window_end_ms: int
    runs: int
    agents: int
    calls: int | None  # resolved only: a firing change counts as of its event time
    first_seen_ms: int
    last_seen_ms: int
    sample_run_ids: tuple[str, ...]
    is_failure: bool


def signal_id(signature: str, fired_at_ms: int) -> str:
    """Stable id of the signal a signature raised at an event time (32 hex digits)."""
    raw = f"fleet_signal\x1f{signature}\x1f{fired_at_ms}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


@dataclass(slots=True)
class _Firing:
    signal_id: str
    tool: str
    checked_ms: int  # start of the last window in which it reached minRuns


class FleetWindows:
    """The fleet counts of one signature partition: live buckets, firing signatures."""

    def __init__(
        self, window_seconds: int, min_runs: int, max_signatures: int = MAX_SIGNATURES
    ) -> None:
        self.window_ms = window_seconds * 1000
        self.hop_ms = self.window_ms // 2  # windows start every half window
        self.min_runs = min_runs
        self.max_signatures = max_signatures
        self.buckets: dict[int, dict[str, _Count]] = {}  # bucket start → signature → counts
        self.firing: dict[str, _Firing] = {}
        # (window start, signature) at minRuns and not firing: the only ones `advance` may
        # fire, so that it does not walk every signature of a window each time.
        self.ready: set[tuple[int, str]] = set()
        self.watermark_ms: int | None = None
        self.dropped_late = 0
        self.dropped_full = 0

    def bucket_start(self, ts_ms: int) -> int:
        """The start of the half-window bucket an event time falls in."""
        return ts_ms - ts_ms % self.hop_ms

    def signal_of(self, signature: str) -> str | None:
        """The id of the signal a signature is firing as of the watermark, else None."""
        firing = self.firing.get(signature)
        return None if firing is None else firing.signal_id

    def observe(self, obs: Observation) -> bool:
        """Count one observation; False when it was dropped (late, or the bucket is full)."""
        bucket = self.bucket_start(obs.ts_ms)
        mark = self.watermark_ms
        if mark is not None and bucket + self.window_ms <= mark:
            self.dropped_late += 1  # both windows it falls in are closed
            return False
        counts = self.buckets.setdefault(bucket, {})
        count = counts.get(obs.signature)
        if count is None:
            if len(counts) >= self.max_signatures and obs.signature not in self.firing:
                self.dropped_full += 1
                return False
            count = counts[obs.signature] = _Count(obs.tool, obs.ts_ms, obs.ts_ms)
        count.run_times = _add(count.run_times, obs.run_id, obs.ts_ms)
        if obs.agent_id is not None:
            count.agent_times = _add(count.agent_times, obs.agent_id, obs.ts_ms)
        count.calls += 1
        count.has_failure = count.has_failure or obs.is_failure
        count.first_ms = min(count.first_ms, obs.ts_ms)
        count.last_ms = max(count.last_ms, obs.ts_ms)
        if obs.signature not in self.firing:
            for start in (bucket - self.hop_ms, bucket):
                if mark is not None and start + self.window_ms <= mark:
                    continue  # that window is closed
                window = self._window(start, obs.signature)
                if window is not None and window.n_runs >= self.min_runs:
                    self.ready.add((start, obs.signature))
        return True

    def set_min_runs(self, min_runs: int) -> None:
        """Judge by another `minRuns` from now on: the open windows' counts stay, and those
        that reach it now may fire as the watermark passes them."""
        self.min_runs = min_runs
        mark = self.watermark_ms
        self.ready = set()
        for start in self._window_starts():
            if mark is not None and start + self.window_ms <= mark:
                continue  # closed
            first, second = self.buckets.get(start, {}), self.buckets.get(start + self.hop_ms, {})
            for signature in first.keys() | second.keys():
                window = self._window(start, signature)
                if signature not in self.firing and window and window.n_runs >= min_runs:
                    self.ready.add((start, signature))

    def resize(self, window_seconds: int) -> None:
        """Count in windows of another length from the watermark on: the counts start afresh;
        a firing signature stays firing, as if it had met `minRuns` in the window of the
        bucket that holds the watermark, and resolves after the first later window that does
        not meet it."""
        self.window_ms = window_seconds * 1000
        self.hop_ms = self.window_ms // 2
        self.buckets = {}
        self.ready = set()
        if self.watermark_ms is not None:
            anchor = self.bucket_start(self.watermark_ms)
            for firing in self.firing.values():
                firing.checked_ms = anchor

    def state(self) -> dict[str, Any]:
        """Everything the counts and signals depend on, as JSON-ready data (`restore` reads
        it back): a restored copy gives the same changes for the same observations."""
        return {
            "v": STATE_VERSION,
            "window_ms": self.window_ms,
            "min_runs": self.min_runs,
            "watermark": self.watermark_ms,
            "dropped": [self.dropped_late, self.dropped_full],
            "buckets": [
                [
                    start,
                    [[sig, *_fields(c)] for sig, c in sorted(counts.items())],
                ]
                for start, counts in sorted(self.buckets.items())
            ],
            "firing": [
                [s, f.signal_id, f.tool, f.checked_ms] for s, f in sorted(self.firing.items())
            ],
            "ready": sorted([start, sig] for start, sig in self.ready),
        }

    def restore(self, state: dict[str, Any]) -> bool:
        """Take the counts and signals `state()` gave; False (nothing changed) when they were
        kept with other windows, another `minRuns` or another version."""
        if (state.get("v"), state.get("window_ms"), state.get("min_runs")) != (
            STATE_VERSION,
            self.window_ms,
            self.min_runs,
        ):
            return False
        self.watermark_ms = state["watermark"]
        self.dropped_late, self.dropped_full = state["dropped"]
        self.buckets = {
            start: {
                sig: _Count(tool, first, last, calls, failure, _compact(runs), _compact(agents))
                for sig, tool, first, last, calls, failure, runs, agents in counts
            }
            for start, counts in state["buckets"]
        }
        self.firing = {s: _Firing(sid, tool, checked) for s, sid, tool, checked in state["firing"]}
        self.ready = {(start, sig) for start, sig in state["ready"]}
        return True

    def _window(self, start: int, signature: str) -> _Count | None:
        """A signature's counts in the window starting at `start` (its two buckets')."""
        first = self.buckets.get(start, {}).get(signature)
        second = self.buckets.get(start + self.hop_ms, {}).get(signature)
        if first is None or second is None:
            return first or second
        return _merged(first, second)

    def _window_starts(self) -> list[int]:
        """The starts of the windows that hold a live bucket, in order."""
        return sorted({s for b in self.buckets for s in (b - self.hop_ms, b)})

    def advance(self, watermark_ms: int) -> list[SignalChange]:
        """Move the watermark (never back) and return the signal changes it passed."""
        if self.watermark_ms is not None and watermark_ms <= self.watermark_ms:
            return []
        self.watermark_ms = watermark_ms
        out: list[SignalChange] = []
        for start in self._window_starts():
            self._resolve_gaps(start, out)
            for signature in sorted(sig for at, sig in self.ready if at == start):
                window = self._window(start, signature)
                if signature not in self.firing and window is not None:
                    self._maybe_fire(signature, window, start, watermark_ms, out)
            if start + self.window_ms > watermark_ms:
                continue  # still open
            for signature in sorted(self.firing):
                firing = self.firing[signature]
                if firing.checked_ms >= start:
                    continue  # fired in this window
                window = self._window(start, signature)
                if window is not None and window.n_runs >= self.min_runs:
                    firing.checked_ms = start
                    continue
                self._resolve(signature, window, start, out)
            # Both windows this bucket belongs to (start - hop and start) are closed now.
            self.buckets.pop(start, None)
            self.ready = {(at, sig) for at, sig in self.ready if at != start}
        self._resolve_gaps(None, out)
        # A signature resolved and firing again at one event time: the resolution first.
        out.sort(key=lambda c: (c.at_ms, c.signature, c.state == "firing"))
        return out

    def _maybe_fire(
        self, signature: str, count: _Count, start: int, mark: int, out: list[SignalChange]
    ) -> None:
        if count.n_runs < self.min_runs:
            return
        fired_at = sorted(count.runs.values())[self.min_runs - 1]
        if fired_at >= mark:
            return  # the watermark has not passed the moment it reached minRuns yet
        self.ready.discard((start, signature))
        sid = signal_id(signature, fired_at)
        self.firing[signature] = _Firing(sid, count.tool, start)
        out.append(self._change("firing", sid, signature, count, start, fired_at))

    def _resolve_gaps(self, before: int | None, out: list[SignalChange]) -> None:
        """Resolve firing signatures whose next window held no observation at all and closed
        (it starts before `before`, the next window with a live bucket, or there is none)."""
        mark = self.watermark_ms
        assert mark is not None
        for signature in sorted(self.firing):
            gap = self.firing[signature].checked_ms + self.hop_ms
            if (before is None or gap < before) and gap + self.window_ms <= mark:
                self._resolve(signature, None, gap, out)

    def _resolve(
        self, signature: str, count: _Count | None, start: int, out: list[SignalChange]
    ) -> None:
        firing = self.firing.pop(signature)
        end = start + self.window_ms
        for at in self._window_starts():  # later windows it reached minRuns in may fire
            later = self._window(at, signature) if at > start else None
            if later is not None and later.n_runs >= self.min_runs:
                self.ready.add((at, signature))
        kept = count or _Count(firing.tool, start, start)
        out.append(self._change("resolved", firing.signal_id, signature, kept, start, end))

    def _change(
        self,
        state: SignalState,
        sid: str,
        signature: str,
        count: _Count,
        start: int,
        at_ms: int,
    ) -> SignalChange:
        """The change with its window's evidence: a resolution's whole (closed) window; a
        firing's as of its event time, so that it does not depend on when the watermark
        passed it (runs and agents first seen by then; the last seen is the firing time)."""
        runs, agents = count.runs, count.agents
        calls: int | None = count.calls
        last = count.last_ms
        if state == "firing":
            runs = {run: t for run, t in runs.items() if t <= at_ms}
            agents = {agent: t for agent, t in agents.items() if t <= at_ms}
            calls, last = None, at_ms
        return SignalChange(
            state=state,
            signal_id=sid,
            signature=signature,
            tool=count.tool,
            at_ms=at_ms,
            window_start_ms=start,
            window_end_ms=start + self.window_ms,
            runs=len(runs),
            agents=len(agents),
            calls=calls,
            first_seen_ms=count.first_ms,
            last_seen_ms=last,
            sample_run_ids=tuple(sorted(runs)[:SAMPLE_RUNS]),
            is_failure=count.has_failure,
        )
