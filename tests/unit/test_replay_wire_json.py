"""`loopguard replay` reads JSON as JavaScript writes it: a file of Node-written events with
lone surrogates and JavaScript number forms replays with 0 rejected, and decides on them."""

from __future__ import annotations

import json
from pathlib import Path

from loopguard_fleet.streams.cli import main

# The 1,500-level vector is left to tests/unit/test_wire_json.py: this test builds its lines
# with the standard library, which recurses.
VECTORS = [
    v
    for v in json.loads(
        (Path(__file__).parents[1] / "data" / "canonical_vectors.json").read_text(encoding="utf-8")
    )["wire"]
    if not v["id"].startswith("nesting")
]


def test_a_file_of_javascript_written_events_replays_with_nothing_rejected(
    tmp_path: Path, capsys
) -> None:
    lines = []
    seq = 0
    for i, vector in enumerate(VECTORS):
        wire = json.loads(vector["wire"])
        # Edit the Node-written text itself: re-encoding would change its number forms.
        text = vector["wire"].replace(json.dumps(wire["run_id"]), json.dumps(f"wire-{i}"), 1)
        text = text.replace(f'"seq":{wire["seq"]}', '"seq":{seq}', 1)
        text = text.replace(json.dumps(wire["event_id"]), '"e{seq}"', 1)
        for _ in range(12):  # the same call and outcome: warnings from the 11th call on
            for etype in ("tool_call", "tool_result"):  # a tool_call ignores the result
                seq += 1
                line = text.replace('"type":"tool_result"', f'"type":"{etype}"', 1)
                lines.append(line.replace("{seq}", str(seq)))
    path = tmp_path / "js.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    policy = tmp_path / "policy.json5"
    policy.write_text("{tools: {loopDetection: {enabled: true}}}")
    assert main(["replay", str(path), "--policy", str(policy)]) == 0
    out, err = capsys.readouterr()
    assert " 0 rejected" in err
    warned = {json.loads(line)["run_id"] for line in out.splitlines()}
    assert warned == {f"wire-{i}" for i in range(len(VECTORS))}
