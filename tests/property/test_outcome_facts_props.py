"""Laws of the 2026.9 outcome facts' shortcuts (detectors/outcome_facts.py): the digest
canonicalises markers in canonical JSON's text exactly as string by string, the span pattern
matches as OpenClaw's own, and a failure's shape skips only patterns that cannot match."""

from __future__ import annotations

import re
from hashlib import sha256
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopguard_fleet.detectors.canonical import canonical_json_bytes
from loopguard_fleet.detectors.outcome_facts import (
    _D,
    _S,
    _UNITS,
    _VOLATILE,
    _W,
    _ci,
    _digest_key,
    _marker_json,
    canonical_markers,
    failure_shape,
)

laws = settings(max_examples=400, derandomize=True, database=None, deadline=None)

IDS = st.sampled_from(["0123456789abcdef", "fedcba9876543210", "0123456789ABCDEF"])
# Quotes around the ids at nesting depths 0, 1, 3 and the depths that are none (2, 4).
QUOTES = st.sampled_from(['"', '\\"', '\\\\"', '\\\\\\"', '\\\\\\\\"'])


@st.composite
def marker(draw: st.DrawFn) -> str:
    """A span's start or end marker, with an id and quotes drawn apart from its partner's."""
    word = draw(st.sampled_from(["EXTERNAL_UNTRUSTED_CONTENT", "END_EXTERNAL_UNTRUSTED_CONTENT"]))
    q = draw(QUOTES)
    return f"<<<{word} id={q}{draw(IDS)}{q}>>>"


@st.composite
def span(draw: st.DrawFn) -> str:
    """A span as a fetched page carries it: same id and quotes at both ends, a body between."""
    first, q = draw(IDS), draw(QUOTES)
    second = draw(st.one_of(st.just(first), IDS))
    body = draw(pieces)
    return (
        f"<<<EXTERNAL_UNTRUSTED_CONTENT id={q}{first}{q}>>>{body}"
        f"<<<END_EXTERNAL_UNTRUSTED_CONTENT id={q}{second}{q}>>>"
    )


pieces = st.lists(
    st.sampled_from(['"', "\\", '\\"', '\\\\"', "\n", "x", " ", "\ud83d", "é"]), max_size=6
).map("".join)
texts = st.lists(st.one_of(pieces, marker(), span()), max_size=4).map("".join)
# An astral key sorts by its UTF-16 units. (Its pair of surrogates as a second key would be
# the same key in JavaScript, and JSON decodes a pair's escapes as the astral character.)
plain_keys = st.sampled_from(["content", "text", "details", "a", "é", "\U0001f600", "\uffff"])


def values(keys: st.SearchStrategy[str]) -> Any:
    return st.recursive(
        st.one_of(texts, st.integers(-5, 5), st.none()),
        lambda children: st.one_of(
            st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=3)
        ),
        max_leaves=8,
    )


def walked(value: Any) -> bytes:
    """The digest string by string: the reference walk over every string and key."""
    return sha256(_marker_json(value).encode("utf-8", "surrogatepass")).digest()


@laws
@given(values(plain_keys))
def test_markers_in_strings_digest_as_the_string_by_string_walk(value: Any) -> None:
    assert _digest_key(value) == walked(value)


@laws
@given(values(st.one_of(plain_keys, span(), texts)))
def test_markers_in_keys_too_digest_as_the_walk(value: Any) -> None:
    assert _digest_key(value) == walked(value)


@st.composite
def span_prefix(draw: st.DrawFn) -> str:
    """The start of a span cut anywhere, maybe followed by a character a span's id is not."""
    whole = draw(span())
    return whole[: draw(st.integers(0, len(whole)))] + draw(st.sampled_from(["", "z", "0", "~"]))


@laws
@given(st.dictionaries(st.one_of(span(), span_prefix(), plain_keys), st.integers(0, 3), max_size=5))
def test_keys_sharing_a_spans_start_digest_as_the_walk(value: dict[str, int]) -> None:
    """Keys cut from a span's start sort beside it as the walk sorts them (one marked key or
    several)."""
    assert _digest_key(value) == walked(value)


def test_a_span_across_two_strings_is_left_as_written() -> None:
    start = '<<<EXTERNAL_UNTRUSTED_CONTENT id="0123456789abcdef">>>'
    end = '<<<END_EXTERNAL_UNTRUSTED_CONTENT id="0123456789abcdef">>>'
    across = [start + "a", "b" + end]
    assert _digest_key(across) == walked(across) == sha256(canonical_json_bytes(across)).digest()
    # The same span in one string is canonicalised.
    inside = [start + "a" + end]
    assert _digest_key(inside) == walked(inside) != sha256(canonical_json_bytes(inside)).digest()


# The span pattern and its replacement as `hashToolOutcome` writes them
# (dist/tool-loop-detection-*.mjs of openclaw@2026.9.6): a lookahead at every character of the
# body, and a callback that leaves a span whose quotes are not one real JSON nesting level.
OPENCLAW_SPAN = re.compile(
    r'(<<<EXTERNAL_UNTRUSTED_CONTENT id=(\\*)")([a-f0-9]{16})'
    r'(\2">>>(?:(?!<<<(?:END_)?EXTERNAL_UNTRUSTED_CONTENT)[\s\S])*'
    r'<<<END_EXTERNAL_UNTRUSTED_CONTENT id=\2")\3(\2">>>)'
)
OPENCLAW_QUOTE = re.compile(r'(?<!\\)\\*"')


def openclaws_replacement(match: re.Match[str]) -> str:
    start, escapes, _id, middle, end = match.groups()
    depth = len(escapes)
    if depth & (depth + 1) or any(
        len(q.group(0)) % (depth + 1) for q in OPENCLAW_QUOTE.finditer(middle)
    ):
        return match.group(0)
    return start + "0000000000000000" + middle + "0000000000000000" + end


# Pieces of the markers, so that a body holds `<` runs that almost open or close a span.
near_markers = st.sampled_from(
    ["<", "<<", "<<<", "<<<END_", "<<<EXTERNAL_UNTRUSTED_CONTEN", "<<<EXTERNAL_UNTRUSTED_CONTENT",
     "<<<END_EXTERNAL_UNTRUSTED_CONTENT", "<<EXTERNAL_UNTRUSTED_CONTENT", ">>>", "x",
     "<<<EXTERNAL_UNTRUSTED_CONTENT id=", "<<<END_EXTERNAL_UNTRUSTED_CONTENT id=",
     "0123456789abcde"]
)  # fmt: skip


@laws
@given(st.lists(st.one_of(pieces, near_markers, marker(), span()), max_size=8).map("".join))
def test_markers_are_canonicalised_as_openclaws_pattern_does(text: str) -> None:
    assert canonical_markers(text) == OPENCLAW_SPAN.sub(openclaws_replacement, text)


def test_a_span_is_canonicalised_at_every_depth_its_quotes_allow() -> None:
    def span(q: str, body: str) -> str:
        return (
            f"<<<EXTERNAL_UNTRUSTED_CONTENT id={q}0123456789abcdef{q}>>>{body}"
            f"<<<END_EXTERNAL_UNTRUSTED_CONTENT id={q}0123456789abcdef{q}>>>"
        )

    zeros = "0000000000000000"
    assert canonical_markers(span('"', 'a "b"')) == span('"', 'a "b"').replace(
        "0123456789abcdef", zeros
    )
    # One level deeper, a bare quote in the body is not at the span's depth: left as written.
    assert canonical_markers(span('\\"', 'a \\"b\\"')).count(zeros) == 2
    assert canonical_markers(span('\\"', 'a "b"')) == span('\\"', 'a "b"')
    assert canonical_markers(span('\\\\"', "x")) == span('\\\\"', "x")  # depth 2: none
    # A body that opens another span ends this one's chance; the inner span is canonicalised.
    inner = span('"', "y")
    text = '<<<EXTERNAL_UNTRUSTED_CONTENT id="fedcba9876543210">>>x' + inner
    assert canonical_markers(text) == text.replace("0123456789abcdef", zeros)
    # An opening tag with no span after it: the next one right behind it is still tried.
    text = "<<<EXTERNAL_UNTRUSTED_CONTENT id=" + inner
    assert canonical_markers(text) == text.replace("0123456789abcdef", zeros)


# OpenClaw's VOLATILE_EXEC_FAILURE_PATTERNS (dist/tool-loop-detection-*.mjs of
# openclaw@2026.9.6) translated token by token: `\b` as a lookbehind before the word and a
# lookahead after it, every quantifier as written.
_JS_SEP = f"(?:{_S}|[#:=])*"
OPENCLAW_VOLATILE = (
    re.compile(
        rf"{_D}{{4}}-{_D}{{2}}-{_D}{{2}}[tT ]{_D}{{2}}:{_D}{{2}}:{_D}{{2}}(?:\.{_D}{{1,6}})?"
        rf"(?:[zZ]|[+-]{_D}{{2}}:{_D}{{2}})?"
    ),
    re.compile(rf"{_D}{{1,2}}:{_D}{{2}}:{_D}{{2}}(?:\.{_D}{{1,6}})?"),
    re.compile(rf"(?<!{_W})(?:{_ci('attempt')}|{_ci('retry')})(?!{_W}){_JS_SEP}{_D}+"),
    re.compile(rf"(?<!{_W}){_D}+(?:\.{_D}+)?{_S}?(?:{_UNITS}|{_ci('s')})(?!{_W})"),
    re.compile(rf"(?<!{_W})(?:{_ci('pid')}|{_ci('ppid')})(?!{_W}){_JS_SEP}{_D}+"),
)

# Volatile text whole and in parts, so that patterns meet, overlap and fall apart.
output_pieces = st.sampled_from(
    ["pid 42", "PPID:7", "p\u0131d 5", "attempt #3", "ReTry=12", "\u212aattempt 3", "35ms",
     "1.5 s", "2 minutes", "3\u017f", "10:00:01", "2026-12-01T10:00:01.5Z", "pid", "attempt",
     ":", "=", "#", "-", "7", " ", "x", "_", ".", "1.", "12.5", "seconds", "hour", "n", "\t"]
)  # fmt: skip
outputs = st.lists(output_pieces, max_size=10).map("".join)


@laws
@given(outputs)
def test_a_failure_shape_is_every_volatile_pattern_of_openclaws_applied_in_turn(
    output: str,
) -> None:
    shaped = output
    for pattern in OPENCLAW_VOLATILE:
        shaped = pattern.sub("#", shaped)
    assert failure_shape(output) == shaped


@laws
@given(outputs)
def test_each_volatile_pattern_matches_as_openclaws(output: str) -> None:
    for fast, literal in zip(_VOLATILE, OPENCLAW_VOLATILE, strict=True):
        assert [m.span() for m in fast.finditer(output)] == [
            m.span() for m in literal.finditer(output)
        ]


def test_keys_whose_canonical_forms_reorder_the_object_take_the_walk() -> None:
    def key(body: str, nonce: str) -> str:
        return (
            f'<<<EXTERNAL_UNTRUSTED_CONTENT id="{nonce}">>>{body}'
            f'<<<END_EXTERNAL_UNTRUSTED_CONTENT id="{nonce}">>>'
        )

    # By their nonces "y" comes first, by their canonical forms "x".
    value = {key("x", "fedcba9876543210"): 1, key("y", "0123456789abcdef"): 2}
    assert _digest_key(value) == walked(value)
