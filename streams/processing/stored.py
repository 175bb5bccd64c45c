"""The worker's table value: a run's engine state with the stream time of its last event.

The engine's `RunState` holds only what detection reads; when a run last saw an event (the
stream layer's idle TTL and cache eviction) is the worker's and travels beside it, in an
envelope of its own version (docs/wire-format.md, "Run state (changelog values)"):

    {"w": 1, "m": <last event time, epoch ms, or absent>, "r": <RunState document>}

A value without the envelope is a bare state of formats 1-2 (written before the envelope),
whose stamp sat inside the state: it loads, stamp and all, and is written back enveloped at
the run's next checkpoint.
"""

from __future__ import annotations

from typing import NamedTuple

from loopguard_fleet.detectors import InvalidState, RunState
from loopguard_fleet.detectors.jsjson import NotJSON, dumps, loads
from loopguard_fleet.detectors.state import legacy_stamp_ms

__all__ = ["ENVELOPE_VERSION", "Stored", "decode_stored", "encode_stored"]

ENVELOPE_VERSION = 1


class Stored(NamedTuple):
    """A run as the table keeps it: its engine state and its last event's stream time."""

    state: RunState
    stamp_ms: int | None


def encode_stored(state: RunState, stamp_ms: int | None) -> bytes:
    """The table value for a run's state and its last event time."""
    doc: dict[str, object] = {"w": ENVELOPE_VERSION}
    if stamp_ms is not None:
        doc["m"] = stamp_ms
    doc["r"] = state.to_doc()
    # orjson >= 3.12 returns bytes inside its 4 KB+ output buffer, which stays allocated as
    # long as the value lives (in the table's store and the changelog's queue): an exact-size
    # copy costs ~0.3 µs and saved ~10 % of the worker's RSS per active run
    # (docs/performance.md).
    return bytes(memoryview(dumps(doc)))


def decode_stored(raw: bytes | str) -> Stored:
    """A table value (enveloped, or a bare format 1-2 state); raises InvalidState otherwise."""
    try:
        doc = loads(raw)
    except NotJSON as e:
        raise InvalidState(f"corrupt table value: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidState("a table value must be a JSON object")
    if "w" not in doc:  # a bare state, written before the envelope
        return Stored(RunState.from_doc(doc), legacy_stamp_ms(doc))
    if doc["w"] != ENVELOPE_VERSION:
        raise InvalidState(f"unknown table value envelope {doc['w']!r}")
    stamp = doc.get("m")
    if stamp is not None and type(stamp) is not int:
        raise InvalidState(f"bad stamp in table value: {stamp!r}")
    return Stored(RunState.from_doc(doc.get("r")), stamp)
