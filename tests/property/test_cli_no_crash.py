"""No input crashes a command: generated hostile lines through every command and output
format never exit 70 (internal error)."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import EXIT_INTERNAL

STRICT = Path(__file__).parents[1] / "data" / "policies" / "first-contact-strict.json5"
COMMANDS = [
    ["replay", "{f}"],
    ["replay", "{f}", "--format", "table"],
    ["replay", "{f}", "--strict"],
    ["explain", "{run}", "{f}"],
    ["explain", "{run}", "{f}", "--format", "json"],
    ["compare", "{f}", "--candidate", str(STRICT)],
    ["compare", "{f}", "--candidate", str(STRICT), "--format", "json", "--html", "{html}"],
]

hostile_text = st.text(
    alphabet=st.one_of(
        st.characters(),  # any code point, lone surrogates included
        st.sampled_from(["\udc00", "\ud800", "\x00", "\ufeff", "\u2028", '"', "\\"]),
    ),
    max_size=12,
)
field_value = st.one_of(
    hostile_text,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.none(),
    st.booleans(),
    st.lists(hostile_text, max_size=2),
    st.dictionaries(hostile_text, hostile_text, max_size=2),
)
event = st.fixed_dictionaries(
    {
        "type": st.one_of(
            st.sampled_from(["tool_call", "tool_result", "compaction", "run_end"]), hostile_text
        ),
        "run_id": st.one_of(st.sampled_from(["r1", "r\udc00"]), field_value),
        "seq": st.one_of(st.integers(min_value=0, max_value=5), field_value),
    },
    optional={
        "event_id": field_value,
        "tool_call_id": field_value,
        "tool": st.one_of(st.sampled_from(["read", "re\udc00ad"]), field_value),
        "args": field_value,
        "result": field_value,
        "error": field_value,
        "agent_id": field_value,
        "ts": field_value,
        "want_verdict": field_value,
    },
)
line = st.one_of(
    event.map(lambda e: json.dumps(e).encode()),  # lone surrogates escaped, as JavaScript does
    st.binary(max_size=40),  # anything: invalid UTF-8, NUL, half a JSON text
    st.sampled_from([b"\xef\xbb\xbf{}", b"[1]", b'"x"', b"{", b"\xed\xa0\x80", b"null"]),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(lines=st.lists(line, min_size=1, max_size=8), bom=st.booleans())
def test_no_hostile_input_makes_any_command_exit_70(lines: list[bytes], bom: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.jsonl"
        f.write_bytes((b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines) + b"\n")
        for command in COMMANDS:
            for run in ("r1", "r\udc00"):
                argv = [a.format(f=f, run=run, html=Path(tmp) / "r.html") for a in command]
                out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(argv)
                assert code != EXIT_INTERNAL, (argv, err.getvalue())
