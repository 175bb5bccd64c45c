"""The memo of warning-bucket ids gives what computing them gives, and stays bounded."""

from __future__ import annotations

import hashlib

import pytest

from loopguard_fleet.detectors import engine
from loopguard_fleet.detectors.engine import bucket_key


def _computed(warning_key: str) -> str:
    raw = warning_key.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(raw, digest_size=9).hexdigest()


@pytest.mark.parametrize(
    "warning_key",
    ["generic:read:read:abc", "", "pingpong:a|b", "cut \ud83d", "emoji \U0001f600"],
)
def test_a_bucket_id_is_the_same_from_the_memo_as_computed(warning_key: str) -> None:
    assert bucket_key(warning_key) == _computed(warning_key)
    assert bucket_key(warning_key) == _computed(warning_key)  # now from the memo


def test_the_bucket_memo_stays_bounded_and_right_after_it_empties() -> None:
    keys = [f"generic:read:k{i}" for i in range(engine._BUCKET_KEY_ENTRIES + 10)]
    for k in keys:
        assert bucket_key(k) == _computed(k)
        assert len(engine._BUCKET_KEYS) <= engine._BUCKET_KEY_ENTRIES
    assert all(bucket_key(k) == _computed(k) for k in keys)
