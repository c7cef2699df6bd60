"""The static HTML dashboard: per-testbed tables and one interactive graph per test.

``OUT/index.html`` holds, per testbed and core count (read from the test name), a table
of the tests (trend value, short- and long-term change, regressions, progressions, runs
in the last group; test names link to their graphs), and per testbed the failed tests of
the last 7 days. ``OUT/graphs/*.html`` are plotly
trendline graphs: run averages, the trend (each group's average), red circles for
regressions, green for progressions, grey for outliers (``tmm``), hover labels with date,
value, build and testbed. Everything is local: plotly.js is written once next to the
graphs, so the site works offline.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from tracefmt import make_dirs, write_atomic
from trend.analysis import SeriesTrend
from trend.series import Series

__all__ = ["DashboardReport", "graph_figure", "write_dashboard"]

DAY_NS = 86_400 * 1_000_000_000
_SCALES = {"pps": (1e6, "Mpps"), "bps": (1e9, "Gbps"), "s": (1e-3, "ms")}


@dataclass(frozen=True)
class DashboardReport:
    """Where the dashboard went."""

    index: Path
    graphs: tuple[Path, ...]


def _slug(t: SeriesTrend) -> str:
    s = t.series
    digest = hashlib.blake2b(f"{s.test}\0{s.testbed}".encode(), digest_size=4).hexdigest()
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', s.test)[:60]}-{digest}"


def _scale(t: SeriesTrend) -> tuple[float, str]:
    unit = t.series.unit
    if unit in _SCALES:
        div, label = _SCALES[unit]
        if unit == "s" or np.nanmax(np.abs(t.values), initial=0.0) >= div:
            return div, label
    return 1.0, unit


def _dates(times_ns: np.ndarray) -> list[datetime]:
    return [datetime.fromtimestamp(int(x) / 1e9, UTC) for x in times_ns]


def _hover_texts(s: Series, x: np.ndarray, y: np.ndarray, label: str) -> np.ndarray:
    """The hover label of every run: date, value, build and testbed."""
    hover = [
        f"date: {d:%Y-%m-%d %H:%M} UTC<br>value: {v:.6g} {label}<br>build: {b}<br>testbed: {s.testbed}"
        for d, v, b in zip(x, y, s.builds, strict=True)
    ]
    return np.array(hover, dtype=object)


def _mark_traces(marks: np.ndarray, x: np.ndarray, y: np.ndarray, hover: np.ndarray) -> list[go.Scatter]:
    """Open circles around the marked runs: red regressions, green progressions, grey outliers."""
    traces = []
    for mark, color in (("regression", "red"), ("progression", "green"), ("outlier", "grey")):
        sel = marks == mark
        if sel.any():
            traces.append(
                go.Scatter(
                    x=x[sel],
                    y=y[sel],
                    mode="markers",
                    name=f"{mark}s",
                    text=hover[sel],
                    hoverinfo="text",
                    marker={"symbol": "circle-open", "size": 16, "color": color, "line": {"width": 2}},
                )
            )
    return traces


def graph_figure(t: SeriesTrend) -> go.Figure:
    """The trendline graph of one series.

    Examples
    --------
    >>> from trend.series import Series
    >>> from trend.analysis import analyze_series
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1", "b2"), np.array([0, 86_400 * 10**9]),
    ...            (np.array([10e6]), np.array([9e6])))
    >>> [tr.name for tr in graph_figure(analyze_series(s)).data]
    ['runs', 'trend', 'regressions']
    """
    s = t.series
    div, label = _scale(t)
    ok = ~np.isnan(t.values)
    x = np.array(_dates(s.times_ns), dtype=object)
    y = t.values / div
    hover = _hover_texts(s, x, y, label)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=x[ok],
            y=y[ok],
            mode="markers",
            name="runs",
            text=hover[ok],
            hoverinfo="text",
            marker={"color": "#1f77b4", "size": 6},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=x[ok],
            y=(t.trend / div)[ok],
            mode="lines",
            name="trend",
            line={"shape": "hv", "color": "#444"},
            hoverinfo="skip",
        )
    )
    for trace in _mark_traces(t.marks, x, y, hover):
        fig.add_trace(trace)
    fig.update_layout(
        title=f"{s.test} ({s.testbed}), {t.method}",
        xaxis_title="run date",
        yaxis_title=f"{s.test} [{label}]" if label else s.test,
        hovermode="closest",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return fig


def _change_cell(x: float | None, direction: str) -> str:
    """A change as a table cell, green when it goes the better way (up for throughput)."""
    if x is None:
        return '<td class="num">n/a</td>'
    better = x > 0 if direction == "bigger-is-better" else x < 0
    cls = "" if x == 0 else "good" if better else "bad"
    return f'<td class="num {cls}">{x * 100:+.2f} %</td>'


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 4px 8px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.bad { color: #b00; } td.good { color: #070; }
tr.regressed td:first-child { border-left: 4px solid #b00; }
"""


_THREADS_CORES = re.compile(r"(?:^|[-_.])\d+t([1-9]\d*)c(?=$|[-_.])")
_CORES = re.compile(r"(?:^|[-_.])([1-9]\d*)c(?=$|[-_.])")
_FRAME_SIZE = re.compile(r"(?:^|[-_.])(?:\d+b|imix)(?=$|[-_.])")


def core_count(test: str) -> int | None:
    """The core count in a CSIT-style test name (``64b-2t1c-ethip4-ip4base-mrr``: 1,
    ``ip4base-64b-2c``: 2), or None when the name has none. A bare ``Nc`` counts only
    beside a frame size (``64b``, ``imix``): elsewhere it is as likely a client or
    connection count (``nginx-wrk-4t-100c-rps``).

    Examples
    --------
    >>> core_count("64b-2t1c-ethip4-mrr"), core_count("l2bdbase-64b-2c"), core_count("memtier-50c-get")
    (1, 2, None)
    """
    m = _THREADS_CORES.search(test)
    if m is None and _FRAME_SIZE.search(test):
        m = _CORES.search(test)
    return int(m.group(1)) if m else None


def _core_heading(cores: int | None) -> str:
    if cores is None:
        return "No core count in the test name"
    return f"{cores} core" + ("" if cores == 1 else "s")


def _testbed_table(trends: list[SeriesTrend], links: dict[int, str]) -> list[str]:
    out = [
        '<table class="trend"><thead><tr><th>test</th><th>trend</th><th>short-term change</th>'
        "<th>long-term change</th><th>regressions</th><th>progressions</th><th>runs in last group</th>"
        "</tr></thead><tbody>"
    ]
    for t in trends:
        s = t.series
        div, label = _scale(t)
        last = "n/a" if t.last_trend is None else f"{t.last_trend / div:.6g} {html.escape(label)}"
        short, long = _change_cell(t.short_change, s.direction), _change_cell(t.long_change, s.direction)
        out.append(
            f'<tr class="{"regressed" if t.regressed else ""}">'
            f'<td><a href="{links[id(t)]}">{html.escape(s.test)}</a></td>'
            f'<td class="num">{last}</td>{short}{long}'
            f'<td class="num">{t.regressions}</td><td class="num">{t.progressions}</td>'
            f'<td class="num">{t.runs_in_last_group}</td></tr>'
        )
    out.append("</tbody></table>")
    return out


def _failed_table(trends: list[SeriesTrend], now_ns: int) -> list[str]:
    rows = []
    for t in trends:
        s = t.series
        recent = (s.times_ns >= now_ns - 7 * DAY_NS) & s.failed
        if recent.any():
            k = np.flatnonzero(recent)
            last = datetime.fromtimestamp(int(s.times_ns[k[-1]]) / 1e9, UTC)
            builds = ", ".join(html.escape(s.builds[j]) for j in k)
            rows.append(
                f'<tr><td>{html.escape(s.test)}</td><td class="num">{k.size}</td>'
                f"<td>{last:%Y-%m-%d %H:%M}</td><td>{builds}</td></tr>"
            )
    if not rows:
        return ['<p class="failed-none">No failed runs in the last 7 days.</p>']
    return [
        '<table class="failed"><thead><tr><th>test</th><th>failures</th><th>last failure (UTC)</th>'
        "<th>builds</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
    ]


def write_dashboard(trends: Sequence[SeriesTrend], out: str | os.PathLike[str]) -> DashboardReport:
    """Write ``out/index.html`` and ``out/graphs/*.html`` for these analysed series.

    "The last 7 days" end at the newest run of all series, so an old store still shows its
    last week.

    Examples
    --------
    >>> import tempfile
    >>> from trend.series import Series
    >>> from trend.analysis import analyze_series
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1",), np.array([0]), (np.array([10e6]),))
    >>> report = write_dashboard([analyze_series(s)], tempfile.mkdtemp())
    >>> report.index.name, len(report.graphs)
    ('index.html', 1)
    """
    root = Path(out)
    graphs_dir = root / "graphs"
    make_dirs(graphs_dir)
    trends = list(trends)
    links: dict[int, str] = {}
    graphs = []
    if trends and not (graphs_dir / "plotly.min.js").exists():
        # plotly.js is written once as graphs/plotly.min.js and referenced: offline, and small.
        write_atomic(graphs_dir / "plotly.min.js", get_plotlyjs())
    for t in trends:
        path = graphs_dir / f"{_slug(t)}.html"
        write_atomic(path, graph_figure(t).to_html(include_plotlyjs="directory", full_html=True))
        links[id(t)] = f"graphs/{path.name}"
        graphs.append(path)
    now_ns = max((int(t.series.times_ns.max()) for t in trends if t.series.runs), default=0)
    testbeds = sorted({t.series.testbed for t in trends})
    methods = ", ".join(sorted({t.method for t in trends})) or "-"
    regressed = sum(t.regressed for t in trends)
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>wirepath performance trends</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Performance trends</h1>",
        f'<p class="summary">{len(trends)} series on {len(testbeds)} testbeds, method {methods}; '
        f"{regressed} in a regression at their newest run. Newest run: "
        f"{datetime.fromtimestamp(now_ns / 1e9, UTC):%Y-%m-%d %H:%M} UTC.</p>",
    ]
    for tb in testbeds:
        mine = [t for t in trends if t.series.testbed == tb]
        body.append(f'<h2 id="testbed-{html.escape(tb)}">Testbed {html.escape(tb)}</h2>')
        # One table per core count, as CSIT's dashboard has them (unknown counts last).
        by_cores: dict[int | None, list[SeriesTrend]] = {}
        for t in mine:
            by_cores.setdefault(core_count(t.series.test), []).append(t)
        for cores in sorted(by_cores, key=lambda c: (c is None, c or 0)):
            body.append(f'<h3 class="cores">{html.escape(_core_heading(cores))}</h3>')
            body += _testbed_table(by_cores[cores], links)
        body.append(f"<h3>Failed tests, last 7 days ({html.escape(tb)})</h3>")
        body += _failed_table(mine, now_ns)
    body.append("</body></html>")
    index = root / "index.html"
    write_atomic(index, "\n".join(body))
    return DashboardReport(index, tuple(graphs))
