"""Laws of canonical JSON and digest: parseable, total, deterministic, order-free."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors.canonical import _encode, canonical_json, canonical_json_bytes
from loopguard_fleet.detectors.hashing import call_signature, digest, normalize_tool
from loopguard_fleet.detectors.values import UNDEFINED
from tests.mappings import Record

laws = settings(max_examples=200, derandomize=True, database=None, deadline=None)

MAX_SAFE = 2**53
plain_text = st.text(max_size=20)  # hypothesis leaves out surrogates by default
any_text = st.text(
    alphabet=st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)), max_size=20
)


def json_values(text: st.SearchStrategy[str], scalars: st.SearchStrategy[Any]) -> Any:
    leaves = st.one_of(st.none(), st.booleans(), text, scalars)
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=5), st.dictionaries(text, children, max_size=5)
        ),
        max_leaves=30,
    )


finite_json = json_values(
    plain_text,
    st.one_of(st.integers(-MAX_SAFE, MAX_SAFE), st.floats(allow_nan=False, allow_infinity=False)),
)
anything = json_values(
    any_text,
    st.one_of(st.integers(), st.floats(), st.just(UNDEFINED), st.tuples(st.integers(), any_text)),
)


def utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


@laws
@given(finite_json)
def test_canonical_json_parses_back_to_an_equal_value(value: Any) -> None:
    # Numbers are doubles in JavaScript: a big whole double is written as an integer.
    assert json.loads(canonical_json(value), parse_int=float) == value


@laws
@given(st.dictionaries(any_text, st.integers(0, 9), max_size=8))
def test_object_keys_come_out_in_utf16_order(value: dict[str, int]) -> None:
    pairs = json.loads(canonical_json(value), object_pairs_hook=list)
    keys = [key for key, _ in pairs]
    assert keys == sorted(keys, key=utf16)


@laws
@given(anything)
def test_canonical_json_never_raises_and_is_valid_utf8(value: Any) -> None:
    canonical_json(value).encode("utf-8")


@laws
@given(anything)
def test_digest_is_stable_across_copies(value: Any) -> None:
    assert digest(value) == digest(copy.deepcopy(value)) == digest(value)


@laws
@given(st.dictionaries(plain_text, finite_json, max_size=6))
def test_digest_ignores_insertion_order(value: dict[str, Any]) -> None:
    assert digest(dict(reversed(list(value.items())))) == digest(value)


@laws
@given(anything)
def test_the_careful_encoder_agrees_with_the_fast_one(value: Any) -> None:
    assert canonical_json(Record(v=value)) == '{"v":' + canonical_json(value) + "}"


@laws
@given(st.integers(min_value=1, max_value=3_000), finite_json)
def test_any_nesting_depth_is_encoded(depth: int, leaf: Any) -> None:
    nested = leaf
    for _ in range(depth):
        nested = {"k": [nested]}
    assert canonical_json(nested) == '{"k":[' * depth + canonical_json(leaf) + "]}" * depth


@laws
@given(plain_text)
def test_strings_without_surrogates_escape_like_json_dumps(text: str) -> None:
    assert canonical_json(text) == json.dumps(text, ensure_ascii=False)


@laws
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_read_back_as_the_same_double(number: float) -> None:
    assert float(json.loads(canonical_json(number))) == number


@laws
@given(st.integers())
def test_integers_are_written_as_their_double(number: int) -> None:
    try:
        expected = float(number)
    except OverflowError:
        expected = float("inf") if number > 0 else float("-inf")
    assert float(json.loads(canonical_json(number))) == expected


# orjson writes the plain values (no float, no key sorting differently in UTF-16); the
# Python encoders write everything else. Both must give the same text for any value.
both_paths = json_values(
    st.one_of(any_text, st.sampled_from(["\ue000", "\U0001f600", "\x7f", "\u2028", "\x00"])),
    st.one_of(
        st.integers(-MAX_SAFE - 2, MAX_SAFE + 2),
        st.integers(),
        st.floats(),
        st.just(UNDEFINED),
        st.tuples(st.integers(-9, 9), plain_text),
    ),
)


@settings(max_examples=2_000, derandomize=True, database=None, deadline=None)
@given(both_paths)
def test_the_orjson_path_writes_what_the_python_encoders_write(value: Any) -> None:
    assert canonical_json(value) == _encode(value)
    assert canonical_json_bytes(value) == _encode(value).encode()


# Few keys and values that Python compares equal across types (1 == 1.0 == True), so that the
# same key meets them in one list: a memo keyed by them would answer with another's hash.
alike = st.sampled_from([1, 1.0, True, "1", 0, 0.0, False, "0", -0.0])
flat_args = st.dictionaries(
    st.one_of(st.sampled_from(["a", "b"]), any_text),
    st.one_of(alike, any_text, st.integers(-3, 3), st.floats(-2, 2)),
    max_size=4,
)


@laws
@given(st.lists(st.tuples(st.sampled_from(["read", " Bash", "exec"]), flat_args), max_size=12))
def test_call_signatures_from_the_memos_equal_the_computed_ones(calls: Any) -> None:
    """However calls repeat (the call memos hit), each hashes as computed from scratch."""
    for tool, args in calls + calls:
        name = normalize_tool(tool)
        assert call_signature(tool, args) == (name, name + ":" + digest(args))
