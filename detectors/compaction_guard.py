"""compaction_loop_persisted (docs/semantics.md §8): the loop survived an auto-compaction.

A compaction arms the guard for `windowSize` recorded outcomes. If `windowSize` of them are
the same (tool, args, result), the run is aborted. Outcomes are taken in `seq` order: only
those after the compaction's seq count, and ones that were recorded before a late-arriving
compaction are fed in when it arms.

    compaction (seq 40) → read /x err, read /x err, read /x err → abort at the 3rd (count 3)

An armed guard keeps the policy of the compaction that armed it (its window, its mode and its
version, `RunState.guard_policy`) until it fires or its window ends, whatever policy the
outcomes after it are decided with. So a policy switch between a compaction and the outcomes
it watches decides alike whether the compaction is applied in seq order or arrives after
them (docs/policy.md, "Where a switch applies").
"""

from __future__ import annotations

from dataclasses import replace

from loopguard_fleet.detectors.state import GuardPolicy, RunState
from loopguard_fleet.detectors.values import GuardAbort, Record, Thresholds

DETECTOR = "compaction_loop_persisted"


def guard_policy_of(th: Thresholds) -> GuardPolicy:
    """What a compaction decided with `th` arms the guard with (window 0: the guard is off)."""
    window = th.post_compaction_window_size if th.post_compaction_guard else 0
    return window, th.enforce, th.policy_version


def arm_guard(state: RunState, th: Thresholds, seq: int | None = None) -> None:
    """Arm (or re-arm) the guard for the next window of outcomes."""
    arm_with(state, guard_policy_of(th), seq)


def arm_with(state: RunState, policy: GuardPolicy, seq: int | None = None) -> None:
    """Arm (or re-arm) the guard with a compaction's `guard_policy_of` (kept while it was held)."""
    if policy[0] <= 0:
        return
    state.guard_remaining = policy[0]
    state.guard_seq = seq
    state.guard_obs = []
    state.guard_policy = policy


def guard_thresholds(state: RunState, th: Thresholds) -> Thresholds:
    """The thresholds the armed guard decides with: `th` with the arming policy's window,
    mode and version (`th` itself when the guard keeps none or they are the same)."""
    kept = state.guard_policy
    if kept is None or kept == (th.post_compaction_window_size, th.enforce, th.policy_version):
        return th
    window, enforce, version = kept
    return replace(
        th,
        post_compaction_guard=True,
        post_compaction_window_size=window,
        enforce=enforce,
        policy_version=version,
    )


def observe_guard(state: RunState, record: Record, th: Thresholds) -> GuardAbort | None:
    """Feed one recorded outcome to the guard (`th`: `guard_thresholds`'); an abort when the
    loop persisted."""
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
            state.guard_policy = None
        return None
    state.guard_remaining = 0
    state.guard_obs = []
    state.guard_policy = None
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
