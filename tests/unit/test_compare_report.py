"""The compare report tells everything: every moved or newly stopped run (the text lists 50 and
says of how many), which thresholds changed, countable overlapping points, consistent signs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from loopguard_fleet.streams.cli import main

STRICT = Path(__file__).parents[1] / "data" / "policies" / "first-contact-strict.json5"


def _loop(run_id: str, calls: int) -> list[dict]:
    out = []
    for i in range(calls):
        for kind, extra in (("tool_call", {}), ("tool_result", {"error": "x"})):
            out.append({
                "type": kind, "event_id": f"{run_id}-{2 * i + len(out) % 2}", "run_id": run_id,
                "seq": len(out) + 1, "tool_call_id": f"c{i}", "tool": "read", "args": {"p": 1},
                **extra,
            })  # fmt: skip
    return out


def _fleet(tmp_path: Path) -> Path:
    """60 runs the defaults stop at call 21 and the candidate at 7; 5 that only it stops."""
    events = [e for n in range(60) for e in _loop(f"moved-{n:02d}", 25)]
    events += [e for n in range(5) for e in _loop(f"newly-{n}", 12)]
    path = tmp_path / "fleet.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_text_lists_moved_and_newly_stopped_runs_and_says_of_how_many(tmp_path, capsys):
    assert main(["compare", str(_fleet(tmp_path)), "--candidate", str(STRICT)]) == 0
    out = capsys.readouterr().out
    assert "runs whose first stop moves: 65 (50 of 65; all in --format json)" in out
    assert "  criticalThreshold: 20 → 6" in out and "  warningThreshold: 10 → 3" in out
    listed = re.findall(r"^  (moved-\d\d|newly-\d) ", out, re.MULTILINE)
    assert len(listed) == 50 and listed[0] == "moved-00"
    assert (
        main(["compare", str(_fleet(tmp_path)), "--candidate", str(STRICT), "--format", "json"])
        == 0
    )
    runs = json.loads(capsys.readouterr().out)["stopped_runs"]
    newly = [r["run_id"] for r in runs if r["current"] is None]
    assert newly == [f"newly-{n}" for n in range(5)]


def test_the_html_counts_overlapping_points_and_signs_lost_as_the_text_does(tmp_path, capsys):
    html = tmp_path / "r.html"
    argv = ["compare", str(_fleet(tmp_path)), "--candidate", str(STRICT), "--html", str(html)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    page = html.read_text()
    counts = sorted(int(n) for n in re.findall(r'data-count="(\d+)"', page))
    assert counts == [5, 60]  # two points, each saying how many runs it stands for
    assert 'data-metric="moved-runs">50 of 65<' in page
    assert 'data-metric="thresholds-changed">2<' in page
    lost_text = re.search(r"generic_repeat\s+\d+\s+\d+\s+\d+\s+(\d+)", text)
    assert lost_text is not None
    row = re.search(r'<tr data-detector="generic_repeat">(.*?)</tr>', page)
    assert row is not None
    assert re.findall(r'class="n">([^<]*)<', row.group(1))[-1] == lost_text.group(1)
