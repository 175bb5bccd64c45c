"""Outcome hashing of the openclaw-2026.9 profile: an outcome's facts, not only its hash.

OpenClaw 2026.9 (`hashToolOutcome` in `dist/tool-loop-detection-*.mjs`) returns, besides the
result hash, what kind of outcome it was (a loop veto, a terminal exec failure), a failure
identity that survives volatile text, and whether the outcome proves no progress. Every
outcome digest first gives each fresh external-content marker nonce the same id, so a
re-fetched page wrapped in new `<<<EXTERNAL_UNTRUSTED_CONTENT id="…">>>` markers is the same
outcome. Rules are in docs/semantics.md ("openclaw-2026.9: outcome facts").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Final, Literal

from loopguard_fleet.detectors.canonical import (
    _MAX_DEPTH,
    JSONLike,
    _sorted_keys,
    canonical_json,
    canonical_json_bytes,
    js_number_text,
)
from loopguard_fleet.detectors.hashing import (
    _JS_WHITESPACE,
    _details_text_key,
    _exec_outcome,
    _is_number,
    _poll_outcome,
    _strip_send_ids,
    _text_json,
    error_key,
    error_text,
    outcome_text,
    outcome_unknown_tool_name,
)
from loopguard_fleet.detectors.hashing import (
    _is_send as _is_configurable_send,
)
from loopguard_fleet.detectors.hashkeys import HashKey, hash_key, hash_text
from loopguard_fleet.detectors.values import (
    DEFAULT_CHANNEL_TOOLS,
    JSON,
    UNDEFINED,
    Outcome,
    _Undefined,
)

__all__ = [
    "TERMINAL_EXEC_FAILURE",
    "TOOL_LOOP_VETO",
    "FactCells",
    "OutcomeFacts",
    "OutcomeKind",
    "canonical_markers",
    "fact_cells",
    "failure_shape",
    "outcome_digest",
    "outcome_facts",
    "retool_2026_9",
]

OutcomeKind = Literal["tool-loop-veto", "terminal-exec-failure"]
TOOL_LOOP_VETO: Final[OutcomeKind] = "tool-loop-veto"
TERMINAL_EXEC_FAILURE: Final[OutcomeKind] = "terminal-exec-failure"

# 2026.9 hashes these as outbound sends besides sessions_send, `message` sends and the
# configured provider channel tools (isMessagingToolSendAction).
_CONVERSATION_SENDS: Final = frozenset(
    {"sessions_send", "conversations_send", "conversations_turn"}
)


# 2026.9's runner also folds `cron` into `automations` (normalizeToolPolicyName).
_ALIASES_2026_9: Final = {"cron": "automations"}


def retool_2026_9(tool: str) -> str:
    """A normalised tool name (docs/semantics.md §3) as OpenClaw 2026.9's runner normalises it."""
    return _ALIASES_2026_9.get(tool, tool)


@dataclass(frozen=True, slots=True)
class OutcomeFacts:
    """What the 2026.9 profile records of one outcome; all None/False means nothing to record."""

    result_hash: str | None = None
    outcome_kind: OutcomeKind | None = None
    failure_identity: str | None = None
    no_progress: bool = False
    unknown_tool_name: str | None = None

    @property
    def is_recordable(self) -> bool:
        """False when the outcome has neither a hash nor a kind (the call stays pending)."""
        return self.result_hash is not None or self.outcome_kind is not None


# ---- external-content markers -----------------------------------------------------------------

_MARKER_START: Final = "<<<EXTERNAL_UNTRUSTED_CONTENT"
_MARKER_END: Final = "<<<END_EXTERNAL_UNTRUSTED_CONTENT"
_OPEN: Final = _MARKER_START + " id="
_CLOSE: Final = _MARKER_END + " id="
_CANONICAL_ID: Final = "0000000000000000"
_ID_DIGITS: Final = frozenset("0123456789abcdef")
_ID_LEN: Final = 16

# OpenClaw replaces every well-formed span with a regular expression (`hashToolOutcome`):
#
#   (<<<EXTERNAL_UNTRUSTED_CONTENT id=(\\*)")([a-f0-9]{16})
#   (\2">>>(?:(?!<<<(?:END_)?EXTERNAL_UNTRUSTED_CONTENT)[\s\S])*
#   <<<END_EXTERNAL_UNTRUSTED_CONTENT id=\2")\3(\2">>>)
#
# a lookahead at every character of the body, which Python's `re` ran at ~30 ns a character
# (1.3 ms for a 50 KB page; docs/performance.md). The scanner below finds the same spans with
# `str.find`: the body cannot hold either marker start, so a span's end is the first marker
# start after its opening tag, or there is no span there. tests/property/
# test_outcome_facts_props.py holds it to the pattern, span for span.


def canonical_markers(text: str) -> str:
    """The text with every well-formed external-content span's nonce set to sixteen zeros."""
    start = text.find(_OPEN)
    if start < 0:
        return text
    parts: list[str] = []
    copied = 0  # text before this index is in `parts`
    while start >= 0:
        end, escapes = _span_end(text, start)
        if end < 0:  # no span opens here: the pattern tries the next opening tag
            start = text.find(_OPEN, start + 1)
            continue
        parts.append(text[copied:start])
        parts.append(_canonical_span(text, start, end, escapes))
        copied = end
        start = text.find(_OPEN, end)
    if not parts:
        return text
    parts.append(text[copied:])
    return "".join(parts)


def _span_end(text: str, start: int) -> tuple[int, int]:
    """Where the span whose opening tag is at `start` ends (-1 when none is there), and the
    backslashes before its quotes."""
    n = len(text)
    i = start + len(_OPEN)
    j = i
    while j < n and text[j] == "\\":
        j += 1
    escapes = j - i  # the quotes' backslashes: the span's JSON nesting depth, as written
    if j >= n or text[j] != '"':
        return -1, escapes
    ident = text[j + 1 : j + 1 + _ID_LEN]
    if len(ident) != _ID_LEN or not all(c in _ID_DIGITS for c in ident):
        return -1, escapes
    quote = text[i : j + 1]  # the backslashes and the quote, as every tag of the span has them
    after_id = j + 1 + _ID_LEN
    if not text.startswith(quote + ">>>", after_id):
        return -1, escapes
    body = after_id + escapes + 4
    # The body may not open another span: its end comes before the next opening tag. (Each
    # try reads the text up to the next opening tag at most, so the scan stays linear.)
    opened = text.find(_MARKER_START, body)
    close = text.find(_MARKER_END, body, n if opened < 0 else opened)
    if close < 0:
        return -1, escapes
    tail = _CLOSE + quote + ident + quote + ">>>"
    return (close + len(tail) if text.startswith(tail, close) else -1), escapes


def _canonical_span(text: str, start: int, end: int, escapes: int) -> str:
    """The span `text[start:end]`, its quotes after `escapes` backslashes, with both ids
    canonical, unless its quotes say it is not a real JSON nesting level: a depth of 0, 1, 3,
    7, … backslashes, and every quote in the span from its first id on escaped to that depth
    (OpenClaw's replacement callback)."""
    j = start + len(_OPEN) + escapes  # the quote before the first id
    if escapes & (escapes + 1):
        return text[start:end]
    first = j + 1 + _ID_LEN  # the part OpenClaw checks: from after the first id ...
    last = end - _ID_LEN - escapes - 4  # ... to the second id
    q = text.find('"', first, last) if escapes else -1  # at depth 0 every quote is at it
    while q >= 0:
        k = q
        while k > first and text[k - 1] == "\\":
            k -= 1
        if (q - k + 1) % (escapes + 1):
            return text[start:end]
        q = text.find('"', q + 1, last)
    return (
        text[start : j + 1]
        + _CANONICAL_ID
        + text[first:last]
        + _CANONICAL_ID
        + text[last + _ID_LEN : end]
    )


# JSON's leaves but null, as a tuple built once (`isinstance(x, a | b)` builds its union a call).
_LEAVES: Final = (str, int, float)


def _keys_reorder(value: object, depth: int = 0) -> bool:
    """True when canonicalising markers in object keys anywhere in `value` would reorder an
    object's keys (or it nests too deep to tell: the careful walk below takes it)."""
    if depth > _MAX_DEPTH:
        return True
    if type(value) is dict:
        obj: dict[object, object] = value
        marked = 0
        for key, item in obj.items():
            if not isinstance(key, str):
                return True
            if _MARKER_START in key:
                marked += 1
            if _keys_reorder(item, depth + 1):
                return True
        if marked < 2:
            # A lone marked key keeps its place: canonicalising changes only a span's id, which
            # comes after the key's first marker start, and an unmarked key cannot share a
            # prefix that long (it would hold the marker start), so every comparison is decided
            # before the id.
            return False
        keys: dict[str, object] = obj  # type: ignore[assignment]
        # Canonical JSON's order against the walk's (by the canonical key first).
        return _sorted_keys(keys) != sorted(keys, key=_marker_order)
    if type(value) is list or type(value) is tuple:
        items: list[object] | tuple[object, ...] = value
        return any(_keys_reorder(item, depth + 1) for item in items)
    if isinstance(value, _LEAVES) or value is None:
        return False  # a leaf, tested first: a Mapping test is an interpreted ABC check
    return isinstance(value, Mapping)  # another mapping's keys: the careful walk


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def _marker_order(key: str) -> tuple[bytes, bytes]:
    """An object key's place in `_marker_json`: by its canonical form, ties by itself."""
    return _utf16(canonical_markers(key)), _utf16(key)


def _marker_json(root: JSONLike) -> str:
    """Canonical JSON with markers canonicalised in every string and key (iterative)."""
    out: list[str] = []
    active: set[int] = set()
    stack: list[tuple[int, object]] = [(0, root)]  # (0, value) | (1, text) | (2, container id)
    while stack:
        op, item = stack.pop()
        if op == 1:
            out.append(item)  # type: ignore[arg-type]  # op 1 carries text
            continue
        if op == 2:
            active.discard(item)  # op 2 carries an id
            continue
        if isinstance(item, str):
            out.append(canonical_json(canonical_markers(item)))
            continue
        is_object = isinstance(item, Mapping)
        if not is_object and not isinstance(item, list | tuple):
            out.append(canonical_json(item))  # type: ignore[arg-type]  # a scalar
            continue
        if id(item) in active:
            out.append('"[Circular]"')
            continue
        active.add(id(item))
        stack.append((2, id(item)))
        if isinstance(item, Mapping):
            # Ordered by the canonical key, ties by the raw key (both as UTF-16 units).
            keys = sorted(item, key=_marker_order)
            stack.append((1, "}"))
            for index in range(len(keys) - 1, -1, -1):
                raw = keys[index]
                stack.append((0, item[raw]))
                shown = canonical_json(canonical_markers(raw))
                stack.append((1, ("," if index else "") + shown + ":"))
            out.append("{")
        else:
            seq: list[object] | tuple[object, ...] = item  # type: ignore[assignment]
            stack.append((1, "]"))
            for index in range(len(seq) - 1, -1, -1):
                stack.append((0, seq[index]))
                if index:
                    stack.append((1, ","))
            out.append("[")
    return "".join(out)


def outcome_digest(value: JSONLike) -> str:
    """SHA-256 hex of the value's canonical JSON after marker canonicalisation."""
    return _digest_key(value).hex()


_MARKER_BYTES: Final = _MARKER_START.encode()


def _digest_key(value: JSONLike) -> bytes:
    """`outcome_digest`'s 32 raw bytes (its hash key, detectors/hashkeys.py)."""
    plain = canonical_json_bytes(value)
    # Without a marker start anywhere the canonicalised text and key order are the plain ones.
    # `find`, not `in`: `bytes in bytes` first tries the needle as an integer and formats the
    # TypeError it then drops (~0.1 µs a test).
    if plain.find(_MARKER_BYTES) < 0:
        return sha256(plain).digest()
    return _marked_digest_key(value, plain)


def _marked_digest_key(value: JSONLike, plain: bytes) -> bytes:
    """`_digest_key` of a value whose canonical JSON `plain` holds a marker start."""
    if not _keys_reorder(value):
        # A span inside a string (a value or a key), JSON-escaped, is the same span one nesting
        # level deeper (a depth e becomes 2e + 1, its quote runs of k + 1 become 2k + 2), so
        # canonicalising the JSON text equals canonicalising each string; a span across
        # strings holds a string's bare quote and is left as written, as it is when each
        # string is taken alone. What the text cannot show is an object whose keys the
        # canonical forms order differently: that one takes the walk.
        # Canonical JSON escapes lone surrogates: its bytes decode as UTF-8.
        return sha256(canonical_markers(plain.decode()).encode()).digest()
    return sha256(_marker_json(value).encode("utf-8", "surrogatepass")).digest()


# Error keys by their text, markers canonicalised (hashing.error_key).
_ERROR_KEYS: dict[str, bytes] = {}


# ---- terminal exec failures -----------------------------------------------------------------


def _ci(word: str) -> str:
    """A case-insensitive literal as JavaScript's /iu matches it (ſ is an s, K a k)."""
    extra = {"s": "\u017f", "k": "\u212a"}
    return "".join(f"[{c}{c.upper()}{extra.get(c, '')}]" if c.isalpha() else c for c in word)


# JavaScript's \b under /iu treats ſ and K as word characters; \d is ASCII; \s is JS whitespace.
_W: Final = "[A-Za-z0-9_\u017f\u212a]"
_S: Final = "[" + re.escape(_JS_WHITESPACE) + "]"
_D: Final = "[0-9]"
_UNITS: Final = "|".join(
    _ci(u) for u in ("ns", "us", "ms", "seconds", "second", "minutes", "minute", "hours", "hour")
)
_SEP: Final = f"(?:{_S}|[#:=])*+"  # JavaScript's [\s#:=]*


def _after_boundary(first: str) -> str:
    """A word's first character `first` (a class) at a JavaScript \b, the \b after it."""
    # `\b` then a word character is "no word character before it". Checked behind the first
    # character, not before it: a pattern that opens with a lookbehind makes `re` try every
    # position, one that opens with a class skips to where that class matches.
    return f"{first}(?<!{_W}{first})"


# OpenClaw's VOLATILE_EXEC_FAILURE_PATTERNS (dist/tool-loop-detection-*.mjs), in order. Every
# `*`, `+` and `?` that nothing after it could take back is possessive (its next token cannot
# match what it gave back), so a failed match does not retry each shorter run of digits;
# tests/property/test_outcome_facts_props.py holds them to the literal translations.
_VOLATILE: Final = (
    re.compile(
        rf"{_D}{{4}}-{_D}{{2}}-{_D}{{2}}[tT ]{_D}{{2}}:{_D}{{2}}:{_D}{{2}}(?:\.{_D}{{1,6}})?"
        rf"(?:[zZ]|[+-]{_D}{{2}}:{_D}{{2}})?"
    ),
    re.compile(rf"{_D}{{1,2}}:{_D}{{2}}:{_D}{{2}}(?:\.{_D}{{1,6}})?"),
    re.compile(
        rf"(?:{_after_boundary('[aA]')}{_ci('ttempt')}|{_after_boundary('[rR]')}{_ci('etry')})"
        rf"(?!{_W}){_SEP}{_D}+"
    ),
    re.compile(rf"{_after_boundary(_D)}{_D}*+(?:\.{_D}++)?+{_S}?+(?:{_UNITS}|{_ci('s')})(?!{_W})"),
    re.compile(rf"{_after_boundary('[pP]')}(?:{_ci('id')}|{_ci('pid')})(?!{_W}){_SEP}{_D}+"),
)

_ASCII_DIGIT: Final = re.compile(_D)
_INFINITY: Final = math.inf  # a constant: `float("inf")` parsed its text at every call


def failure_shape(output: str) -> str:
    """The output with date-times, clock times, attempt counters, durations and pids as `#`."""
    # Each pattern runs only where what it needs is in the text (a digit for all, two colons
    # for the times and a dash for a date, the words for the counters and pids; a word's ASCII
    # letters lower-case to themselves): a `#` put in joins no letters and adds no colon or
    # dash, so skipping a pattern changes nothing.
    if _ASCII_DIGIT.search(output) is None:
        return output
    if output.count(":") > 1:
        if "-" in output:
            output = _VOLATILE[0].sub("#", output)
        output = _VOLATILE[1].sub("#", output)
    lower = output.lower()
    if "attempt" in lower or "retry" in lower:
        output = _VOLATILE[2].sub("#", output)
    output = _VOLATILE[3].sub("#", output)
    if "pid" in lower:
        output = _VOLATILE[4].sub("#", output)
    return output


def _terminal_identity(details: Mapping[str, JSON], exec_outcome: dict[str, JSON]) -> str | None:
    """The failure identity of a completed/failed exec that exited non-zero with real output."""
    status = exec_outcome["status"]
    exit_code = details.get("exitCode")
    if status not in ("completed", "failed") or not _is_number(exit_code):
        return None
    assert isinstance(exit_code, int | float)
    # NaN, ±Infinity and 0 are no failure; `abs`, not `math.isinf`: an int past the float range
    # compares, where isinf would raise.
    if exit_code != exit_code or abs(exit_code) == _INFINITY or exit_code == 0:
        return None
    output = exec_outcome["output"]
    if details.get("timedOut") is True or not isinstance(output, str) or output == "":
        return None
    if output == f"(Command exited with code {js_number_text(exit_code)})":
        return None
    return outcome_digest(
        {
            "status": status,
            "exitCode": exit_code,
            "timedOut": False,
            "output": failure_shape(output),
        }
    )


def _is_send(tool: str, args: JSON | _Undefined, channel_tools: frozenset[str]) -> bool:
    return tool in _CONVERSATION_SENDS or _is_configurable_send(tool, args, channel_tools)


# What `outcome_facts` says, with the result hash as its hash key (detectors/hashkeys.py):
# (result key, outcome kind, failure identity, no progress, unknown tool name). The history
# stores the key, so the recording path never writes the hash's text.
FactCells = tuple[HashKey | None, OutcomeKind | None, str | None, bool, str | None]
_PENDING: Final[FactCells] = (None, None, None, False, None)
_VETO_CELLS: Final[FactCells] = (None, TOOL_LOOP_VETO, None, False, None)
_UNCHANGED: Final = _digest_key({"status": "unchanged"})


def outcome_facts(
    tool: str,
    args: JSON | _Undefined,
    outcome: Outcome,
    channel_tools: frozenset[str] | None = None,
) -> OutcomeFacts:
    """The 2026.9 facts of an outcome of `tool` (normalised) called with `args`; the channel
    tools are DEFAULT_CHANNEL_TOOLS unless given."""
    tools = DEFAULT_CHANNEL_TOOLS if channel_tools is None else channel_tools
    key, kind, identity, no_progress, unknown = fact_cells(tool, args, outcome, tools)
    rhash = None if key is None else hash_text(key)
    return OutcomeFacts(rhash, kind, identity, no_progress, unknown)


def fact_cells(
    tool: str,
    args: JSON | _Undefined,
    outcome: Outcome,
    channel_tools: frozenset[str],
) -> FactCells:
    """`outcome_facts` as `FactCells`, the result hash as its key."""
    kind = outcome.kind
    if kind == "error":
        return (
            error_key(_ERROR_KEYS, error_text(outcome.value), _digest_key),
            None,
            None,
            True,
            outcome_unknown_tool_name(outcome),
        )
    if kind == "hashed":  # privacy mode: the edge sends the hash; an error's says so
        rhash = outcome.hash
        is_error = rhash is not None and rhash.startswith("error:")
        key = None if rhash is None else hash_key(rhash)
        return key, None, None, is_error, outcome.unknown_tool_name
    result = outcome.value
    if kind == "pending" or result is UNDEFINED:
        return _PENDING
    if not isinstance(result, dict):
        return _digest_key(result), None, None, False, None
    raw_details = result.get("details")
    details: dict[str, JSON] = raw_details if isinstance(raw_details, dict) else {}
    status = details.get("status")
    if status == "blocked" and details.get("deniedReason") == "tool-loop":
        return _VETO_CELLS
    text = outcome_text(result)
    if tool == "exec" and isinstance(status, str) and status:
        exec_outcome = _exec_outcome(status, details, text)
        if exec_outcome is not None:
            rkey = _digest_key(exec_outcome)
            identity = _terminal_identity(details, exec_outcome)
            if identity is None:
                return rkey, None, None, False, None
            return rkey, TERMINAL_EXEC_FAILURE, identity, False, None
    if tool == "write" and details.get("changed") is False:
        return _UNCHANGED, None, None, True, None
    if tool == "process" and isinstance(args, dict):
        action = args.get("action")
        if action in ("poll", "log"):
            assert isinstance(action, str)
            return _digest_key(_poll_outcome(action, details, text)), None, None, False, None
    if _is_send(tool, args, channel_tools):
        return _digest_key(_strip_send_ids(details)), None, None, False, None
    # The configurable profile's rule 8, unless a marker needs canonicalising.
    details_json = canonical_json_bytes(details)
    text_json = _text_json(text)
    # The marker start holds no character JSON escapes: it is in the text's JSON exactly when
    # it is in the text.
    if _MARKER_START in text or details_json.find(_MARKER_BYTES) >= 0:
        # The value's canonical JSON from its parts, as _details_text_key hashes it.
        plain = b'{"details":' + details_json + b',"text":' + text_json + b"}"
        value: dict[str, JSON] = {"details": details, "text": text}
        return _marked_digest_key(value, plain), None, None, False, None
    return _details_text_key(details_json, text_json), None, None, False, None
