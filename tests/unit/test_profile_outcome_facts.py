"""openclaw-2026.9 outcome facts: kinds, failure identity, markers (docs/semantics.md)."""

from __future__ import annotations

from typing import Any

import pytest

from loopguard_fleet.detectors import Outcome, result_hash
from loopguard_fleet.detectors.outcome_facts import (
    OutcomeFacts,
    canonical_markers,
    failure_shape,
    outcome_digest,
    outcome_facts,
)

ID_A, ID_B, ZERO = "0123456789abcdef", "fedcba9876543210", "0" * 16


def wrap(body: str, first: str = ID_A, second: str | None = None, q: str = '"') -> str:
    return (
        f"<<<EXTERNAL_UNTRUSTED_CONTENT id={q}{first}{q}>>>{body}"
        f"<<<END_EXTERNAL_UNTRUSTED_CONTENT id={q}{second or first}{q}>>>"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (wrap("page"), wrap("page", ZERO)),
        (
            "before " + wrap("a") + " and " + wrap("b", ID_B),
            "before " + wrap("a", ZERO) + " and " + wrap("b", ZERO),
        ),
        (wrap("page", ID_A, ID_B), wrap("page", ID_A, ID_B)),
        (wrap("page", ID_A.upper()), wrap("page", ID_A.upper())),
        (
            wrap("x" + wrap("inner", ID_B)),
            '<<<EXTERNAL_UNTRUSTED_CONTENT id="0123456789abcdef">>>x'
            + wrap("inner", ZERO)
            + '<<<END_EXTERNAL_UNTRUSTED_CONTENT id="0123456789abcdef">>>',
        ),
        (wrap('say \\"hi\\"', q='\\"'), wrap('say \\"hi\\"', ZERO, q='\\"')),
        (wrap('say "hi"', q='\\"'), wrap('say "hi"', q='\\"')),
        (wrap("x", q='\\\\"'), wrap("x", q='\\\\"')),
        (wrap("x", q='\\\\\\"'), wrap("x", ZERO, q='\\\\\\"')),
        ("no markers", "no markers"),
    ],
    ids=[
        "one-span",
        "two-spans",
        "ids-differ",
        "upper-case-hex",
        "nested-span-only-the-inner",
        "escaped-once-with-escaped-quotes",
        "escaped-once-with-a-raw-quote",
        "two-backslashes-are-no-nesting-level",
        "escaped-twice",
        "plain-text",
    ],
)
def test_marker_nonces_become_zeros_only_in_well_formed_spans(text: str, expected: str) -> None:
    assert canonical_markers(text) == expected


def test_a_fresh_nonce_is_the_same_outcome_but_new_text_is_progress() -> None:
    def page(nonce: str, body: str = "same") -> Outcome:
        return Outcome.result({"content": [{"type": "text", "text": wrap(body, nonce)}]})

    facts = [outcome_facts("web_fetch", {}, page(n)) for n in (ID_A, ID_B)]
    assert facts[0] == facts[1]
    assert outcome_facts("web_fetch", {}, page(ID_A, "changed")) != facts[0]
    # The configurable profile sees two outcomes.
    assert result_hash("web_fetch", {}, page(ID_A)) != result_hash("web_fetch", {}, page(ID_B))


def test_marker_keys_are_canonical_and_ordered_by_their_canonical_form() -> None:
    a = {wrap("k", ID_A): 1, "b": 2}
    b = {"b": 2, wrap("k", ID_B): 1}
    assert outcome_digest(a) == outcome_digest(b)


@pytest.mark.parametrize(
    ("output", "shape"),
    [
        ("failed at 2026-12-01T10:00:01.123Z", "failed at #"),
        ("failed at 2026-12-01 10:00:01+01:00", "failed at #"),
        ("tick 9:15:02 done", "tick # done"),
        ("Attempt #3 of 5", "# of 5"),
        ("retry=12", "#"),
        ("took 35ms, then 1.5 s, then 2 minutes", "took #, then #, then #"),
        ("pid 4242 ppid: 1", "# #"),
        ("waited 3\u017f", "waited #"),
        ("xattempt 3", "xattempt 3"),
        ("p\u0131d 5", "p\u0131d 5"),
        ("\u212aattempt 3", "\u212aattempt 3"),
        ("exit 3", "exit 3"),
    ],
    ids=[
        "iso-date-time",
        "iso-with-offset",
        "clock-time",
        "attempt-counter",
        "retry-counter",
        "durations",
        "pids",
        "long-s-is-an-s",
        "no-word-boundary",
        "dotless-i-is-not-i",
        "kelvin-sign-is-a-word-character",
        "other-numbers-stay",
    ],
)
def test_failure_shape_hides_volatile_text_as_javascript_does(output: str, shape: str) -> None:
    assert failure_shape(output) == shape


def _exec(status: str = "failed", code: Any = 1, output: str = "boom", **details: Any) -> Outcome:
    return Outcome.result(
        {
            "content": [],
            "details": {"status": status, "exitCode": code, "aggregated": output, **details},
        }
    )


@pytest.mark.parametrize(
    ("outcome", "terminal"),
    [
        (_exec(), True),
        (_exec("completed", 2), True),
        (_exec(code=0), False),
        (_exec(code=None), False),
        (_exec(code=True), False),
        (_exec(timedOut=True), False),
        (_exec(output="   "), False),
        (_exec(output="(Command exited with code 1)"), False),
        (_exec(code=1.0, output="(Command exited with code 1)"), False),
        (_exec("running"), False),
    ],
    ids=[
        "failed",
        "completed-non-zero",
        "exit-0",
        "no-code",
        "boolean-code",
        "timed-out",
        "no-output",
        "generic-exit-text",
        "float-code-text",
        "running",
    ],
)
def test_terminal_exec_failures(outcome: Outcome, terminal: bool) -> None:
    facts = outcome_facts("exec", {}, outcome)
    assert (facts.outcome_kind == "terminal-exec-failure", facts.failure_identity is not None) == (
        terminal,
        terminal,
    )
    assert facts.result_hash == result_hash("exec", {}, outcome)  # the hash itself is unchanged


def test_one_failure_cause_keeps_its_identity_across_volatile_output() -> None:
    first = outcome_facts("exec", {}, _exec(output="ERR at 10:00:01 attempt 1 (pid 7)"))
    second = outcome_facts("exec", {}, _exec(output="ERR at 10:00:09 attempt 2 (pid 8)"))
    other = outcome_facts("exec", {}, _exec(output="ERR2 at 10:00:09 attempt 2 (pid 8)"))
    assert first.failure_identity == second.failure_identity != other.failure_identity
    assert first.result_hash != second.result_hash


@pytest.mark.parametrize(
    ("tool", "outcome", "expected"),
    [
        (
            "read",
            Outcome.result({"details": {"status": "blocked", "deniedReason": "tool-loop"}}),
            OutcomeFacts(outcome_kind="tool-loop-veto"),
        ),
        (
            "write",
            Outcome.result({"details": {"changed": False, "bytes": 3}}),
            OutcomeFacts(outcome_digest({"status": "unchanged"}), no_progress=True),
        ),
        ("read", Outcome.error("Tool exec not found"), None),
        ("read", Outcome.pending(), OutcomeFacts()),
        ("read", Outcome.hashed("error:abc"), OutcomeFacts("error:abc", no_progress=True)),
        ("read", Outcome.hashed("abc"), OutcomeFacts("abc")),
    ],
    ids=["veto", "write-unchanged", "error", "pending", "privacy-error", "privacy-result"],
)
def test_outcome_kinds_and_no_progress(
    tool: str, outcome: Outcome, expected: OutcomeFacts | None
) -> None:
    facts = outcome_facts(tool, {}, outcome)
    if expected is None:
        assert (facts.no_progress, facts.unknown_tool_name) == (True, "exec")
        assert facts.result_hash == result_hash(tool, {}, outcome)
    else:
        assert facts == expected


@pytest.mark.parametrize("tool", ["conversations_send", "conversations_turn", "sessions_send"])
def test_conversation_sends_drop_delivery_ids(tool: str) -> None:
    def sent(message_id: str) -> Outcome:
        return Outcome.result({"details": {"ok": True, "messageId": message_id}})

    assert outcome_facts(tool, {}, sent("m1")) == outcome_facts(tool, {}, sent("m2"))
