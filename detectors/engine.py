"""The decision order of SPEC §6 and warning-bucket publication of SPEC §7.3."""

from __future__ import annotations

import hashlib

from detectors.history import repeat_counts
from detectors.rules import circuit_breaker, generic_repeat, known_poll, ping_pong, unknown_tool
from detectors.state import RunState
from detectors.values import Thresholds, ToolCall, Verdict

BUCKET_SIZE = 10  # fixed by SPEC §7.3, whatever warningThreshold is
MAX_BUCKET_KEYS = 256


def detect(state: RunState, call: ToolCall, th: Thresholds) -> Verdict | None:
    """The rolling detectors' verdict on a call before it runs; does not mutate state."""
    if not th.enabled:
        return None
    history = state.history
    verdict = unknown_tool.check(history, call, th)
    if verdict is not None:
        return verdict
    streak, latest, recent = repeat_counts(history, call.tool, call.args_hash)
    verdict = circuit_breaker.check(call, streak, latest, th)
    if verdict is not None:
        return verdict
    is_poll = known_poll.is_known_poll(call)
    if is_poll:
        verdict = known_poll.check(call, streak, latest, th)
        if verdict is not None:
            return verdict
    verdict = ping_pong.check(history, call, th)
    if verdict is not None or is_poll:
        return verdict
    return generic_repeat.check(call, streak, latest, recent, th)


def bucket_key(warning_key: str) -> str:
    """The short id under which a warning key's bucket is stored (keeps state small)."""
    return hashlib.blake2b(warning_key.encode("utf-8", "surrogatepass"), digest_size=9).hexdigest()


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
