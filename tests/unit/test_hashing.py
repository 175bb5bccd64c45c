"""Tool names, trim, args_hash, error text, result_hash rules 1-8 and unknown-tool names."""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from loopguard_fleet.detectors.hashing import (
    args_hash,
    digest,
    error_text,
    js_trim,
    normalize_tool,
    outcome_text,
    outcome_unknown_tool_name,
    result_hash,
    unknown_tool_name,
)
from loopguard_fleet.detectors.values import JSON, UNDEFINED, Outcome

VECTORS = json.loads(
    (Path(__file__).parents[1] / "data" / "canonical_vectors.json").read_text(encoding="utf-8")
)


def h(canonical_text: str) -> str:
    """SHA-256 of a canonical text written out by hand, so expectations show what is hashed."""
    return sha256(canonical_text.encode()).hexdigest()


# --- trim and tool names -------------------------------------------------------------------


def test_js_trim_strips_exactly_what_javascript_trim_strips() -> None:
    stripped = [c for c in range(0x10000) if js_trim(f"{chr(c)}x{chr(c)}") == "x"]
    assert stripped == VECTORS["trim_code_points"]


TRIM_CASES = [
    pytest.param(" \t\n\x0b\x0c\r a b \xa0\ufeff\u3000", "a b", id="ASCII and Unicode spaces"),
    pytest.param("\x1c\x1d\x1e\x1fa\x85", "\x1c\x1d\x1e\x1fa\x85", id="not U+001C-1F nor U+0085"),
    pytest.param("\u2028\u2029\u202f\u205f\u1680a\u200a", "a", id="line separators"),
    pytest.param("\u200ba\u180e", "\u200ba\u180e", id="not zero-width space nor U+180E"),
    pytest.param("", "", id="empty"),
]


@pytest.mark.parametrize(("text", "expected"), TRIM_CASES)
def test_js_trim(text: str, expected: str) -> None:
    assert js_trim(text) == expected


@pytest.mark.parametrize("case", VECTORS["tool_names"], ids=lambda c: ascii(c["name"]))
def test_normalize_tool_matches_javascript(case: dict[str, str]) -> None:
    assert normalize_tool(case["name"]) == case["normalized"]


# --- args_hash -----------------------------------------------------------------------------

TRACE_PATH = "/Users\u2026DMAP.md"  # the path of the 117 failing reads in openclaw-P1-r5.jsonl
TRACE_ERROR: dict[str, JSON] = {  # their `error` field: the object handed to OpenClaw
    "message": '{\n  "status": "error",\n  "tool": "read",\n'
    '  "error": "File not found: /Users\u2026DMAP.md."\n}'
}

ARGS_CASES = [
    pytest.param(
        "read",
        {"path": TRACE_PATH},
        "read:cfd87efe8329bd88730e411a9e583bddca9071099dc9437e374e29aa6f05ef9b",
        id="the trace's failing read (OpenClaw's hash)",
    ),
    pytest.param(" BASH ", {"command": "ls"}, "exec:" + h('{"command":"ls"}'), id="bash is exec"),
    pytest.param("read", {"b": 1, "a": [2]}, "read:" + h('{"a":[2],"b":1}'), id="keys sorted"),
    pytest.param("read", UNDEFINED, "read:" + h("undefined"), id="unknown args"),
    pytest.param("", {}, "tool:" + h("{}"), id="empty tool name"),
]


@pytest.mark.parametrize(("tool", "args", "expected"), ARGS_CASES)
def test_args_hash(tool: str, args: Any, expected: str) -> None:
    assert args_hash(tool, args) == expected


def test_digest_survives_lone_surrogates() -> None:
    assert digest("\ud800") == h('"\\ud800"')


# --- error text and outcome text -----------------------------------------------------------

ERROR_TEXTS = [
    pytest.param("File not found", "File not found", id="string as is"),
    pytest.param("", "", id="empty string"),
    pytest.param(42, "42", id="int"),
    pytest.param(1.0, "1", id="whole float"),
    pytest.param(-0.0, "0", id="negative zero"),
    pytest.param(1e21, "1e+21", id="big float"),
    pytest.param(float("nan"), "NaN", id="NaN"),
    pytest.param(True, "true", id="true"),
    pytest.param(False, "false", id="false"),
    pytest.param(None, "null", id="null"),
    pytest.param(UNDEFINED, "undefined", id="undefined"),
    pytest.param({"message": "boom", "code": 1}, '{"code":1,"message":"boom"}', id="object kept"),
    pytest.param([1, "a"], '[1,"a"]', id="array"),
]


@pytest.mark.parametrize(("error", "expected"), ERROR_TEXTS)
def test_error_text(error: Any, expected: str) -> None:
    assert error_text(error) == expected


OUTCOME_TEXTS = [
    pytest.param({"content": [{"type": "text", "text": " a "}]}, "a", id="trimmed"),
    pytest.param(
        {"content": [{"type": "text", "text": "a"}, {"type": "image", "text": "b"}]},
        "a\nb",
        id="any string type, joined by newline",
    ),
    pytest.param(
        {"content": ["x", {"text": "no type"}, {"type": 1, "text": "t"}, {"type": "text"}]},
        "",
        id="items without string type and text skipped",
    ),
    pytest.param(
        {"content": [{"type": "text", "text": ""}, {"type": "text", "text": "b\u3000"}]},
        "b",
        id="empty first item leaves a newline that trim removes",
    ),
    pytest.param({"content": {"type": "text", "text": "a"}}, "", id="content not a list"),
    pytest.param({"text": "hello"}, "", id="no content"),
    pytest.param(["not", "an", "object"], "", id="result not an object"),
]


@pytest.mark.parametrize(("result", "expected"), OUTCOME_TEXTS)
def test_outcome_text(result: Any, expected: str) -> None:
    assert outcome_text(result) == expected


# --- result_hash ---------------------------------------------------------------------------


def result(details: Any = UNDEFINED, text: str | None = None) -> Outcome:
    value: dict[str, Any] = {}
    if details is not UNDEFINED:
        value["details"] = details
    if text is not None:
        value["content"] = [{"type": "text", "text": text}]
    return Outcome.result(value)


LOOP_BLOCK = {"status": "blocked", "deniedReason": "tool-loop", "reason": "CRITICAL: …"}
READ = {"path": "/a"}

RULE_1_ERRORS = [
    pytest.param(
        "read",
        {"path": TRACE_PATH},
        Outcome.error(TRACE_ERROR),
        "error:04437246383dc54040c0335c2f011d65acbe1eafca2e809ff60b60f702fb4bd3",
        id="1 the trace's error object (OpenClaw's hash)",
    ),
    pytest.param(
        "read",
        {"path": TRACE_PATH},
        Outcome.error(TRACE_ERROR["message"]),
        "error:dfb902b6a49a097662f404c5672ae87c51c554c050a114315c8e9443f43b851c",
        id="1 the trace's message alone hashes differently",
    ),
    pytest.param("read", READ, Outcome.error("boom"), "error:" + h('"boom"'), id="1 string"),
    pytest.param("read", READ, Outcome.error(ValueError("bad")), "error:" + h('"bad"'), id="1 exc"),
    pytest.param(
        "read", READ, Outcome.error(ValueError()), "error:" + h('"ValueError"'), id="1 exc name"
    ),
    pytest.param("read", READ, Outcome.error(1.0), "error:" + h('"1"'), id="1 number"),
    pytest.param("read", READ, Outcome.error(True), "error:" + h('"true"'), id="1 boolean"),
    pytest.param("read", READ, Outcome.error(None), "error:" + h('"null"'), id="1 null"),
    pytest.param(
        "read",
        READ,
        Outcome.error({"message": "boom"}),
        "error:" + h('"{\\"message\\":\\"boom\\"}"'),
        id="1 object canonicalised twice",
    ),
]
RULES_2_TO_4 = [
    pytest.param("read", READ, Outcome.pending(), None, id="2 pending"),
    pytest.param("read", READ, Outcome.result(), None, id="2 absent result"),
    pytest.param("read", READ, Outcome.hashed("abc"), "abc", id="hashed at the edge"),
    pytest.param("read", READ, Outcome.hashed(None), None, id="hashed as none"),
    pytest.param("read", READ, Outcome.result(None), h("null"), id="3 null result"),
    pytest.param("read", READ, Outcome.result([1, "a"]), h('[1,"a"]'), id="3 array result"),
    pytest.param("read", READ, Outcome.result("text"), h('"text"'), id="3 string result"),
    pytest.param("read", READ, Outcome.result(False), h("false"), id="3 boolean result"),
    pytest.param("read", READ, result(LOOP_BLOCK, "CRITICAL: …"), None, id="4 own block"),
    pytest.param("exec", READ, result(LOOP_BLOCK), None, id="4 own block on exec"),
    pytest.param(
        "read",
        READ,
        result({"status": "blocked", "deniedReason": "plugin-approval"}),
        h('{"details":{"deniedReason":"plugin-approval","status":"blocked"},"text":""}'),
        id="4 other denials hash normally",
    ),
]
RULE_5_EXEC = [
    pytest.param(
        "exec",
        {"command": "make"},
        result({"status": "running", "tail": "line\n", "pid": 7, "sessionId": "s"}, "ignored"),
        h('{"status":"running","tail":"line\\n"}'),
        id="5 running",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": "running", "tail": 5}),
        h('{"status":"running","tail":""}'),
        id="5 running without a string tail",
    ),
    pytest.param(
        "exec",
        {},
        result(
            {"status": "completed", "exitCode": 0, "timedOut": False, "aggregated": " out\n"}
            | {"durationMs": 12, "cwd": "/w", "pid": 3},
            "text",
        ),
        h('{"exitCode":0,"output":"out","status":"completed","timedOut":false}'),
        id="5 completed uses trimmed aggregated",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": "failed", "exitCode": True, "timedOut": "true", "aggregated": " "}, "t"),
        h('{"exitCode":null,"output":"t","status":"failed","timedOut":false}'),
        id="5 failed: boolean exitCode, non-true timedOut, blank aggregated",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": "failed", "exitCode": 1.0, "timedOut": True}),
        h('{"exitCode":1,"output":"","status":"failed","timedOut":true}'),
        id="5 failed: timed out",
    ),
    pytest.param(
        "exec",
        {},
        result(
            {"status": "approval-pending", "reason": "ask", "host": "gw", "command": "rm -rf /"}
            | {"warningText": 5, "expiresAtMs": 99}
        ),
        h(
            '{"command":"rm -rf /","host":"gw","reason":"ask","status":"approval-pending",'
            '"warningText":""}'
        ),
        id="5 approval-pending",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": "approval-unavailable", "reason": 1}),
        h(
            '{"command":"","host":null,"reason":null,"status":"approval-unavailable",'
            '"warningText":""}'
        ),
        id="5 approval-unavailable with nothing else",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": "queued"}, "t"),
        h('{"details":{"status":"queued"},"text":"t"}'),
        id="5 other status falls through to 8",
    ),
    pytest.param(
        "exec",
        {},
        result({"status": 1}),
        h('{"details":{"status":1},"text":""}'),
        id="5 non-string status falls through to 8",
    ),
    pytest.param(
        "read",
        {},
        result({"status": "running", "tail": "x"}),
        h('{"details":{"status":"running","tail":"x"},"text":""}'),
        id="5 only for exec",
    ),
]
POLL = {"action": "poll", "sessionId": "s1"}
LOG = {"action": "log", "sessionId": "s1"}
RULE_6_PROCESS = [
    pytest.param(
        "process",
        POLL,
        result({"status": "running", "aggregated": "abc", "pid": 1, "exitCode": None}, "out"),
        h(
            '{"action":"poll","aggregated":"abc","exitCode":null,"exitSignal":null,'
            '"status":"running","text":"out"}'
        ),
        id="6 poll",
    ),
    pytest.param(
        "process",
        POLL,
        result({}),
        h(
            '{"action":"poll","aggregated":null,"exitCode":null,"exitSignal":null,'
            '"status":undefined,"text":""}'
        ),
        id="6 poll with status absent",
    ),
    pytest.param(
        "process",
        POLL,
        result({"status": None, "exitSignal": "SIGTERM"}),
        h(
            '{"action":"poll","aggregated":null,"exitCode":null,"exitSignal":"SIGTERM",'
            '"status":null,"text":""}'
        ),
        id="6 poll with status null",
    ),
    pytest.param(
        "process",
        LOG,
        result(
            {"status": "completed", "totalLines": 3, "totalChars": 10, "truncated": False}
            | {"exitCode": 0, "exitSignal": None, "aggregated": "dropped"},
            "3 lines",
        ),
        h(
            '{"action":"log","exitCode":0,"exitSignal":null,"status":"completed",'
            '"text":"3 lines","totalChars":10,"totalLines":3,"truncated":false}'
        ),
        id="6 log",
    ),
    pytest.param(
        "process",
        LOG,
        Outcome.result({"details": [1]}),
        h(
            '{"action":"log","exitCode":null,"exitSignal":null,"status":undefined,'
            '"text":"","totalChars":null,"totalLines":null,"truncated":null}'
        ),
        id="6 log with details not an object",
    ),
    pytest.param(
        "process",
        {"action": "kill"},
        result({"status": "killed"}),
        h('{"details":{"status":"killed"},"text":""}'),
        id="6 other actions fall through to 8",
    ),
    pytest.param(
        "process", UNDEFINED, result({}), h('{"details":{},"text":""}'), id="6 unknown args"
    ),
]
SENT = {
    "ok": True,
    "runId": "r-1",
    "result": {"messageId": "1", "receipt": {"parts": [1]}, "chat": {"id": "c1"}},
    "messages": [
        {"id": "m1", "text": "hi", "direction": "out", "ts": 5},
        {"id": "keep", "text": "no sender, direction, account or conversation"},
        [{"platformMessageIds": ["p"], "createdAt": 1, "n": 1}],
    ],
}
SENT_STRIPPED = (
    '{"messages":[{"direction":"out","text":"hi"},'
    '{"id":"keep","text":"no sender, direction, account or conversation"},[{"n":1}]],'
    '"ok":true,"result":{"chat":{"id":"c1"}}}'
)
RULE_7_SENDS = [
    pytest.param(
        "message",
        {"action": "send"},
        result(SENT, "sent m1"),
        h(SENT_STRIPPED),
        id="7 message send strips ids at any depth",
    ),
    pytest.param(
        "sessions_send", {}, result(SENT), h(SENT_STRIPPED), id="7 sessions_send, any args"
    ),
    pytest.param(
        "telegram",
        {"action": "react"},
        result(SENT),
        h(SENT_STRIPPED),
        id="7 a channel tool, any action",
    ),
    pytest.param(
        "message",
        {"action": "poll"},
        result({"pollId": "p", "message": {"id": "m", "text": "t", "conversation": {"id": "c"}}}),
        h('{"message":{"conversation":{"id":"c"},"text":"t"}}'),
        id="7 message object with a conversation",
    ),
    pytest.param(
        "message",
        {"action": "reply"},
        result({"message": {"id": 5, "text": "t", "senderId": "u"}}),
        h('{"message":{"id":5,"senderId":"u","text":"t"}}'),
        id="7 a numeric id is not a message object's",
    ),
    pytest.param(
        "message",
        {"action": "upload-file"},
        result({"id": "x", "text": "t", "accountId": "a", "fileKey": "k"}),
        h('{"accountId":"a","text":"t"}'),
        id="7 details itself as the message object",
    ),
    pytest.param(
        "message",
        {"action": "sticker"},
        Outcome.result({"content": []}),
        h("{}"),
        id="7 details absent",
    ),
    pytest.param(
        "message",
        {"action": "react"},
        result({"messageId": "1"}),
        h('{"details":{"messageId":"1"},"text":""}'),
        id="7 message react is not a send",
    ),
    pytest.param(
        "message",
        {},
        result({"messageId": "1"}),
        h('{"details":{"messageId":"1"},"text":""}'),
        id="7 message without action is not a send",
    ),
]
RULE_8 = [
    pytest.param(
        "read",
        {"path": "/f/123.txt"},
        Outcome.result(
            {"content": [{"type": "text", "text": "c1 " + 200 * "x"}], "details": {"ok": True}}
        ),
        "6092ae7c97f955941d3ee9f982494042b165d9f4c0dbeff26d2b0004ebd62102",
        id="8 details and text (hash from node)",
    ),
    pytest.param(
        "read",
        READ,
        Outcome.result({"text": "a result the trace stored as text"}),
        "d945f533f0d17914232880903bfb9369d59cd75ef12afe84c409d1fb88e9b775",
        id="8 no content nor details (hash from node)",
    ),
    pytest.param(
        "read",
        READ,
        Outcome.result({"details": "str", "content": [{"type": "text", "text": "t"}]}),
        h('{"details":{},"text":"t"}'),
        id="8 details not an object",
    ),
]


@pytest.mark.parametrize(
    ("tool", "args", "outcome", "expected"),
    RULE_1_ERRORS + RULES_2_TO_4 + RULE_5_EXEC + RULE_6_PROCESS + RULE_7_SENDS + RULE_8,
)
def test_result_hash(tool: str, args: Any, outcome: Outcome, expected: str | None) -> None:
    assert result_hash(tool, args, outcome) == expected


def test_channel_tools_come_from_the_settings() -> None:
    discord = frozenset({"discord"})
    details = {"messageId": "1", "ok": True}
    assert result_hash("discord", {}, result(details), discord) == h('{"ok":true}')
    assert result_hash("telegram", {}, result(details), discord) == h(
        '{"details":{"messageId":"1","ok":true},"text":""}'
    )


def test_a_cyclic_send_result_is_stripped_and_cut() -> None:
    details: dict[str, Any] = {"messageId": "1", "items": []}
    details["items"].append(details)
    assert result_hash("sessions_send", {}, result(details)) == h('{"items":["[Circular]"]}')


# --- unknown tool names --------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["unknown_tool"], ids=lambda c: ascii(c["text"]))
def test_unknown_tool_name_matches_javascript(case: dict[str, Any]) -> None:
    assert unknown_tool_name(case["text"]) == case["name"]


UNKNOWN_OUTCOMES = [
    pytest.param(Outcome.error("Unknown tool: Foo"), "foo", id="error string"),
    pytest.param(Outcome.error("  Tool exec not found  "), "exec", id="second pattern"),
    pytest.param(Outcome.error({"message": "unknown tool: foo"}), "foo", id="object text searched"),
    pytest.param(Outcome.error(ValueError("Unknown tool: x.y")), "x.y", id="exception"),
    pytest.param(Outcome.error(42), None, id="number"),
    pytest.param(Outcome.error("File not found"), None, id="other error"),
    pytest.param(Outcome.hashed("error:abc", "gone"), "gone", id="hashed at the edge"),
    pytest.param(Outcome.result({"text": "unknown tool: foo"}), None, id="results never"),
    pytest.param(Outcome.pending(), None, id="pending"),
]


@pytest.mark.parametrize(("outcome", "expected"), UNKNOWN_OUTCOMES)
def test_outcome_unknown_tool_name(outcome: Outcome, expected: str | None) -> None:
    assert outcome_unknown_tool_name(outcome) == expected
