"""A self-contained offline HTML report of a paths file (and of its diff against a base run).

One file, no network: inline CSS, a few lines of inline JavaScript for sorting the
table, and every picture as inline SVG drawn by graphviz's ``dot``. Every name that
came from a trace is HTML-escaped, so a node called ``<script>`` shows as text.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infer.calibration import rough_note
from tracefmt import write_atomic
from tracefmt.pathsfile import check_paths
from viz.diff import PathsDiff, diff_convolution, diff_dot, diff_paths, format_change
from viz.dot import convolution_dot, format_s, pattern_dot
from viz.paths import collapse_replicas, select_patterns, shape_of
from viz.render import render_dot

__all__ = ["build_report", "inline_svg", "reliability_svg", "write_report"]

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th[data-col] { cursor: pointer; user-select: none; background: #f4f4f4; }
th[data-col]:hover { background: #e6eefc; }
th.sorted-asc::after { content: " \\25B2"; } th.sorted-desc::after { content: " \\25BC"; }
code { font-size: 12px; } .shape { max-width: 420px; word-break: break-all; }
.sentence { font-size: 18px; font-weight: 600; color: #b00; margin: 12px 0; }
.svg { overflow-x: auto; border: 1px solid #eee; padding: 6px; margin: 8px 0; }
.svg svg { max-width: 100%; height: auto; }
#diff-graph svg { max-width: none; }
.muted { color: #777; }
.note { color: #a50; font-weight: 600; }
"""

_JS = """
(function () {
  function cellValue(row, col, numeric) {
    var cell = row.cells[col];
    var raw = cell.getAttribute("data-sort");
    if (raw === null) { raw = cell.textContent; }
    return numeric ? parseFloat(raw) : raw.toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var heads = table.querySelectorAll("th[data-col]");
    heads.forEach(function (th) {
      th.addEventListener("click", function () {
        var col = parseInt(th.getAttribute("data-col"), 10);
        var numeric = th.getAttribute("data-type") === "num";
        var desc = !th.classList.contains("sorted-desc");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a, col, numeric), y = cellValue(b, col, numeric);
          var c = x < y ? -1 : (x > y ? 1 : 0);
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        heads.forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
        th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      });
    });
  });
})();
"""

_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.S)


def inline_svg(svg: bytes | str) -> str:
    """An SVG document as an element to paste into HTML (XML prolog and doctype dropped).

    Examples
    --------
    >>> inline_svg('<?xml version="1.0"?>\\n<!DOCTYPE svg>\\n<svg width="1"></svg>\\n')
    '<svg width="1"></svg>'
    """
    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    return _PROLOG.sub("", text, count=1).strip()


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _kv_table(rows: Sequence[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _summary(doc: dict[str, Any], label: str) -> str:
    trace, stats = doc.get("trace") or {}, doc.get("stats") or {}
    rows: list[tuple[str, Any]] = [
        ("algorithm", doc.get("algorithm")),
        ("messages", f"{int(trace.get('messages') or 0):,}"),
        ("start", trace.get("start")),
        ("end", trace.get("end")),
    ]
    for key in (
        "call_pairs",
        "unmatched_calls",
        "unmatched_returns",
        "sends_ignored",
        "instances",
        "patterns",
    ):
        if stats.get(key) is not None:
            rows.append((key.replace("_", " "), f"{int(stats[key]):,}"))
    if stats.get("mean_parallelism") is not None:
        rows.append(("mean parallelism", f"{float(stats['mean_parallelism']):.2f}"))
    rough = rough_note(doc) if doc.get("algorithm") == "nesting" else None
    note = f'<p class="note">Note: {_e(rough)}.</p>' if rough else ""
    return f"<h3>{_e(label)}</h3>{_kv_table(rows)}{note}"


def _num(value: float, text: str) -> str:
    return f'<td class="num" data-sort="{float(value)!r}">{_e(text)}</td>'


def _pattern_table(patterns: list[dict[str, Any]], whole: float) -> str:
    confident = any("confidence" in p for p in patterns)
    heads = [
        ("#", "num"),
        ("pattern", "text"),
        ("shape", "text"),
        ("count", "num"),
        *([("est. exactly right", "num")] if confident else []),
        ("total latency", "num"),
        ("share", "num"),
        ("mean", "num"),
        ("p99", "num"),
    ]
    th = "".join(
        f'<th data-col="{k}" data-type="{t}"' + (' class="num"' if t == "num" else "") + f">{_e(h)}</th>"
        for k, (h, t) in enumerate(heads)
    )
    rows = []
    for rank, p in enumerate(patterns, 1):
        lat = p["root"].get("latency_s") or {}
        total = float(p["total_latency_s"])
        share = total / whole if whole > 0 else 0.0
        rows.append(
            "<tr>"
            + _num(rank, str(rank))
            + f'<td><a href="#pattern-{_e(p["id"])}"><code>{_e(p["id"])}</code></a></td>'
            + f'<td class="shape"><code>{_e(shape_of(p))}</code></td>'
            + _num(int(p["count"]), f"{int(p['count']):,}")
            + (_confidence_cell(p.get("confidence")) if confident else "")
            + _num(total, f"{total:,.3f} s")
            + _num(share, f"{share:.1%}")
            + _num(float(lat.get("mean", 0.0)), format_s(lat.get("mean")))
            + _num(float(lat.get("p99", 0.0)), format_s(lat.get("p99")))
            + "</tr>"
        )
    return (
        f'<table class="sortable" id="patterns"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _confidence_cell(confidence: float | None) -> str:
    """The share of a pattern's instances inferred exactly right, as stated."""
    if confidence is None:
        return '<td class="num" data-sort="-1">–</td>'
    return _num(float(confidence), f"{confidence:.1%}")


def reliability_svg(calls: dict[str, Any], size: int = 320) -> str:
    """A reliability diagram as inline SVG: per bin of stated confidence, the share of
    calls actually right (a dot, its area by the calls in the bin) against the diagonal
    of perfect calibration. ``calls`` is ``infer.reliability``'s result.

    Examples
    --------
    >>> svg = reliability_svg({"bins": [{"low": 0.9, "high": 1.0, "calls": 10, "stated": 0.95,
    ...     "right_rate": 0.9}], "ece": 0.05})
    >>> svg.startswith("<svg") and svg.count("<circle") == 1
    True
    """
    pad, inner = 40, size - 60
    most = max((b["calls"] for b in calls["bins"]), default=1)

    def x(v: float) -> float:
        return pad + v * inner

    def y(v: float) -> float:
        return 20 + (1.0 - v) * inner

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
        f'viewBox="0 0 {size} {size}" font-size="11" font-family="sans-serif">',
        f'<rect x="{x(0)}" y="{y(1)}" width="{inner}" height="{inner}" fill="none" stroke="#999"/>',
        f'<line x1="{x(0)}" y1="{y(0)}" x2="{x(1)}" y2="{y(1)}" stroke="#bbb" stroke-dasharray="4 3"/>',
    ]
    for t in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{x(t)}" y="{y(0) + 14}" text-anchor="middle">{t:g}</text>')
        parts.append(f'<text x="{x(0) - 6}" y="{y(t) + 4}" text-anchor="end">{t:g}</text>')
    parts.append(f'<text x="{x(0.5)}" y="{size - 4}" text-anchor="middle">stated confidence</text>')
    parts.append(
        f'<text transform="translate(11 {y(0.5)}) rotate(-90)" text-anchor="middle">share right</text>'
    )
    for b in calls["bins"]:
        r = 2.0 + 8.0 * (b["calls"] / most) ** 0.5
        parts.append(
            f'<circle cx="{x(b["stated"]):.1f}" cy="{y(b["right_rate"]):.1f}" r="{r:.1f}" fill="#3465a4" '
            f'fill-opacity="0.75"><title>{b["low"]:.1f}-{b["high"]:.1f}: {b["calls"]:,} calls, stated '
            f"{b['stated']:.3f}, right {b['right_rate']:.3f}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _reliability_section(scores: dict[str, Any]) -> str:
    """The report's section on how stated confidence compares with the truth."""
    calls, inst = scores["calls"], scores["instances"]
    if not calls["calls"]:
        return ""
    sure = calls["stated_99"]
    sure_text = (
        f"{sure['calls']:,} calls stated at 0.99 or more were right {sure['right_rate']:.1%} of the time."
        if sure["calls"]
        else "No call was stated at 0.99 or more."
    )
    rows = []
    for b in calls["bins"]:
        rows.append(
            f"<tr><td>{b['low']:.1f}–{b['high']:.1f}</td>"
            + _num(b["calls"], f"{b['calls']:,}")
            + _num(b["stated"], f"{b['stated']:.3f}")
            + _num(b["right_rate"], f"{b['right_rate']:.3f}")
            + "</tr>"
        )
    return (
        '<h2 id="confidence">Confidence against the truth</h2>'
        f"<p>Calls given a parent: expected calibration error {calls['ece']:.3f} (mean stated "
        f"{calls['mean_stated']:.3f}, share right {calls['right_rate']:.3f}). {sure_text} Instances: "
        f"error {inst['ece']:.3f} (stated {inst['mean_stated']:.3f}, exactly right "
        f"{inst['right_rate']:.3f}).</p>"
        f'<div class="svg" id="reliability-diagram">{reliability_svg(calls)}</div>'
        '<table id="reliability"><thead><tr><th>stated</th><th class="num">calls</th>'
        '<th class="num">mean stated</th><th class="num">share right</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _convolution_changes(changes: list[dict[str, Any]], top: int) -> str:
    rows = "".join(
        "<tr>"
        + _num(c["change_s"], format_change(c["change_s"]))
        + f"<td>{_e(c['label'])}</td>"
        + _num(c["base_s"], format_s(c["base_s"]))
        + _num(c["slow_s"], format_s(c["slow_s"]))
        + _num(c["messages"], f"{c['messages']:,}")
        + "</tr>"
        for c in changes[:top]
    )
    return (
        '<h2 id="diff">Against the base run</h2><p class="muted">The most frequent delay at the middle '
        "node of each hop pair, in paths found in both runs; biggest change x messages first.</p>"
        '<table class="sortable" id="changes"><thead><tr>'
        '<th data-col="0" data-type="num" class="num">change</th><th data-col="1" data-type="text">hops</th>'
        '<th data-col="2" data-type="num" class="num">base</th><th data-col="3" data-type="num" class="num">'
        'this run</th><th data-col="4" data-type="num" class="num">messages</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def _diff_section(diff: PathsDiff, render: Callable[[str, str], bytes], top: int) -> str:
    rows = "".join(
        "<tr>"
        + _num(c["change_s"], format_change(c["change_s"]))
        + f"<td>{_e(c['label'])}</td>"
        + _num(c["requests"], f"{c['requests']:,}")
        + _num(c["patterns"], str(c["patterns"]))
        + f"<td>{_e(c['where'])}</td></tr>"
        for c in diff.changes[:top]
    )
    table = (
        '<table class="sortable" id="changes"><thead><tr>'
        '<th data-col="0" data-type="num" class="num">change</th><th data-col="1" data-type="text">where</th>'
        '<th data-col="2" data-type="num" class="num">requests</th>'
        '<th data-col="3" data-type="num" class="num">patterns</th><th>in words</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )
    svg = inline_svg(render(diff_dot(diff), "svg"))
    counts = (
        f"{len(diff.patterns):,} patterns in both runs, {len(diff.new):,} only in this run, "
        f"{len(diff.gone):,} only in the base run"
    )
    return (
        f'<h2 id="diff">Against the base run</h2><p class="sentence">{_e(diff.sentence())}</p>'
        f'<p class="muted">{_e(counts)}. Each change is pooled over all patterns where that step '
        f"occurs, weighted by the patterns' counts in this run.</p>{table}"
        f'<div class="svg" id="diff-graph">{svg}</div>'
    )


def build_report(
    doc: dict[str, Any],
    *,
    base: dict[str, Any] | None = None,
    top: int = 10,
    sort: str = "total",
    min_share: float = 0.0,
    collapse: Sequence[str] = (),
    title: str = "wirepath report",
    render: Callable[[str, str], bytes] = render_dot,
    evaluation: dict[str, Any] | None = None,
    instances: tuple[Any, Any] | None = None,
) -> str:
    """The HTML text of a report on paths file ``doc`` (optionally diffed against ``base``).

    Parameters
    ----------
    doc : dict
        A paths file (nesting or convolution).
    base : dict, optional
        The base run's paths file: adds the diff (sentence, top changes, diff graph).
    top, sort, min_share, collapse
        Which patterns to list and draw (``viz.paths.select_patterns``, replicas merged
        by ``collapse`` globs).
    title : str
        The page title.
    render : callable
        ``render(dot_text, "svg") -> bytes``; graphviz's ``dot`` by default.
    evaluation : dict, optional
        ``infer.evaluate_paths``' report of ``doc`` against the truth, with instances:
        adds how the stated confidence compares with it (a reliability diagram).
    instances : (pyarrow.Table, pyarrow.Table), optional
        The base and this run's instances tables: the diff counts the requests that
        changed from every request's latency (``viz.diff.diff_paths``).

    Examples
    --------
    >>> doc = {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []}
    >>> page = build_report(doc, render=lambda text, fmt: b"<svg></svg>")
    >>> page.startswith("<!DOCTYPE html>") and "</html>" in page
    True
    """
    check_paths(doc, "report")
    diff, conv_changes = _against_base(doc, base, collapse, instances)
    parts = [f"<h1>{_e(title)}</h1>"]
    if diff is not None:
        parts.append(f'<p class="sentence">{_e(diff.sentence())}</p>')
    parts.append('<h2 id="summary">Trace</h2>')
    parts.append(_summary(doc, "this run"))
    if base is not None:
        parts.append(_summary(base, "base run"))
    if doc["algorithm"] == "nesting":
        shown = collapse_replicas(doc, collapse)
        chosen = select_patterns(shown, top=top, sort=sort, min_share=min_share)
        parts += _nesting_sections(shown, chosen, diff, evaluation, render, top)
    else:
        parts += _convolution_sections(doc, conv_changes, render, top)
    parts.append(_params_section(doc, top, sort, min_share, collapse))
    return _page(title, "\n".join(parts))


def _against_base(
    doc: dict[str, Any],
    base: dict[str, Any] | None,
    collapse: Sequence[str],
    instances: tuple[Any, Any] | None = None,
) -> tuple[PathsDiff | None, list[dict[str, Any]] | None]:
    """The comparison with the base run: a nesting run's diff, or a convolution run's
    delay changes (None for the other, and for both without a base run)."""
    if base is None:
        return None, None
    check_paths(base, "base")
    if doc["algorithm"] == "nesting":
        return diff_paths(base, doc, collapse=collapse, instances=instances), None
    return None, diff_convolution(base, doc, collapse=collapse)


def _nesting_sections(
    shown: dict[str, Any],
    chosen: list[dict[str, Any]],
    diff: PathsDiff | None,
    evaluation: dict[str, Any] | None,
    render: Callable[[str, str], bytes],
    top: int,
) -> list[str]:
    """A nesting run's sections: the top patterns' table, confidence against the truth,
    the diff, and each chosen pattern's graph."""
    whole = sum(float(p["total_latency_s"]) for p in shown["patterns"])
    parts = [
        f'<h2 id="top">Top patterns</h2><p class="muted">{len(chosen)} of {len(shown["patterns"]):,} '
        "patterns; click a column to sort. Latencies are of the whole request (the root visit).</p>",
        _pattern_table(chosen, whole),
    ]
    if evaluation is not None and evaluation.get("confidence"):
        parts.append(_reliability_section(evaluation["confidence"]))
    if diff is not None:
        parts.append(_diff_section(diff, render, top))
    parts.append('<h2 id="graphs">Patterns</h2>')
    parts.append(
        '<p class="muted">Boxes: count, mean latency (self plus calls below), p99, and the time the node '
        "spends itself, shaded by its share of the request; the thick red box holds the largest "
        "share. Edges: mean delay from the parent's call.</p>"
    )
    for rank, p in enumerate(chosen, 1):
        svg = inline_svg(render(pattern_dot(p, rank=rank), "svg"))
        parts.append(
            f'<h3 id="pattern-{_e(p["id"])}">#{rank} <code>{_e(p["id"])}</code></h3>'
            f'<div class="svg">{svg}</div>'
        )
    return parts


def _convolution_sections(
    doc: dict[str, Any],
    changes: list[dict[str, Any]] | None,
    render: Callable[[str, str], bytes],
    top: int,
) -> list[str]:
    """A convolution run's sections: its top paths as a table and a graph, and the
    delays' changes against the base run (``changes``; None without a base run)."""
    rows = "".join(
        f"<tr>{_num(k, str(k))}<td>{_e(' -> '.join(p['nodes']))}</td>"
        + _num(float(p["counts"][0]), f"{round(p['counts'][0]):,}")
        + "</tr>"
        for k, p in enumerate(doc["paths"][:top], 1)
    )
    parts = [
        '<h2 id="top">Paths</h2><table class="sortable" id="patterns"><thead><tr>'
        '<th data-col="0" data-type="num" class="num">#</th><th data-col="1" data-type="text">path</th>'
        '<th data-col="2" data-type="num" class="num">messages (first hop)</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>",
        f'<div class="svg">{inline_svg(render(convolution_dot(doc, top=top), "svg"))}</div>',
    ]
    if changes is not None:
        parts.append(_convolution_changes(changes, top))
    return parts


def _params_section(
    doc: dict[str, Any], top: int, sort: str, min_share: float, collapse: Sequence[str]
) -> str:
    """The inference's parameters and this report's."""
    params = [(k, json.dumps(v)) for k, v in sorted((doc.get("params") or {}).items())]
    view = [("top", top), ("sort", sort), ("min_share", min_share), ("collapse", ", ".join(collapse) or "-")]
    return (
        '<h2 id="params">Parameters</h2>\n'
        + "<h3>inference</h3>"
        + _kv_table(params)
        + "<h3>this report</h3>"
        + _kv_table(view)
    )


def _page(title: str, body: str) -> str:
    """The whole HTML document around ``body``: head, style and the sorting script."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n<body>\n{body}\n"
        f"<script>{_JS}</script>\n</body></html>\n"
    )


def write_report(page: str, path: str | os.PathLike[str]) -> Path:
    """Write a report's HTML text to ``path`` whole (never half a page); returns the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> write_report("<!DOCTYPE html>", pathlib.Path(tempfile.mkdtemp()) / "r.html").read_text()
    '<!DOCTYPE html>'
    """
    return write_atomic(path, page)
