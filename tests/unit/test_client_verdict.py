"""A verdict tells the runtime why: detector, level, count, message and (openclaw-2026.9's
published warnings) note, read from the worker's verdict message; None when absent."""

from __future__ import annotations

import pytest

from loopguard_fleet.streams.client import VerdictReply

BLOCK = {
    "type": "verdict", "run_id": "r1", "tool_call_id": "c9", "decision": "block",
    "detector": "generic_repeat", "level": "critical", "count": 20,
    "message": "CRITICAL: read called 20 times with identical arguments",
}  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        pytest.param(
            BLOCK,
            VerdictReply(
                "block",
                detector="generic_repeat",
                level="critical",
                count=20,
                message=BLOCK["message"],
                payload=BLOCK,
            ),
            id="block-with-reasons",
        ),
        pytest.param(
            {**BLOCK, "decision": "warn", "level": "warning", "note": "published warning"},
            VerdictReply(
                "warn",
                detector="generic_repeat",
                level="warning",
                count=20,
                message=BLOCK["message"],
                note="published warning",
                payload={
                    **BLOCK,
                    "decision": "warn",
                    "level": "warning",
                    "note": "published warning",
                },
            ),
            id="warn-with-note",
        ),
        pytest.param(
            {"type": "verdict", "decision": "allow"},
            VerdictReply("allow", payload={"type": "verdict", "decision": "allow"}),
            id="allow-without-reasons",
        ),
        pytest.param(
            {"type": "verdict", "decision": "nope", "count": True, "detector": 3},
            VerdictReply(
                "allow",
                payload={"type": "verdict", "decision": "nope", "count": True, "detector": 3},
            ),
            id="malformed-fields-are-none",
        ),
    ],
)
def test_a_verdict_reply_reads_its_reasons_from_the_payload(payload, expected) -> None:
    assert VerdictReply.from_payload(payload) == expected
