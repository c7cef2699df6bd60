"""The static HTML dashboard, sized for a lab: one index of every series, graphs on demand.

``OUT/index.html`` loads ``OUT/data/index.js`` (one row per series: test, testbed, core
count read from the test name, trend value, short- and long-term change, regressions,
progressions, runs in the last group, the date of the last change and a sparkline of the
recent runs) and shows it as one table, regressions first, sortable by any column and
filtered by name, testbed, core count or regression, a page at a time; below it, per
testbed, the failed tests of the last 7 days. ``OUT/graph.html#SHARD/SLUG`` draws one
series' plotly trendline graph (run averages, the trend as each group's average, red
circles for regressions, green for progressions, grey for outliers (``tmm``), hover labels
with date, value, build and testbed) from ``OUT/data/series-SHARD.js``, which holds the
figures of a hundred series: a page loads what it shows, and ten thousand series are a
hundred files, not ten thousand. Everything is local (plotly.js is written once beside
the pages, data files are scripts, not fetched), so the site works offline, from
``file://`` too.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracefmt import make_dirs, write_atomic
from trend.analysis import SeriesTrend
from trend.series import Series

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["SHARD_SERIES", "DashboardReport", "figure_data", "graph_figure", "write_dashboard"]

DAY_NS = 86_400 * 1_000_000_000
_SCALES = {"pps": (1e6, "Mpps"), "bps": (1e9, "Gbps"), "s": (1e-3, "ms")}
#: Series whose figures share one data file: a graph loads one file of this many.
SHARD_SERIES = 100
#: Points of a series' sparkline in the index (its newest valid runs).
SPARK_POINTS = 40


@dataclass(frozen=True)
class DashboardReport:
    """Where the dashboard went: the index, the graph page, the data files it reads."""

    index: Path
    graph: Path
    data: tuple[Path, ...]
    series: int


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


def _dates(times_ns: np.ndarray) -> list[str]:
    """Run dates as plotly reads them (UTC, to the second)."""
    text = np.datetime_as_string(np.asarray(times_ns, np.int64).astype("datetime64[ns]"), unit="s")
    return [t.replace("T", " ") for t in text.tolist()]


def _hover_texts(s: Series, dates: list[str], y: np.ndarray, label: str) -> list[str]:
    """The hover label of every run: date, value, build and testbed."""
    testbed, label = html.escape(s.testbed), html.escape(label)
    return [
        f"date: {d[:16]} UTC<br>value: {v:.6g} {label}<br>build: {html.escape(b)}<br>testbed: {testbed}"
        for d, v, b in zip(dates, y.tolist(), s.builds, strict=True)
    ]


def figure_data(t: SeriesTrend) -> dict[str, Any]:
    """The trendline graph of one series as plotly's figure document (``data``, ``layout``):
    what :func:`graph_figure` draws and ``graph.html`` plots.

    Examples
    --------
    >>> from trend.series import Series
    >>> from trend.analysis import analyze_series
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1", "b2"), np.array([0, 86_400 * 10**9]),
    ...            (np.array([10e6]), np.array([9e6])))
    >>> [tr["name"] for tr in figure_data(analyze_series(s))["data"]]
    ['runs', 'trend', 'regressions']
    """
    s = t.series
    div, label = _scale(t)
    ok = np.flatnonzero(~np.isnan(t.values))
    dates = _dates(s.times_ns)
    y = t.values / div
    hover = _hover_texts(s, dates, y, label)

    def runs(idx: np.ndarray) -> tuple[list[str], list[float], list[str]]:
        return [dates[i] for i in idx.tolist()], y[idx].tolist(), [hover[i] for i in idx.tolist()]

    x_ok, y_ok, text_ok = runs(ok)
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "x": x_ok,
            "y": y_ok,
            "mode": "markers",
            "name": "runs",
            "text": text_ok,
            "hoverinfo": "text",
            "marker": {"color": "#1f77b4", "size": 6},
        },
        {
            "type": "scatter",
            "x": x_ok,
            "y": (t.trend / div)[ok].tolist(),  # runs that did not fail: no NaN
            "mode": "lines",
            "name": "trend",
            "line": {"shape": "hv", "color": "#444"},
            "hoverinfo": "skip",
        },
    ]
    # Open circles around the marked runs: red regressions, green progressions, grey outliers.
    for mark, color in (("regression", "red"), ("progression", "green"), ("outlier", "grey")):
        sel = np.flatnonzero(t.marks == mark)
        if sel.size:
            x_m, y_m, text_m = runs(sel)
            data.append(
                {
                    "type": "scatter",
                    "x": x_m,
                    "y": y_m,
                    "mode": "markers",
                    "name": f"{mark}s",
                    "text": text_m,
                    "hoverinfo": "text",
                    "marker": {"symbol": "circle-open", "size": 16, "color": color, "line": {"width": 2}},
                }
            )
    layout = {
        "title": {"text": f"{html.escape(s.test)} ({html.escape(s.testbed)}), {t.method}"},
        "xaxis": {"title": {"text": "run date"}},
        "yaxis": {
            "title": {
                "text": f"{html.escape(s.test)} [{html.escape(label)}]" if label else html.escape(s.test)
            }
        },
        "hovermode": "closest",
        "template": "plotly_white",
        "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
    }
    return {"data": data, "layout": layout}


def graph_figure(t: SeriesTrend) -> go.Figure:
    """The trendline graph of one series (:func:`figure_data`) as a plotly figure.

    Examples
    --------
    >>> from trend.series import Series
    >>> from trend.analysis import analyze_series
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1", "b2"), np.array([0, 86_400 * 10**9]),
    ...            (np.array([10e6]), np.array([9e6])))
    >>> [tr.name for tr in graph_figure(analyze_series(s)).data]
    ['runs', 'trend', 'regressions']
    """
    import plotly.graph_objects as go

    return go.Figure(figure_data(t))


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; white-space: nowrap; }
th { background: #f0f0f0; position: sticky; top: 0; }
th[data-key] { cursor: pointer; }
th.sorted-up::after { content: " \\25B2"; } th.sorted-down::after { content: " \\25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.bad { color: #b00; } td.good { color: #070; }
tr.regressed td:first-child { border-left: 4px solid #b00; }
.controls { margin: 1em 0; display: flex; gap: 1em; align-items: center; flex-wrap: wrap; }
svg.spark polyline { fill: none; stroke: #1f77b4; stroke-width: 1; }
body.no-cores .cores { display: none; }
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


def _spark(values: np.ndarray) -> list[int]:
    """The newest valid run values, scaled to 0-99 between their own least and greatest."""
    v = values[~np.isnan(values)][-SPARK_POINTS:]
    if v.size == 0:
        return []
    low, high = float(v.min()), float(v.max())
    if high == low:
        return [50] * int(v.size)
    return np.rint((v - low) / (high - low) * 99).astype(int).tolist()


def _last_change(t: SeriesTrend) -> str | None:
    """The date of the newest regression or progression (the start of the last group)."""
    marked = np.flatnonzero(np.isin(t.marks, ["regression", "progression"]))
    if not marked.size:
        return None
    return datetime.fromtimestamp(int(t.series.times_ns[marked[-1]]) / 1e9, UTC).strftime("%Y-%m-%d")


def _index_row(t: SeriesTrend, shard: int, slug: str) -> list[Any]:
    """One series' row of ``data/index.js`` (the order of :data:`_COLUMNS`)."""
    s = t.series
    div, label = _scale(t)
    last = None if t.last_trend is None else f"{t.last_trend / div:.6g} {label}".strip()
    return [
        s.test,
        s.testbed,
        core_count(s.test),
        last,
        t.last_trend,
        t.short_change,
        t.long_change,
        t.regressions,
        t.progressions,
        t.runs_in_last_group,
        _last_change(t),
        int(t.regressed),
        s.direction == "bigger-is-better",
        f"{shard}/{slug}",
        _spark(t.values),
        s.runs,
    ]


_COLUMNS = [
    "test",
    "testbed",
    "cores",
    "trend_text",
    "trend",
    "short",
    "long",
    "regressions",
    "progressions",
    "last_group",
    "changed",
    "regressed",
    "bigger_is_better",
    "graph",
    "spark",
    "runs",
]


def _script(name: str, doc: Any) -> str:
    """A data file the pages load as a script (a fetch of a ``file://`` URL is refused):
    a call of ``name`` with the JSON document; ``</`` is escaped so that no value ends it."""
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return f"{name}({text});\n"


def write_dashboard(trends: Sequence[SeriesTrend], out: str | os.PathLike[str]) -> DashboardReport:
    """Write ``out/index.html``, ``out/graph.html`` and their data for these analysed series.

    "The last 7 days" end at the newest run of all series, so an old store still shows its
    last week.

    Examples
    --------
    >>> import tempfile
    >>> from trend.series import Series
    >>> from trend.analysis import analyze_series
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1",), np.array([0]), (np.array([10e6]),))
    >>> report = write_dashboard([analyze_series(s)], tempfile.mkdtemp())
    >>> report.index.name, report.graph.name, [p.name for p in report.data], report.series
    ('index.html', 'graph.html', ['index.js', 'series-0.js'], 1)
    """
    from trend.numbers import finite_json

    root = Path(out)
    data_dir = root / "data"
    make_dirs(data_dir)
    trends = list(trends)
    if not (root / "plotly.min.js").exists():
        from plotly.offline import get_plotlyjs

        # plotly.js written once beside the pages and referenced: offline, and small.
        write_atomic(root / "plotly.min.js", get_plotlyjs())
    rows, files = [], []
    for shard, lo in enumerate(range(0, len(trends), SHARD_SERIES)):
        figures = {}
        for t in trends[lo : lo + SHARD_SERIES]:
            slug = _slug(t)
            figures[slug] = figure_data(t)
            rows.append(_index_row(t, shard, slug))
        path = data_dir / f"series-{shard}.js"
        write_atomic(path, _script("wirepathSeries", finite_json(figures)))
        files.append(path)
    now_ns = max((int(t.series.times_ns.max()) for t in trends if t.series.runs), default=0)
    testbeds = sorted({t.series.testbed for t in trends})
    methods = ", ".join(sorted({t.method for t in trends})) or "-"
    regressed = sum(t.regressed for t in trends)
    index_js = data_dir / "index.js"
    write_atomic(index_js, _script("wirepathIndex", finite_json({"columns": _COLUMNS, "rows": rows})))
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>wirepath performance trends</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>Performance trends</h1>",
        f'<p class="summary">{len(trends):,} series on {len(testbeds)} testbeds, method {methods}; '
        f"{regressed:,} in a regression at their newest run. Newest run: "
        f"{datetime.fromtimestamp(now_ns / 1e9, UTC):%Y-%m-%d %H:%M} UTC.</p>",
        '<div class="controls"><input id="filter" type="search" placeholder="test name contains" size="30">',
        '<select id="testbed"><option value="">every testbed</option>',
        *(f'<option value="{html.escape(tb)}">{html.escape(tb)}</option>' for tb in testbeds),
        '</select><select id="cores" class="cores"><option value="">every core count</option></select>',
        '<label><input id="regressed" type="checkbox"> in a regression now</label>',
        '<span id="shown"></span></div>',
        '<table id="series" class="trend"><thead><tr>',
        '<th data-key="test">test</th><th data-key="testbed">testbed</th>',
        '<th data-key="cores" class="cores">cores</th>',
        '<th data-key="trend">trend</th><th data-key="short">short-term change</th>',
        '<th data-key="long">long-term change</th><th data-key="regressions">regressions</th>',
        '<th data-key="progressions">progressions</th><th data-key="last_group">runs in last group</th>',
        '<th data-key="changed">last change</th><th>recent runs</th></tr></thead><tbody></tbody></table>',
        '<p><button id="more">show more</button></p>',
    ]
    for tb in testbeds:
        mine = [t for t in trends if t.series.testbed == tb]
        body.append(f"<h3>Failed tests, last 7 days ({html.escape(tb)})</h3>")
        body += _failed_table(mine, now_ns)
    # The functions first, then the data that calls one of them, then the table.
    body += [
        f"<script>{_INDEX_JS}</script>",
        '<script src="data/index.js"></script>',
        "<script>setUp();</script>",
    ]
    body.append("</body></html>")
    index = root / "index.html"
    write_atomic(index, "\n".join(body))
    graph = root / "graph.html"
    write_atomic(graph, _GRAPH_HTML)
    return DashboardReport(index, graph, (index_js, *files), len(trends))


# The index: rows from data/index.js, sorted regressions first, filtered, a page at a time.
_INDEX_JS = """
const PAGE = 100;
let rows = [], shown = PAGE, sortKey = null, sortUp = true;
function wirepathIndex(doc) {
  rows = doc.rows.map(r => Object.fromEntries(doc.columns.map((c, i) => [c, r[i]])));
}
function esc(s) {
  const named = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
  return String(s).replace(/[&<>"']/g, c => named[c]);
}
function pct(x) { return x === null ? "n/a" : (x > 0 ? "+" : "") + (x * 100).toFixed(2) + " %"; }
function change(x, up) {
  const cls = x === null || x === 0 ? "" : ((x > 0) === up ? "good" : "bad");
  return `<td class="num ${cls}">${pct(x)}</td>`;
}
function spark(v) {
  if (!v.length) return "";
  const step = v.length > 1 ? 80 / (v.length - 1) : 0;
  const pts = v.map((y, i) => `${(i * step).toFixed(1)},${(19 - y * 0.18).toFixed(1)}`).join(" ");
  return `<svg class="spark" width="80" height="20"><polyline points="${pts}"/></svg>`;
}
function byDefault(a, b) {
  return b.regressed - a.regressed || b.regressions - a.regressions
    || (a.test < b.test ? -1 : a.test > b.test ? 1 : 0) || (a.testbed < b.testbed ? -1 : 1);
}
function compare(a, b) {
  if (sortKey === null) return byDefault(a, b);
  const x = a[sortKey], y = b[sortKey];
  if (x === y) return byDefault(a, b);
  if (x === null) return 1;
  if (y === null) return -1;
  return (x < y ? -1 : 1) * (sortUp ? 1 : -1);
}
function render() {
  const text = document.getElementById("filter").value.toLowerCase();
  const tb = document.getElementById("testbed").value;
  const cores = document.getElementById("cores").value;
  const reg = document.getElementById("regressed").checked;
  const keep = rows.filter(r => (!text || r.test.toLowerCase().includes(text)) && (!tb || r.testbed === tb)
    && (!cores || String(r.cores) === cores) && (!reg || r.regressed));
  keep.sort(compare);
  const html = keep.slice(0, shown).map(r =>
    `<tr class="${r.regressed ? "regressed" : ""}">`
    + `<td><a href="graph.html#${encodeURI(r.graph)}">${esc(r.test)}</a></td>`
    + `<td>${esc(r.testbed)}</td><td class="num cores">${r.cores === null ? "" : r.cores}</td>`
    + `<td class="num">${r.trend_text === null ? "n/a" : esc(r.trend_text)}</td>`
    + change(r.short, r.bigger_is_better) + change(r.long, r.bigger_is_better)
    + `<td class="num">${r.regressions}</td><td class="num">${r.progressions}</td>`
    + `<td class="num">${r.last_group}</td><td>${r.changed === null ? "" : r.changed}</td>`
    + `<td>${spark(r.spark)}</td></tr>`).join("");
  document.querySelector("#series tbody").innerHTML = html;
  document.getElementById("shown").textContent =
    `${Math.min(shown, keep.length).toLocaleString("en")} of ${keep.length.toLocaleString("en")} series`;
  document.getElementById("more").hidden = shown >= keep.length;
}
function setUp() {
  const counts = [...new Set(rows.map(r => r.cores).filter(c => c !== null))].sort((a, b) => a - b);
  const select = document.getElementById("cores");
  for (const c of counts) select.add(new Option(`${c} core${c === 1 ? "" : "s"}`, String(c)));
  // Core counts come from CSIT-style test names: where no name has one, no column or filter for them.
  document.body.classList.toggle("no-cores", !counts.length);
  for (const id of ["filter", "testbed", "cores", "regressed"]) {
    for (const kind of ["input", "change"]) {
      document.getElementById(id).addEventListener(kind, () => { shown = PAGE; render(); });
    }
  }
  document.getElementById("more").addEventListener("click", () => { shown += PAGE; render(); });
  for (const th of document.querySelectorAll("th[data-key]")) {
    th.addEventListener("click", () => {
      sortUp = sortKey === th.dataset.key ? !sortUp : true;
      sortKey = th.dataset.key;
      for (const h of document.querySelectorAll("th")) h.classList.remove("sorted-up", "sorted-down");
      th.classList.add(sortUp ? "sorted-up" : "sorted-down");
      render();
    });
  }
  render();
  document.body.dataset.ready = "1";
}
"""

# One series' graph: the data file of its shard loaded as a script, then plotted.
_GRAPH_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>wirepath trend graph</title>
<style>body { font-family: sans-serif; margin: 1em; } #plot { height: 560px; }</style>
<script src="plotly.min.js"></script></head><body>
<p><a href="index.html">all series</a></p><div id="plot"></div><p id="missing" hidden>No such series.</p>
<script>
const [shard, slug] = decodeURIComponent(location.hash.slice(1)).split("/");
function wirepathSeries(figures) {
  const fig = figures[slug];
  if (!fig) { document.getElementById("missing").hidden = false; return; }
  document.title = fig.layout.title.text.replace(/<[^>]*>/g, "");
  Plotly.newPlot("plot", fig.data, fig.layout).then(() => { document.body.dataset.ready = "1"; });
}
if (/^[0-9]+$/.test(shard || "")) {
  const s = document.createElement("script");
  s.src = `data/series-${shard}.js`;
  s.onerror = () => { document.getElementById("missing").hidden = false; };
  document.head.appendChild(s);
} else {
  document.getElementById("missing").hidden = false;
}
window.addEventListener("hashchange", () => location.reload());
</script></body></html>
"""
