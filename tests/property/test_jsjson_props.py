"""Laws of the JavaScript-compatible JSON reader (detectors/jsjson.py): where the standard
library reads a text, the fallback parser reads the same value, and `loads` agrees with both."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loopguard_fleet.detectors import canonical_json
from loopguard_fleet.detectors.jsjson import _parse, dumps, loads

# Strings with every kind of code point, lone surrogates included (what JavaScript can hold).
strings = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    strings,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(strings, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(values, st.booleans(), st.sampled_from([None, 0, 2]))
def test_the_fallback_parser_reads_what_the_standard_library_reads(
    value: Any, ascii_only: bool, indent: int | None
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    expected = json.loads(text)
    assert canonical_json(_parse(text)) == canonical_json(expected)
    if ascii_only:  # bytes exist only where no raw surrogate is in the text
        assert canonical_json(loads(text.encode("ascii"))) == canonical_json(expected)


@given(values)
def test_what_dumps_writes_loads_reads_back(value: Any) -> None:
    assert canonical_json(loads(dumps(value))) == canonical_json(value)
