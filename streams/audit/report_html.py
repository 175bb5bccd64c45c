"""The `compare --html` report: one self-contained HTML page, plots drawn as inline SVG.

No script, no stylesheet or font from the network: the page opens from a file anywhere.
Numbers carry `data-metric` attributes and plot marks `data-*` attributes, so a test can read
them back from the page that a browser rendered (tests/integration/test_replay_report.py).
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from loopguard_fleet.streams.audit.compare import (
    MAX_LISTED_RUNS,
    CompareReport,
    moved_runs,
    shadow_note,
    threshold_changes,
)

__all__ = ["MAX_POINTS", "render_html"]

MAX_POINTS = 2000  # runs drawn in the scatter plot (the JSON report has them all)
_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.sub{color:#5b6474;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #d6dae1;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#5b6474;font-size:12px}
table{border-collapse:collapse;margin-top:6px}
td,th{padding:3px 10px;border-bottom:1px solid #e6e8ec}
th{text-align:left;background:#f4f5f7}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:24px}svg text{font:11px system-ui,sans-serif;fill:#1d2330}
.a{fill:#4c78a8}.b{fill:#f58518}.legend{font-size:12px;color:#5b6474}
"""


def _card(metric: str, value: object, label: str) -> str:
    value_html = f'<b data-metric="{metric}">{escape(str(value))}</b>'
    return f'<div class="card">{value_html}<span>{escape(label)}</span></div>'


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least `raw`: tick steps a reader can add up."""
    power = 1.0
    while power * 10 <= raw:
        power *= 10
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def _scatter(stopped: list[dict[str, Any]]) -> str:
    """First-stop call number, current (x) vs candidate (y); one-sided runs on the edges."""
    size, pad = 420, 46
    pts = stopped[:MAX_POINTS]
    calls: list[int] = [
        p[s]["first_stop_call"] for p in pts for s in ("current", "candidate") if p[s]
    ]
    top = float(max([10, *calls])) * 1.1
    never = top * 1.06  # "never stopped" lies just past the axis end

    def xy(v: float) -> float:
        return pad + (size - 2 * pad) * v / never

    def yy(v: float) -> float:
        return size - pad - (size - 2 * pad) * v / never

    # Runs with the same (current, candidate) first stop share one point, sized and labelled
    # by their count, so that a thousand identical runs are not one dot among the others.
    groups: dict[tuple[int | None, int | None], list[str]] = {}
    for p in pts:
        a: int | None = p["current"]["first_stop_call"] if p["current"] else None
        b: int | None = p["candidate"]["first_stop_call"] if p["candidate"] else None
        groups.setdefault((a, b), []).append(p["run_id"])
    marks = []
    for (a, b), run_ids in groups.items():
        shown = f"{a if a is not None else 'never'} → {b if b is not None else 'never'}"
        cx, cy = xy(never if a is None else a), yy(never if b is None else b)
        cls = "b" if b is not None and (a is None or b < a) else "a"
        n = len(run_ids)
        who = escape(run_ids[0]) if n == 1 else f"{n} runs, e.g. {escape(run_ids[0])}"
        marks.append(
            f'<circle class="{cls} point" cx="{cx:.1f}" cy="{cy:.1f}" r="{_radius(n):.1f}" '
            f'fill-opacity="0.7" data-run="{escape(run_ids[0])}" '
            f'data-current="{a if a is not None else ""}" '
            f'data-candidate="{b if b is not None else ""}" data-count="{n}">'
            f"<title>{who}: {shown}</title></circle>"
        )
        if n > 1:
            marks.append(
                f'<text x="{cx + 7:.1f}" y="{cy - 7:.1f}" data-count-label="{n}">×{n}</text>'
            )
    end = xy(top)
    ticks = []
    step = _nice_step(top / 6)
    for i in range(int(top // step) + 1):
        v = i * step
        ticks.append(
            f'<text x="{xy(v):.1f}" y="{size - pad + 16}" text-anchor="middle">{v:.0f}</text>'
            f'<text x="{pad - 6}" y="{yy(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>'
        )
    return (
        f'<svg id="scatter" width="{size}" height="{size}" viewBox="0 0 {size} {size}" '
        'role="img" aria-label="first stop, current vs candidate">'
        f'<rect x="{pad}" y="{pad}" width="{size - 2 * pad}" height="{size - 2 * pad}" '
        'fill="none" stroke="#c9ced6"/>'
        f'<line x1="{xy(0):.1f}" y1="{yy(0):.1f}" x2="{end:.1f}" y2="{yy(top):.1f}" '
        'stroke="#9aa3b0" stroke-dasharray="4 3"/>'
        + "".join(ticks)
        + "".join(marks)
        + f'<text x="{size / 2}" y="{size - 8}" text-anchor="middle">first stop, current '
        "(call number)</text>"
        f'<text x="14" y="{size / 2}" transform="rotate(-90 14 {size / 2})" '
        'text-anchor="middle">first stop, candidate</text>'
        f'<text x="{xy(never):.1f}" y="{pad - 8}" text-anchor="middle">never</text>'
        "</svg>"
    )


def _bars(by_detector: dict[str, dict[str, int]]) -> str:
    """Decisions per detector, current and candidate side by side."""
    rows = list(by_detector.items())
    width, left, bar_h = 460, 190, 12
    height = 30 + len(rows) * (2 * bar_h + 14)
    top = max([1, *(max(r["current"], r["candidate"]) for _, r in rows)])
    parts = []
    for i, (det, r) in enumerate(rows):
        y = 20 + i * (2 * bar_h + 14)
        parts.append(
            f'<text x="{left - 8}" y="{y + bar_h + 4}" text-anchor="end">{escape(det)}</text>'
        )
        for j, side in enumerate(("current", "candidate")):
            w = (width - left - 50) * r[side] / top
            cls = "a" if j == 0 else "b"
            parts.append(
                f'<rect class="{cls} bar" x="{left}" y="{y + j * bar_h}" width="{w:.1f}" '
                f'height="{bar_h - 2}" data-detector="{escape(det)}" data-side="{side}" '
                f'data-value="{r[side]}"/><text x="{left + w + 4:.1f}" '
                f'y="{y + j * bar_h + bar_h - 3}">{r[side]}</text>'
            )
    return (
        f'<svg id="bars" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="decisions per detector">{"".join(parts)}</svg>'
    )


def _radius(n: int) -> float:
    """A point's radius: its area grows with the runs it stands for."""
    return 4.0 + 2.0 * math.sqrt(n - 1)


def _delta(d: int | None) -> str:
    return "" if d is None else f"{d:+d}"


def _stop(side: dict[str, Any] | None) -> str:
    return "never" if side is None else str(side["first_stop_call"])


def _signed(n: int) -> str:
    return f"{n:+d}" if n else "0"


def _table(title: str, rows: dict[str, dict[str, int]], dim: str) -> str:
    body = "".join(
        f'<tr data-{dim}="{escape(k)}"><td>{escape(k)}</td><td class="n">{r["current"]}</td>'
        f'<td class="n">{r["candidate"]}</td><td class="n">{_signed(r["gained"])}</td>'
        f'<td class="n">{r["lost"]}</td></tr>'
        for k, r in rows.items()
    )
    return (
        f"<h2>{escape(title)}</h2><table><tr><th>{escape(dim)}</th><th>current</th>"
        f"<th>candidate</th><th>gained</th><th>lost</th></tr>{body}</table>"
    )


def render_html(report: CompareReport) -> str:
    """The whole report page."""
    j = report.to_json()
    stop, saved, hit = j["runs_stopped"], j["saved_calls"], j["healthy_runs_newly_hit"]
    cur, cand = (escape(n) for n in report.policy_names)
    cards = "".join(
        [
            _card("events", j["events"], "events replayed"),
            _card("runs", j["runs"], "runs"),
            _card("stopped-current", stop["current"], "runs stopped, current"),
            _card("stopped-candidate", stop["candidate"], "runs stopped, candidate"),
            _card("earlier", stop["earlier"], "runs stopped earlier"),
            _card("calls-earlier", stop["calls_earlier_total"], "calls earlier, in all"),
            _card("later", stop["later"], "runs stopped later"),
            _card("saved-difference", f"{saved['difference']:+d}", "calls saved vs current"),
            _card("healthy-hit", hit["warned"] + hit["stopped"], "healthy runs newly hit"),
        ]
    )
    moved = moved_runs(j["stopped_runs"])
    listed = moved[:MAX_LISTED_RUNS]
    run_rows = "".join(
        f"<tr><td>{escape(r['run_id'])}</td><td>{escape(str(r['agent_id']))}</td>"
        f'<td class="n">{_stop(r["current"])}</td><td class="n">{_stop(r["candidate"])}</td>'
        f'<td class="n">{_delta(r["delta_calls"])}</td>'
        f"<td>{escape((r['candidate'] or r['current'])['detector'])}</td></tr>"
        for r in listed
    )
    count = f"{len(listed)} of {len(moved)}" if len(listed) < len(moved) else f"{len(moved)}"
    shadow = shadow_note(j)
    if shadow is not None:  # a shadow topic's candidate: its version, not its thresholds
        thresholds = f'<h2>Candidate</h2><p data-metric="candidate-topic">{escape(shadow)}</p>'
    else:
        changes = threshold_changes(j["thresholds"])
        threshold_rows = "".join(
            f"<tr><td>{escape(path)}</td><td>{escape(repr(a))}</td><td>{escape(repr(b))}</td></tr>"
            for path, a, b in changes
        )
        thresholds = (
            f'<h2>Thresholds changed (<span data-metric="thresholds-changed">{len(changes)}'
            "</span>)</h2><table><tr><th>setting</th><th>current</th><th>candidate</th></tr>"
            f"{threshold_rows}</table>"
        )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>LoopGuard compare: {cand} vs {cur}</title><style>{_CSS}</style></head><body>"
        f'<h1>What-if: {cand}</h1><p class="sub">against the current policy {cur} · '
        f"{j['events']} events, {j['runs']} runs, {j['rejected']} rejected lines</p>"
        f'<div class="cards">{cards}</div>'
        '<h2>First stop per run, and decisions per detector</h2><div class="plots">'
        f"{_scatter(j['stopped_runs'])}{_bars(j['by_detector'])}</div>"
        '<p class="legend"><svg width="10" height="10"><rect class="a" width="10" height="10"/>'
        '</svg> current &nbsp; <svg width="10" height="10"><rect class="b" width="10" '
        'height="10"/></svg> candidate (in the scatter: stopped earlier by the candidate). '
        "Points below the diagonal stop earlier with the candidate; "
        "on the edge, never stopped by one of the two.</p>"
        + _table("By detector", j["by_detector"], "detector")
        + _table("By agent", j["by_agent"], "agent")
        + _table("By tool", j["by_tool"], "tool")
        + thresholds
        + f'<h2>Runs whose first stop moves (<span data-metric="moved-runs">{count}</span>'
        "; every run in <code>--format json</code>)</h2><table><tr><th>run</th><th>agent</th>"
        "<th>current</th><th>candidate</th><th>calls</th><th>detector</th></tr>"
        f"{run_rows}</table></body></html>\n"
    )
