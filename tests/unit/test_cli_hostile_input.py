"""Hostile input never crashes a command (exit 70), and garbage is named and exits non-zero:
lone surrogates in every field and format, invalid UTF-8, a BOM, a file of nothing valid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopguard_fleet.streams.cli import main
from loopguard_fleet.streams.cli_errors import EXIT_INTERNAL, EXIT_NO_EVENTS

REPO = Path(__file__).parents[2]
CANDIDATE = REPO / "tests" / "data" / "policies" / "first-contact-strict.json5"
LONE = "\udc00"


def _call(run_id: str = "r1", tool: str = "read", seq: int = 1, **extra: object) -> dict:
    return {
        "type": "tool_call", "event_id": f"e{seq}", "run_id": run_id, "seq": seq,
        "tool_call_id": f"c{seq}", "tool": tool, "args": {"p": 1}, **extra,
    }  # fmt: skip


def _result(run_id: str = "r1", tool: str = "read", seq: int = 2) -> dict:
    return {
        "type": "tool_result", "event_id": f"e{seq}", "run_id": run_id, "seq": seq,
        "tool_call_id": f"c{seq - 1}", "tool": tool, "args": {"p": 1}, "error": "x",
    }  # fmt: skip


def _loop(run_id: str, tool: str) -> list[dict]:
    """A run that reads the same missing file 25 times: decisions to render."""
    events = []
    for i in range(25):
        events += [_call(run_id, tool, 2 * i + 1), _result(run_id, tool, 2 * i + 2)]
    return events


def _write(path: Path, events: list[dict]) -> Path:
    # json.dumps escapes a lone surrogate as \udc00: valid JSON, as JavaScript writes it
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


COMMANDS = [
    pytest.param(["replay", "{f}"], id="replay-jsonl"),
    pytest.param(["replay", "{f}", "--format", "table"], id="replay-table"),
    pytest.param(["explain", "{run}", "{f}"], id="explain-table"),
    pytest.param(["explain", "{run}", "{f}", "--format", "json"], id="explain-json"),
    pytest.param(["compare", "{f}", "--candidate", str(CANDIDATE)], id="compare-text"),
    pytest.param(
        ["compare", "{f}", "--candidate", str(CANDIDATE), "--format", "json"], id="compare-json"
    ),
    pytest.param(
        ["compare", "{f}", "--candidate", str(CANDIDATE), "--html", "{html}"], id="compare-html"
    ),
]


@pytest.mark.parametrize("argv", COMMANDS)
@pytest.mark.parametrize(
    ("run_id", "tool"),
    [
        pytest.param(f"r{LONE}", "read", id="run-id"),
        pytest.param("r1", f"re{LONE}ad", id="tool"),
        pytest.param(f"r{LONE}", f"\ud800{LONE}", id="both"),
    ],
)
def test_a_lone_surrogate_in_any_field_is_written_escaped_in_every_format(
    tmp_path: Path, argv: list[str], run_id: str, tool: str, capfd
) -> None:
    f = _write(tmp_path / "in.jsonl", _loop(run_id, tool))
    html = tmp_path / "r.html"
    args = [a.format(f=f, run=run_id, html=html) for a in argv]
    assert main(args) == 0
    out = capfd.readouterr().out
    if "--html" in args:
        out = html.read_text()
    if run_id == "r1" and args[0] == "compare" and "--format" not in args and "--html" not in args:
        return  # the text summary names runs and detectors, not tools: nothing to show
    assert "\\udc00" in out or "\\\\udc00" in out  # shown, not dropped and not a crash


def test_a_rejected_line_whose_run_id_is_a_lone_surrogate_is_reported(tmp_path, capfd) -> None:
    f = _write(tmp_path / "in.jsonl", [{"type": "bogus", "run_id": LONE, "seq": 1}, _call()])
    assert main(["replay", str(f)]) == 0
    assert "line 1: unknown_type:" in capfd.readouterr().err


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_file_with_no_valid_line_exits_65_in_every_command(tmp_path, argv, capfd) -> None:
    f = tmp_path / "junk.bin"
    f.write_bytes(bytes(range(256)) * 40 + b"\n{not json}\n[1]\n")
    args = [a.format(f=f, run="r1", html=tmp_path / "r.html") for a in argv]
    assert main(args) == EXIT_NO_EVENTS == 65
    assert "no event in the input" in capfd.readouterr().err


def test_invalid_utf8_is_named_with_its_byte_offset(tmp_path, capfd) -> None:
    f = tmp_path / "bad.jsonl"
    line = json.dumps(_call()).encode().replace(b'"r1"', b'"r\xff1"')
    f.write_bytes(line + b"\n")
    assert main(["replay", str(f)]) == EXIT_NO_EVENTS
    err = capfd.readouterr().err
    at = line.index(b"\xff")
    assert f"line 1: not_json: invalid UTF-8 at byte {at}" in err
    assert "surrogates" not in err


def test_rejections_are_shown_up_to_a_bound_then_counted(tmp_path, capfd) -> None:
    f = tmp_path / "junk.jsonl"
    f.write_text("{x}\n" * 100 + json.dumps(_call()) + "\n")
    assert main(["replay", str(f)]) == 0
    err = capfd.readouterr().err.splitlines()
    assert len(err) == 20 + 2  # twenty lines, a note, the summary
    assert err[-1] == "1 events, 0 decisions, 0 duplicates, 100 rejected"


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_accepted(tmp_path, gz, capfd) -> None:
    import gzip

    data = b"\xef\xbb\xbf" + "".join(json.dumps(e) + "\n" for e in _loop("r1", "read")).encode()
    f = tmp_path / ("bom.jsonl.gz" if gz else "bom.jsonl")
    f.write_bytes(gzip.compress(data) if gz else data)
    assert main(["replay", str(f)]) == 0
    assert capfd.readouterr().err.splitlines()[-1].startswith("50 events,")
    assert main(["replay", str(f)]) != EXIT_INTERNAL
