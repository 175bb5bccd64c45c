"""compaction_loop_persisted (docs/semantics.md §8): the loop survived an auto-compaction.

A compaction arms the guard for `windowSize` recorded outcomes. If `windowSize` of them are
the same (tool, args, result), the run is aborted. Outcomes are taken in `seq` order: only
those after the compaction's seq count, and ones that were recorded before a late-arriving
compaction are fed in when it arms.

    compaction (seq 40) → read /x err, read /x err, read /x err → abort at the 3rd (count 3)
"""

from __future__ import annotations

from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.values import GuardAbort, Record, Thresholds

DETECTOR = "compaction_loop_persisted"


def arm_guard(state: RunState, th: Thresholds, seq: int | None = None) -> None:
    """Arm (or re-arm) the guard for the next window of outcomes."""
    if not th.post_compaction_guard:
        return
    state.guard_remaining = th.post_compaction_window_size
    state.guard_seq = seq
    state.guard_obs = []


def observe_guard(state: RunState, record: Record, th: Thresholds) -> GuardAbort | None:
    """Feed one recorded outcome to the guard; an abort when the loop persisted."""
    if not th.post_compaction_guard or state.guard_remaining <= 0:
        return None
    if state.guard_seq is not None and record.seq <= state.guard_seq:
        return None  # happened before the compaction, only delivered after it
    rhash = record.result_hash  # the guard keeps text (RunState.guard_obs)
    if rhash is None:
        return None
    state.guard_remaining -= 1
    obs = (record.tool, record.args_hash, rhash)
    state.guard_obs.append(obs)
    count = state.guard_obs.count(obs)
    window = th.post_compaction_window_size
    if count < window:
        if state.guard_remaining <= 0:
            state.guard_obs = []
        return None
    state.guard_remaining = 0
    state.guard_obs = []
    return GuardAbort(
        DETECTOR,
        count,
        record.tool,
        f"CRITICAL: tool {record.tool} repeated {count} times with identical arguments and "
        f"identical results within {window} attempts after auto-compaction. The compaction did "
        "not break the loop. Aborting to prevent runaway resource use.",
    )


def late_outcomes(state: RunState, seq: int) -> list[Record]:
    """Recorded outcomes with a seq after `seq`, in seq order (for a late compaction)."""
    done = [r for r in state.history if r.result_key is not None and r.seq > seq]
    done.sort(key=lambda r: r.seq)
    return done
