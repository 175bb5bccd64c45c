"""Hash keys stand for their texts one to one, and the engine's keys are those of the texts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopguard_fleet.detectors import Outcome
from loopguard_fleet.detectors.hashing import result_hash, result_key
from loopguard_fleet.detectors.hashkeys import hash_key, hash_text

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read:" + HEX, b"read:" + bytes.fromhex(HEX)),
        (HEX, bytes.fromhex(HEX)),
        ("error:" + HEX, b"error:" + bytes.fromhex(HEX)),
        ("é\ud800:" + HEX, "é\ud800:".encode("utf-8", "surrogatepass") + bytes.fromhex(HEX)),
        ("read:" + HEX.upper(), "read:" + HEX.upper()),
        ("read:" + HEX + "\n", "read:" + HEX + "\n"),
        (HEX[:63], HEX[:63]),
        ("", ""),
        ("privacy-hash", "privacy-hash"),
    ],
    ids=[
        "call-signature",
        "bare-digest",
        "error-hash",
        "non-ascii-prefix",
        "upper-case-hex-stays-text",
        "trailing-newline-stays-text",
        "63-hex-digits-stay-text",
        "empty",
        "edge-hash",
    ],
)
def test_a_key_is_the_raw_digest_after_its_prefix_or_else_the_text(
    text: str, expected: str | bytes
) -> None:
    assert hash_key(text) == expected
    assert hash_text(hash_key(text)) == text
    key = hash_key(text)
    if isinstance(key, str):
        assert hash_key(key) == key  # a text key is its own key: hash_key is idempotent


texts = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda p, h: p + h,
        st.text(max_size=8),
        st.text("0123456789abcdef", min_size=64, max_size=64),
    ),
)


@given(texts, texts)
def test_keys_are_equal_exactly_when_their_texts_are(a: str, b: str) -> None:
    assert hash_text(hash_key(a)) == a
    assert (hash_key(a) == hash_key(b)) == (a == b)


@pytest.mark.parametrize(
    ("tool", "args", "outcome"),
    [
        ("read", {"path": "/a"}, Outcome.result({"content": [{"type": "text", "text": "x"}]})),
        ("read", {"path": "/a"}, Outcome.error("ENOENT")),
        ("exec", {"command": "ls"}, Outcome.result({"details": {"status": "completed"}})),
        ("process", {"action": "poll"}, Outcome.result({"details": {"status": "running"}})),
        ("message", {"action": "send"}, Outcome.result({"details": {"messageId": "m1"}})),
        ("read", {}, Outcome.result("plain")),
        ("read", {}, Outcome.hashed("read:" + HEX)),
        ("read", {}, Outcome.hashed("opaque")),
        ("read", {}, Outcome.pending()),
    ],
    ids=["rule-8", "error", "exec", "poll", "send", "non-object", "hashed", "opaque", "pending"],
)
def test_the_result_key_is_the_key_of_the_result_hash(
    tool: str, args: dict[str, str], outcome: Outcome
) -> None:
    text = result_hash(tool, args, outcome)
    assert result_key(tool, args, outcome) == (None if text is None else hash_key(text))


def test_a_text_made_from_a_key_gives_that_key_back_from_the_memo_and_after_it_empties() -> None:
    from loopguard_fleet.detectors import hashkeys

    keys = [b"read:" + i.to_bytes(32, "big") for i in range(hashkeys._TEXT_ENTRIES + 10)]
    for key in keys:
        text = hash_text(key)
        assert hash_key(text) == key
        assert hash_key(text + "\n") == text + "\n"  # not a key's text: computed, not memoised
        assert len(hashkeys._KEYS) <= hashkeys._TEXT_ENTRIES
    assert all(hash_key(hash_text(k)) == k for k in keys)
