"""Tool-name normalisation, args_hash, result_hash and unknown-tool extraction.

Rules: docs/semantics.md §1, §3.

Every function is pure and matches OpenClaw byte for byte, so hashes interoperate.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from hashlib import sha256
from typing import TYPE_CHECKING, Final, cast

import orjson
from orjson import dumps as _orjson_dumps  # compiled: a global, no module getattr a call

from loopguard_fleet.detectors.canonical import (
    JSON,
    UNDEFINED,
    JSONLike,
    _Undefined,
    canonical_json,
    canonical_json_bytes,
    js_number_text,
)
from loopguard_fleet.detectors.hashkeys import HashKey, hash_key, hash_text
from loopguard_fleet.detectors.sharing import remember, share

if TYPE_CHECKING:  # values imports this module (a call's signature)
    from loopguard_fleet.detectors.values import Outcome

__all__ = [
    "DEFAULT_CHANNEL_TOOLS",
    "args_hash",
    "call_signature",
    "canonical_json",
    "digest",
    "error_key",
    "error_text",
    "js_trim",
    "normalize_tool",
    "outcome_text",
    "outcome_unknown_tool_name",
    "result_hash",
    "result_key",
    "unknown_tool_name",
]

#: Provider channel tools whose results hash as outbound sends (docs/semantics.md §3, rule 7),
#: as OpenClaw does when that channel's plugin is loaded; `LOOPGUARD_CHANNEL_TOOLS` overrides.
DEFAULT_CHANNEL_TOOLS: Final = frozenset({"telegram"})

# String.prototype.trim's set; str.strip() would also take U+001C-U+001F and U+0085, not U+FEFF.
_JS_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_TOOL_ALIASES: Final = {"bash": "exec", "apply-patch": "apply_patch"}

_SEND_ACTIONS: Final = frozenset(
    {"send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment"}
    | {"upload-file", "sticker", "poll"}
)
_VOLATILE_SEND_KEYS: Final = frozenset(
    {"messageId", "message_id", "messageIds", "platformMessageId", "platformMessageIds"}
    | {"fileId", "file_id", "fileKey", "pollId", "poll_id", "receipt", "runId", "idempotencyKey"}
    | {"ts", "timestamp", "sentAt", "deliveredAt", "createdAt"}
)

# JavaScript's \s and /i (without the u flag) are ASCII-only for letters: re.ASCII plus an
# explicit whitespace class reproduce them (Python's \s and re.I alone would also match
# U+001C-U+001F, U+0085, the Kelvin sign and long s).
_S: Final = "[" + re.escape(_JS_WHITESPACE) + "]"
_UNKNOWN_TOOL_PATTERNS: Final = (
    re.compile(rf"unknown tool(?::|{_S})+[\"']?([a-z0-9_.-]+)", re.IGNORECASE | re.ASCII),
    re.compile(
        rf"tool{_S}+[\"']?([a-z0-9_.-]+)[\"']?{_S}+(?:not found|is not available)",
        re.IGNORECASE | re.ASCII,
    ),
)


def js_trim(s: str) -> str:
    """Remove JavaScript's whitespace (String.prototype.trim's set) from both ends."""
    return s.strip(_JS_WHITESPACE)


# Called through a name, not as `s.lower()`: mypyc compiles the method call to a primitive that
# lower-cases code point by code point and misses the final sigma ('ΑΣ' gives 'ασ', where
# CPython and JavaScript give 'ας'); the compiled engine (docs/performance.md) must agree.
_lower: Final = str.lower


# Per-process caches of the two values every tool event recomputes (docs/performance.md,
# "The compiled engine"): tool names are few, and a looping run repeats its arguments, so
# most lookups hit. All are bounded (emptied when full) and keyed by exactly what determines
# the value: the raw name; for flat string args (most calls: a path, a command, a query), the
# raw name and the args' keys and values in their order, which skips canonicalising them; else
# the normalised name and the canonical JSON. So a hit returns what the computation would.
_CACHE_ENTRIES: Final = 4096
_CACHED_NAME_CHARS: Final = 128
_CACHED_ARGS_BYTES: Final = 256
_FLAT_ARGS_KEYS: Final = 8
_TOOL_NAMES: dict[str, str] = {}
_FLAT_CALLS: dict[tuple[str, ...], tuple[str, str]] = {}
_SIGNATURES: dict[tuple[str, str], str] = {}


def normalize_tool(name: str) -> str:
    """Trim and lower-case a tool name; bash → exec, apply-patch → apply_patch, empty → tool."""
    known = _TOOL_NAMES.get(name)
    if known is not None:
        return known
    trimmed = _lower(name.strip(_JS_WHITESPACE))
    # Interned: every record of every run shares one string per tool name (~54 B a record).
    normalized = sys.intern(_TOOL_ALIASES.get(trimmed, trimmed) or "tool")
    if len(name) <= _CACHED_NAME_CHARS:
        remember(_TOOL_NAMES, name, normalized, _CACHE_ENTRIES)
    return normalized


def digest(value: JSONLike) -> str:
    """Lower-case hex SHA-256 of the value's canonical JSON as UTF-8."""
    return sha256(canonical_json_bytes(value)).hexdigest()


def _raw(value: JSONLike) -> bytes:
    """SHA-256 of the value's canonical JSON as UTF-8: `digest`'s 32 bytes (its hash key)."""
    return sha256(canonical_json_bytes(value)).digest()


def _flat_key(tool: str, args: JSON | _Undefined) -> tuple[str, ...] | None:
    """(tool, key, value, …) of args that are an object of a few short strings, else None."""
    if type(args) is not dict or len(args) > _FLAT_ARGS_KEYS:
        return None
    if len(args) == 1:  # most calls (a path, a command, a URL): the tuple built at once
        for key, value in cast("dict[object, object]", args).items():
            if type(value) is not str or type(key) is not str:
                return None
            if len(tool) + len(key) + len(value) > _CACHED_ARGS_BYTES:
                return None
            return (tool, key, value)
    flat = [tool]
    size = len(tool)
    # Read untyped: compiled, a typed loop would check each key and value as it takes them
    # (a TypeError on what canonical JSON refuses with its own error).
    for key, value in cast("dict[object, object]", args).items():
        # Strings only: a tuple compares 1, 1.0 and True equal, which canonical JSON does not,
        # and other keys are refused by canonical JSON (DetectorError).
        if type(value) is not str or type(key) is not str:
            return None
        size += len(key) + len(value)
        flat.append(key)
        flat.append(value)
    return tuple(flat) if size <= _CACHED_ARGS_BYTES else None


def call_signature(tool: str, args: JSON | _Undefined) -> tuple[str, str]:
    """(normalised tool, args_hash) of a call, the hash shared: what `ToolCall` stores."""
    flat = _flat_key(tool, args)
    if flat is not None:
        known = _FLAT_CALLS.get(flat)
        if known is None:
            # This memo shares the signature of recurring args; the canonical JSON's would only
            # hold a second entry of each.
            name = normalize_tool(tool)
            known = name, _signature_text(name, canonical_json_bytes(args))
            remember(_FLAT_CALLS, flat, known, _CACHE_ENTRIES)
        return known
    return _signature(tool, args)


def _signature(tool: str, args: JSON | _Undefined) -> tuple[str, str]:
    """`call_signature` computed, its hash shared through the canonical JSON's memo."""
    name = normalize_tool(tool)
    body = canonical_json_bytes(args)
    # The key holds the text, not orjson's bytes: those keep orjson's whole output buffer
    # (4 KB and more since orjson 3.12), which made 4,096 entries cost 17 MB of RSS.
    key = (name, body.decode()) if len(body) <= _CACHED_ARGS_BYTES else None
    signature = None if key is None else _SIGNATURES.get(key)
    if signature is None:
        signature = _signature_text(name, body)
        if key is None:
            signature = share(signature)
        else:
            # This memo shares the signature of recurring args already; the shared memo
            # (sharing.share) would only hold a second entry of each, a unique call's too.
            remember(_SIGNATURES, key, signature, _CACHE_ENTRIES)
    return name, signature


def _signature_text(name: str, body: bytes) -> str:
    """`<normalised tool>:<SHA-256 hex of the args' canonical JSON>` (docs/semantics.md §3)."""
    return f"{name}:{sha256(body).hexdigest()}"  # compiled, one string built, not two


def args_hash(tool: str, args: JSON | _Undefined) -> str:
    """The call signature `<normalised tool>:<digest(args)>`."""
    return call_signature(tool, args)[1]


# Type unions built once: `isinstance(x, list | tuple)` builds its union at every call
# (~40 ns, several times an outcome).
_ARRAYS: Final = (list, tuple)
_NUMBERS: Final = (int, float)


def error_text(error: JSONLike) -> str:
    """An error's text: a string as is, a number or boolean as JavaScript writes it, else JSON."""
    if isinstance(error, str):
        return error
    if isinstance(error, bool):
        return "true" if error else "false"
    if isinstance(error, _NUMBERS):
        return js_number_text(error)
    # Objects are never unpacked, even with a `message` key.
    return canonical_json(error)


def outcome_text(result: JSON | _Undefined) -> str:
    """The trimmed, newline-joined `text` of the typed text items of `result.content`."""
    content = result.get("content") if isinstance(result, dict) else None
    if not isinstance(content, _ARRAYS):
        return ""
    if len(content) == 1:  # most results: one item, no list to join
        item = content[0]
        if type(item) is dict:
            text = item.get("text")
            if type(text) is str:
                return js_trim(text) if isinstance(item.get("type"), str) else ""
    texts: list[str] = []
    for item in content:
        if isinstance(item, dict):
            text = item.get("text")
            if isinstance(text, str) and isinstance(item.get("type"), str):
                texts.append(text)
    return js_trim("\n".join(texts))


# Error texts recur (a loop's: the same missing file, the same denied call): the tool an error
# names (regexes) and its result key (a profile's own memo, `error_key`) are memoised by the
# text, bounded as the call memos are.
_CACHED_ERROR_CHARS: Final = 512
_ERROR_NAMES: dict[str, str | None] = {}
_ERROR_KEYS: dict[str, bytes] = {}


def unknown_tool_name(error_text: str) -> str | None:
    """The lower-cased missing tool named by an error text, or None (docs/semantics.md §3)."""
    if error_text in _ERROR_NAMES:
        return _ERROR_NAMES[error_text]
    name = _unknown_tool_name(error_text)
    if len(error_text) <= _CACHED_ERROR_CHARS:
        remember(_ERROR_NAMES, error_text, name, _CACHE_ENTRIES)
    return name


def _unknown_tool_name(error_text: str) -> str | None:
    text = js_trim(error_text)
    if not text:
        return None
    for pattern in _UNKNOWN_TOOL_PATTERNS:
        match = pattern.search(text)
        if match is not None:
            return _lower(match.group(1))
    return None


def outcome_unknown_tool_name(outcome: Outcome) -> str | None:
    """The unknown tool an outcome reports: from an error's text, or as hashed at the edge."""
    if outcome.kind == "error":
        return unknown_tool_name(error_text(outcome.value))
    if outcome.kind == "hashed":
        return outcome.unknown_tool_name
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, _NUMBERS) and not isinstance(value, bool)


def _str_or(value: object, default: str | None) -> str | None:
    return value if isinstance(value, str) else default


def _exec_outcome(status: str, details: dict[str, JSON], text: str) -> dict[str, JSON] | None:
    """Rule 5: the fields of an exec result that show progress; None for other statuses."""
    if status == "running":
        return {"status": status, "tail": _str_or(details.get("tail"), "")}
    if status in ("completed", "failed"):
        aggregated = details.get("aggregated")
        output = js_trim(aggregated) if isinstance(aggregated, str) else ""
        exit_code = details.get("exitCode")
        return {
            "status": status,
            "exitCode": exit_code if _is_number(exit_code) else None,
            "timedOut": details.get("timedOut") is True,
            "output": output or text,
        }
    if status in ("approval-pending", "approval-unavailable"):
        return {
            "status": status,
            "reason": _str_or(details.get("reason"), None),
            "host": _str_or(details.get("host"), None),
            "command": _str_or(details.get("command"), ""),
            "warningText": _str_or(details.get("warningText"), ""),
        }
    return None


def _poll_outcome(action: str, details: dict[str, JSON], text: str) -> dict[str, JSON | _Undefined]:
    """Rule 6: a process poll/log result; status copied as is, other fields value or null."""
    fields: tuple[str, ...] = ("exitCode", "exitSignal", "aggregated")
    if action == "log":
        fields = ("totalLines", "totalChars", "truncated", "exitCode", "exitSignal")
    outcome: dict[str, JSON | _Undefined] = {
        "action": action,
        "status": details.get("status", UNDEFINED),
    }
    for field in fields:
        outcome[field] = details.get(field)
    outcome["text"] = text
    return outcome


def _is_message_object(obj: dict[str, JSON]) -> bool:
    """A delivered message: its own `id` is a fresh per-send id, unlike ids elsewhere."""
    return (
        isinstance(obj.get("id"), str)
        and isinstance(obj.get("text"), str)
        and (
            isinstance(obj.get("direction"), str)
            or isinstance(obj.get("senderId"), str)
            or isinstance(obj.get("accountId"), str)
            or isinstance(obj.get("conversation"), dict)
        )
    )


def _strip_send_ids(value: JSON) -> JSON:
    """Rule 7: a copy without volatile delivery ids, at any depth (iterative, cycle-preserving)."""
    copies: dict[int, JSON] = {}  # id(original container) → its copy, so cycles stay cycles
    pending: list[tuple[JSON, JSON]] = []

    def copy_of(item: JSON) -> JSON:
        if not isinstance(item, dict | list | tuple):
            return item
        copy = copies.get(id(item))
        if copy is None:
            copy = {} if isinstance(item, dict) else []
            copies[id(item)] = copy
            pending.append((item, copy))
        return copy

    root = copy_of(value)
    while pending:
        original, copy = pending.pop()
        if isinstance(original, dict) and isinstance(copy, dict):
            drop_id = _is_message_object(original)
            for key, item in original.items():
                if key not in _VOLATILE_SEND_KEYS and not (drop_id and key == "id"):
                    copy[key] = copy_of(item)
        elif isinstance(original, list | tuple) and isinstance(copy, list):
            copy.extend([copy_of(item) for item in original])
    return root


def _is_send(tool: str, args: JSON | _Undefined, channel_tools: frozenset[str]) -> bool:
    if tool == "sessions_send" or tool in channel_tools:
        return True
    action = args.get("action") if isinstance(args, dict) else None
    return tool == "message" and isinstance(action, str) and action in _SEND_ACTIONS


def error_key(memo: dict[str, bytes], text: str, digest: Callable[[str], bytes]) -> bytes:
    """The result key of an error whose text is `text`, hashed by `digest` (docs/semantics.md
    §3, rule 1; each profile its own), memoised in `memo` (a profile's)."""
    key = memo.get(text)
    if key is None:
        key = b"error:" + digest(text)
        if len(text) <= _CACHED_ERROR_CHARS:
            remember(memo, text, key, _CACHE_ENTRIES)
    return key


def result_hash(
    tool: str,
    args: JSON | _Undefined,
    outcome: Outcome,
    channel_tools: frozenset[str] = DEFAULT_CHANNEL_TOOLS,
) -> str | None:
    """The result hash (docs/semantics.md §3) of `tool`'s outcome for `args`, or None."""
    if outcome.kind == "hashed":
        return outcome.hash
    key = result_key(tool, args, outcome, channel_tools)
    return None if key is None else hash_text(key)


def result_key(
    tool: str,
    args: JSON | _Undefined,
    outcome: Outcome,
    channel_tools: frozenset[str] = DEFAULT_CHANNEL_TOOLS,
) -> HashKey | None:
    """`result_hash`'s hash key (detectors/hashkeys.py), computed from the raw digest."""
    kind = outcome.kind
    if kind == "error":
        return error_key(_ERROR_KEYS, error_text(outcome.value), _raw)
    if kind == "hashed":
        return None if outcome.hash is None else hash_key(outcome.hash)
    result = outcome.value
    if kind == "pending" or result is UNDEFINED:
        return None
    if not isinstance(result, dict):
        return _raw(result)
    raw_details = result.get("details")
    details: dict[str, JSON] = raw_details if isinstance(raw_details, dict) else {}
    status = details.get("status")
    if status == "blocked" and details.get("deniedReason") == "tool-loop":
        return None  # LoopGuard's own block: not an outcome of the tool
    text = outcome_text(result)
    if tool == "exec" and isinstance(status, str):
        exec_outcome = _exec_outcome(status, details, text)
        if exec_outcome is not None:
            return _raw(exec_outcome)
    if tool == "process" and isinstance(args, dict):
        action = args.get("action")
        if isinstance(action, str) and action in ("poll", "log"):
            return _raw(_poll_outcome(action, details, text))
    if _is_send(tool, args, channel_tools):
        return _raw(_strip_send_ids(details))
    return _details_text_key(canonical_json_bytes(details), _text_json(text))


def _text_json(text: str) -> bytes:
    """The canonical JSON of a string: orjson's unless it holds a lone surrogate."""
    try:
        return _orjson_dumps(text)
    except orjson.JSONEncodeError:
        return canonical_json_bytes(text)


def _details_text_key(details_json: bytes, text_json: bytes) -> bytes:
    """Rule 8's raw digest of `{"details": …, "text": …}` from both parts' canonical JSON."""
    # Rule 8 written out: the hottest path, and the keys are already in order; the parts go
    # to the hash one by one instead of being joined (0.4-0.6 µs a result less).
    h = sha256(b'{"details":')
    h.update(details_json)
    h.update(b',"text":')
    h.update(text_json)
    h.update(b"}")
    return h.digest()
