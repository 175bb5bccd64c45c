"""The loop signature: a stable, privacy-safe fingerprint of what a run is stuck on.

A signature hashes the normalised tool name, the call's args hash and the facts the engine
already keeps of the call's latest outcome (its result hash, or its failure identity where
the openclaw-2026.9 profile computes one; the outcome kind; the unknown tool an error names).
It holds no run id, agent id, seq or raw text, so every run stuck on the same call with the
same outcome, in any agent, has the same signature, and nothing of the arguments or results
can be read back from it (docs/fleet.md, "Signature").
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Final

from loopguard_fleet.detectors.outcome_facts import TOOL_LOOP_VETO
from loopguard_fleet.detectors.records import Record

__all__ = ["SIGNATURE_VERSION", "last_outcome", "loop_signature", "signature_of_call"]

#: Part of what is hashed: a new way of computing signatures gets a new version, so that
#: signatures of two versions never collide.
SIGNATURE_VERSION: Final = "loopguard-signature/1"
_SEP: Final = "\x1f"
_NONE: Final = "\x00"


def loop_signature(tool: str, args_hash: str, outcome: Record | None) -> str:
    """The signature (32 hex digits) of a call to `tool` with `args_hash` whose latest
    outcome is `outcome` (None: the call has no outcome yet)."""
    if outcome is None:
        return _signature(tool, args_hash, _NONE, _NONE, _NONE)
    # A failure identity survives the volatile text (pids, timestamps) that changes the
    # result hash of the same failure, so it stands for the outcome when there is one.
    identity = outcome.failure_identity
    what = f"failure:{identity}" if identity is not None else f"result:{outcome.result_hash}"
    kind, unknown = outcome.outcome_kind or _NONE, outcome.unknown_tool_name or _NONE
    return _signature(tool, args_hash, what, kind, unknown)


# A looping run asks for the same signature at every call (its contribution, the early rule,
# its loop events): the hash is computed once per distinct call and outcome. 1,024 entries
# (~0.5 MB) hold the loops in flight; a worker at 10,000 runs counts each byte (bench/memory.py).
@lru_cache(maxsize=1024)
def _signature(tool: str, args_hash: str, what: str, kind: str, unknown: str) -> str:
    raw = _SEP.join((SIGNATURE_VERSION, tool, args_hash, what, kind, unknown))
    return hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def last_outcome(history: list[Record], tool: str, args_hash: str) -> Record | None:
    """The newest completed record of this call in a run's history: the tool's own outcome,
    not a loop veto LoopGuard recorded; None when there is none."""
    for i in range(len(history) - 1, -1, -1):
        rec = history[i]
        if rec.args_hash != args_hash or rec.tool != tool:
            continue
        if rec.result_key is None and rec.outcome_kind is None:
            continue  # pending
        if rec.outcome_kind == TOOL_LOOP_VETO:
            continue  # our own block, not what the tool returned
        return rec
    return None


def signature_of_call(history: list[Record], tool: str, args_hash: str) -> str:
    """The signature of a call about to run, from its latest outcome in the run's history."""
    return loop_signature(tool, args_hash, last_outcome(history, tool, args_hash))
