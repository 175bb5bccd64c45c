"""The decision order of each semantics profile (docs/semantics.md) and warning publication.

configurable: docs/semantics.md §6. openclaw-2026.9: the same rules over 2026.9's counts
(vetoes count, exec failures keep their identity), its two changed messages, argument churn as
rule 8, and the argument-churn liveness signal on poll and ping-pong warnings.
"""

from __future__ import annotations

import hashlib

from loopguard_fleet.detectors.hashkeys import HashKey
from loopguard_fleet.detectors.history import repeat_counts
from loopguard_fleet.detectors.profiles import CONFIGURABLE, OPENCLAW_2026_9
from loopguard_fleet.detectors.rules import (
    argument_churn,
    circuit_breaker,
    generic_repeat,
    known_poll,
    ping_pong,
    unknown_tool,
)
from loopguard_fleet.detectors.state import RunState
from loopguard_fleet.detectors.streaks import counts_2026_9, terminal_walk
from loopguard_fleet.detectors.tally import TALLY_FROM, Counts, tally_after_walk, tally_counts
from loopguard_fleet.detectors.values import Record, Thresholds, ToolCall, Verdict

BUCKET_SIZE = 10  # fixed by docs/semantics.md §7.3, whatever warningThreshold is
MAX_BUCKET_KEYS = 256


def detect(
    state: RunState, call: ToolCall, th: Thresholds, counts: Counts | None = None
) -> Verdict | None:
    """The rolling detectors' verdict on a call before it runs; does not mutate state (its
    window counts may be kept beside it, a cache: detectors/tally.py). `counts`: the call's
    `window_counts`, when the caller has them already (the fleet path)."""
    if not th.enabled:
        return None
    history, semantics = state.history, th.semantics
    if counts is not None:
        pass
    elif state.tally is not None:
        counts = window_counts(state, call, semantics)
    else:  # `window_counts` without a tally, inlined: most runs have none (no loop)
        if semantics == OPENCLAW_2026_9:
            counts = counts_2026_9(history, call.tool, call.args_hash)
        else:
            counts = repeat_counts(history, call.tool, call.args_hash)
        if counts[2] >= TALLY_FROM:
            tally_after_walk(state, semantics)
    if semantics == OPENCLAW_2026_9:
        return _detect_2026_9(history, call, th, counts)
    return _decide(history, call, th, counts)


def window_counts(state: RunState, call: ToolCall, semantics: str) -> Counts:
    """The call's (no-progress streak, its outcome's hash key, recent count) over the state's
    history under a profile: `counts_2026_9` or `repeat_counts`, from the state's tally when it
    has one (exec's 2026.9 terminal-failure walk stays a walk: it stops at the first record of
    another tool)."""
    tool, ahash, history = call.tool, call.args_hash, state.history
    counts = None if state.tally is None else tally_counts(state, tool, ahash, semantics)
    if counts is None:
        if semantics == OPENCLAW_2026_9:
            counts = counts_2026_9(history, tool, ahash)
        else:
            counts = repeat_counts(history, tool, ahash)
        if counts[2] >= TALLY_FROM:  # a loop: keep the counts from now on
            tally_after_walk(state, semantics)
        return counts
    if tool == "exec" and semantics == OPENCLAW_2026_9:
        failures = terminal_walk(history, tool, ahash)
        if failures[0] > counts[0]:
            return failures[0], failures[1], counts[2]
    return counts


def detect_pair(
    state: RunState, call: ToolCall, a: Thresholds, b: Thresholds
) -> tuple[Verdict | None, Verdict | None]:
    """`(detect(state, call, a), detect(state, call, b))`, the history walked once for both
    under the configurable profile (`loopguard compare` decides each call of a shared run
    under both policies)."""
    if not (a.enabled and b.enabled) or OPENCLAW_2026_9 in (a.semantics, b.semantics):
        return detect(state, call, a), detect(state, call, b)
    history = state.history
    counts = window_counts(state, call, CONFIGURABLE)
    alternation: list[ping_pong.Alternation] = []  # the ping-pong walk, once a rule reads it
    return (
        _decide(history, call, a, counts, alternation),
        _decide(history, call, b, counts, alternation),
    )


def _decide(
    history: list[Record],
    call: ToolCall,
    th: Thresholds,
    counts: tuple[int, HashKey | None, int] | None = None,
    alternation: list[ping_pong.Alternation] | None = None,
) -> Verdict | None:
    """The configurable profile's decision order (docs/semantics.md §6), from the counts and
    the ping-pong walk when the caller has them already."""
    # The first test of rules 1, 2, 5-6 and 7-8 is made here (each rule's module makes it
    # again): most calls pass none, and a function call is a good part of what they cost.
    if history and history[-1].unknown_tool_name:
        verdict = unknown_tool.check(history, call, th)
        if verdict is not None:
            return verdict
    if counts is None:
        counts = repeat_counts(history, call.tool, call.args_hash)
    streak, latest, recent = counts
    if streak >= th.global_circuit_breaker_threshold:
        return circuit_breaker.check(call, streak, latest, th)
    is_poll = th.known_poll or known_poll.is_known_poll(call)
    if is_poll:
        verdict = known_poll.check(call, streak, latest, th)
        if verdict is not None:
            return verdict
    if len(history) > 1 and history[-1].args_hash != call.args_hash:  # else no alternation
        verdict = ping_pong.check(history, call, th, alternation)
        if verdict is not None:
            return verdict
    if is_poll or (streak < th.critical_threshold and recent < th.warning_threshold):
        return None  # rules 7-8 (generic_repeat) give nothing below both thresholds
    return generic_repeat.check(call, streak, latest, recent, th)


def _detect_2026_9(
    history: list[Record],
    call: ToolCall,
    th: Thresholds,
    counts: tuple[int, HashKey | None, int],
) -> Verdict | None:
    """OpenClaw 2026.9's decision order (docs/semantics.md, "Decision order"), from the
    call's counts (`counts_2026_9`)."""
    # As in `_decide`, a rule's first test is made here when most calls pass none of it.
    if history and history[-1].unknown_tool_name:
        verdict = unknown_tool.check(history, call, th)
        if verdict is not None:
            return verdict
    tool, ahash = call.tool, call.args_hash
    streak, latest, recent = counts
    # 2026.9's wording goes in as the verdict is made (a looping run is blocked at every call).
    if streak >= th.global_circuit_breaker_threshold:
        message = circuit_breaker.message_2026_9(tool, streak)
        verdict = circuit_breaker.check(call, streak, latest, th, message)
        if verdict is not None:
            return verdict
    is_poll = th.known_poll or known_poll.is_known_poll(call)
    if is_poll:
        verdict = known_poll.check(call, streak, latest, th)
        if verdict is not None:
            return _with_liveness(verdict, history, call, th)
    if len(history) > 1 and history[-1].args_hash != ahash:  # else no alternation
        verdict = ping_pong.check(history, call, th)
        if verdict is not None:
            return _with_liveness(verdict, history, call, th)
    # Rule 7 alone (a zero recent count keeps generic_repeat from warning), when it can fire.
    if not is_poll and (streak >= th.critical_threshold or th.warning_threshold <= 0):
        message = generic_repeat.message_2026_9(tool, streak)
        verdict = generic_repeat.check(call, streak, latest, 0, th, message)
        if verdict is not None:
            return verdict
    # Rule 8's walk starts at the newest record and needs it to be of this tool: when it is
    # not, the count is 0, which warns only under a threshold of 0.
    if (history and history[-1].tool == tool) or th.warning_threshold <= 0:
        # Unpacked by name: compiled, a starred call goes through the generic call protocol.
        count, variants = argument_churn.churn(history, tool, ahash)
        verdict = argument_churn.check(call, count, variants, th)
        if verdict is not None:
            return _live(verdict)
    if is_poll or (recent < th.warning_threshold and th.critical_threshold > 0):
        return None  # rule 8 gives nothing below the warning threshold
    return generic_repeat.check(call, 0, latest, recent, th)


def _with_liveness(
    verdict: Verdict, history: list[Record], call: ToolCall, th: Thresholds
) -> Verdict:
    """A warning carries the argument-churn liveness signal when churn is at the threshold."""
    if verdict.level != "warning":
        return verdict
    if argument_churn.churn(history, call.tool, call.args_hash)[0] < th.warning_threshold:
        return verdict
    return _live(verdict)


# A verdict made anew rather than with dataclasses.replace, which looks the fields up each
# time (~2 µs).
def _live(verdict: Verdict) -> Verdict:
    """The verdict carrying the argument-churn liveness signal."""
    v = verdict
    return Verdict(
        v.level,
        v.detector,
        v.count,
        v.message,
        v.warning_key,
        v.paired_tool,
        argument_churn.LIVENESS_SIGNAL,
    )


# A looping run warns under the same key at every call: the short ids are memoised (bounded,
# emptied when full, as the engine's other caches; docs/performance.md).
_BUCKET_KEY_ENTRIES = 4096
_BUCKET_KEYS: dict[str, str] = {}


def bucket_key(warning_key: str) -> str:
    """The short id under which a warning key's bucket is stored (keeps state small)."""
    key = _BUCKET_KEYS.get(warning_key)
    if key is None:
        raw = warning_key.encode("utf-8", "surrogatepass")
        key = hashlib.blake2b(raw, digest_size=9).hexdigest()
        if len(_BUCKET_KEYS) >= _BUCKET_KEY_ENTRIES:
            _BUCKET_KEYS.clear()
        _BUCKET_KEYS[warning_key] = key
    return key


def publish_warning(state: RunState, warning_key: str, count: int) -> bool:
    """Whether a warning is published: its count's bucket exceeds the stored one (raised)."""
    bucket = count // BUCKET_SIZE
    key = bucket_key(warning_key)
    buckets = state.buckets
    stored = buckets.get(key)
    if bucket <= (stored or 0):
        return False
    if stored is None and len(buckets) >= MAX_BUCKET_KEYS:
        del buckets[next(iter(buckets))]
    buckets[key] = bucket  # an existing key keeps its insertion position
    return True
