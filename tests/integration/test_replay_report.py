"""The `compare --html` report, rendered by headless Chromium (Debian's `chromium`, installed
by .ci/run): its summary numbers and plot marks are in the rendered page, the page asks for
nothing on the network, and its screenshot shows both plots' colours."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

from loopguard_fleet.streams.cli import main

REPO = Path(__file__).parents[2]
TRACES = REPO / "tests" / "data" / "traces"
P1_RUN = "15fa1919-9e0b-4b9a-83ac-39b1736ab54a"
CURRENT_RGB = (0x4C, 0x78, 0xA8)  # .a in streams/audit/report_html.py
CANDIDATE_RGB = (0xF5, 0x85, 0x18)  # .b


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is needed: apt-get install -y chromium (.ci/run does)"
    return found


def _render(html: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1200,1400", *mode, html.as_uri()],
        capture_output=True, text=True, timeout=120, cwd=html.parent,
    )  # fmt: skip


def _pixels(png: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered RGB(A) rows of an 8-bit, non-interlaced PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        header = data if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def _count(rows: list[bytes], bpp: int, rgb: tuple[int, int, int]) -> int:
    want = bytes(rgb)
    return sum(1 for row in rows for i in range(0, len(row), bpp) if row[i : i + 3] == want)


def test_the_report_renders_with_its_numbers_and_plots(tmp_path, capsys) -> None:
    fleet = tmp_path / "traces.jsonl"
    fleet.write_bytes(b"".join(p.read_bytes() for p in sorted(TRACES.glob("*.jsonl"))))
    current, candidate = tmp_path / "current.json5", tmp_path / "candidate.json5"
    current.write_text("{tools: {loopDetection: {enabled: true}}}")
    candidate.write_text("{tools: {loopDetection: {enabled: true, criticalThreshold: 12}}}")
    report = tmp_path / "report.html"
    argv = ["compare", str(fleet), "--policy", str(current), "--candidate", str(candidate)]
    assert main([*argv, "--html", str(report)]) == 0
    page = report.read_text()
    assert not re.search(r"(src|href)=\"?(https?:)?//", page) and "<script" not in page

    dom = _render(report, "--dump-dom")
    assert dom.returncode == 0, dom.stderr
    metrics = dict(re.findall(r'data-metric="([^"]+)">([^<]+)<', dom.stdout))
    assert metrics == {
        "events": "297", "runs": "3", "stopped-current": "2", "stopped-candidate": "2",
        "earlier": "1", "calls-earlier": "9", "later": "0", "saved-difference": "+9",
        "healthy-hit": "0", "thresholds-changed": "1", "moved-runs": "1",
    }  # fmt: skip
    # Every run whose first stop moved is listed: here the one that stops earlier.
    assert int(metrics["moved-runs"]) == int(metrics["earlier"]) + int(metrics["later"])
    points = re.findall(
        r'data-run="([^"]+)" data-current="(\d*)" data-candidate="(\d*)"', dom.stdout
    )
    assert (P1_RUN, "24", "15") in points and len(points) == 2
    bars = dict(
        ((det, side), int(v))
        for det, side, v in re.findall(
            r'data-detector="([^"]+)" data-side="(\w+)" data-value="(\d+)"', dom.stdout
        )
    )
    capsys.readouterr()  # the first run's text summary
    assert main([*argv, "--format", "json"]) == 0
    by_detector = json.loads(capsys.readouterr().out)["by_detector"]
    assert bars == {(d, side): row[side] for d, row in by_detector.items() for side in row
                    if side in ("current", "candidate")}  # fmt: skip
    assert bars[("generic_repeat", "current")] == 53

    shot = tmp_path / "report.png"
    done = _render(report, f"--screenshot={shot}")
    assert done.returncode == 0, done.stderr
    _, bpp, rows = _pixels(shot.read_bytes())
    assert _count(rows, bpp, CURRENT_RGB) > 500  # bars and the legend
    assert _count(rows, bpp, CANDIDATE_RGB) > 500
