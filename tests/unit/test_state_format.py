"""`RunState`'s compact JSON form round-trips every string exactly, digests packed or not."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from loopguard_fleet.detectors import Record, RunState

DIGEST = hashlib.sha256(b"x").hexdigest()

# Strings that look like what the engine interns: free text, '<prefix><64 hex>', near misses.
texts = st.one_of(
    st.text(max_size=12),
    st.builds(lambda p, s: p + DIGEST + s, st.text(max_size=6), st.sampled_from(["", "\n", "A"])),
    st.builds(lambda p: p + DIGEST.upper(), st.text(max_size=4)),
)


@given(tool=texts, args_hash=texts, result_hash=st.none() | texts, prefix=texts)
@example(tool="read", args_hash="read:" + DIGEST, result_hash=DIGEST + "\n", prefix=DIGEST + "\n")
def test_every_interned_string_round_trips(
    tool: str, args_hash: str, result_hash: str | None, prefix: str
) -> None:
    record = Record(tool, args_hash, None, result_hash, None, 7, prefix + "7")
    state = RunState(history=[record], tool_seq=7)
    restored = RunState.from_json(state.to_json())
    assert restored == state
    assert restored.history[0].event_id == prefix + "7"


@pytest.mark.parametrize(
    ("text", "packed"),
    [
        ("read:" + DIGEST, True),  # a digest behind a prefix: 43 base64 characters
        (DIGEST, True),
        (DIGEST + "\n", False),  # not a digest at the very end: kept as written
        ("read:" + DIGEST.upper(), False),  # only lowercase hex is a digest
        ("read:" + DIGEST[:63], False),
    ],
)
def test_only_a_trailing_lowercase_digest_is_packed(text: str, packed: bool) -> None:
    table = json.loads(RunState(history=[Record(text, "a", None, None, None, 1)]).to_json())["t"]
    entry = table[0]
    assert entry[0] == ("h" if packed else "s")
    assert len(entry) == (len(text) - 64 + 44 if packed else len(text) + 1)
