"""DOT text of path patterns, pure (no graphviz binary needed; ``viz.render`` draws it).

A nesting pattern is drawn as its tree: the caller of the root on top, one box per
visit with the node's name, its count, mean and p99 latency (self plus descendants) and
self time, one edge per call labelled with the mean delay from the parent's call. Each box is filled
by its self time's share of the pattern's latency (white to red); the visit holding
the largest share is outlined thick red: that is where the time goes. The pattern's
header gives its instance count and total latency.

A convolution path is drawn as a chain: each edge carries its estimated message count
and, from the second hop on, the delays found at the node before it (most frequent first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracefmt.display import printable
from tracefmt.units import format_duration_ns
from viz.paths import collapse_replicas, select_patterns, self_times, shape_of, visits

__all__ = [
    "MAX_LABEL",
    "MAX_LABEL_LINE",
    "DotGraph",
    "convolution_dot",
    "dot_quote",
    "format_s",
    "paths_dot",
    "pattern_dot",
    "shorten_label",
]

_FONT = "Helvetica"


def dot_quote(text: str) -> str:
    """A DOT double-quoted string showing ``text`` literally (line breaks become ``\\n``).

    Examples
    --------
    >>> print(dot_quote('say "hi"\\\\now'))
    "say \\"hi\\"\\\\now"
    >>> dot_quote("a\\nb")
    '"a\\\\nb"'
    """
    # Control characters would make the SVG that dot writes not well-formed XML.
    body = printable(str(text), keep="\n").replace("\\", "\\\\").replace('"', '\\"')
    return '"' + body.replace("\n", "\\n") + '"'


def format_s(seconds: float | None, *, sign: bool = False) -> str:
    """A duration in seconds for a label, three or four significant digits.

    Examples
    --------
    >>> format_s(0.0123), format_s(0.2, sign=True), format_s(-0.0004, sign=True)
    ('12.3 ms', '+200 ms', '-400 µs')
    """
    if seconds is None:
        return "-"
    text = format_duration_ns(round(seconds * 1e9))
    return ("+" + text) if sign and seconds >= 0 else text


#: The longest label line and label drawn, in characters. dot refuses a quoted string
#: over 16,384 bytes; a character takes at most 11 once escaped (``\\U0010ffff``), so a
#: label stays below that, and a name thousands of characters long is still told apart
#: by its start and end. The full names stay in the data (paths files, JSON output).
MAX_LABEL_LINE = 300
MAX_LABEL = 1400


def shorten_label(text: str) -> str:
    """``text`` cut to fit a drawing: each line to :data:`MAX_LABEL_LINE` characters and
    the whole to :data:`MAX_LABEL`, the middle of what is too long replaced by ``…``.

    >>> shorten_label("WS1\\nmean 8 ms")
    'WS1\\nmean 8 ms'
    >>> s = shorten_label("a" * 20_000 + "z")
    >>> len(s), s[-3:]
    (300, 'aaz')
    """

    def cut(line: str, most: int) -> str:
        if len(line) <= most:
            return line
        head = (most - 1) // 2
        return line[:head] + "…" + line[len(line) - (most - 1 - head) :]

    return cut("\n".join(cut(line, MAX_LABEL_LINE) for line in str(text).split("\n")), MAX_LABEL)


class DotGraph:
    """Lines of one digraph; attribute values are quoted here (labels and tooltips
    shortened to fit a drawing, :func:`shorten_label`), names stay as given."""

    def __init__(self, name: str = "paths", label: str | None = None, *, rankdir: str = "TB") -> None:
        self.lines = [
            f"digraph {dot_quote(name)} {{",
            f'  graph [fontname="{_FONT}", rankdir={rankdir}, nodesep=0.3, ranksep=0.4'
            + (f", label={dot_quote(shorten_label(label))}, labelloc=t" if label else "")
            + "];",
            f'  node [fontname="{_FONT}", fontsize=11, shape=box, style="rounded,filled", fillcolor=white];',
            f'  edge [fontname="{_FONT}", fontsize=10];',
        ]
        self.indent = "  "

    @staticmethod
    def _attrs(attrs: dict[str, Any]) -> str:
        items = [f"{k}={dot_quote(shorten_label(str(v)))}" for k, v in attrs.items() if v is not None]
        return f" [{', '.join(items)}]" if items else ""

    def node(self, ident: str, label: str, **attrs: Any) -> None:
        self.lines.append(f"{self.indent}{dot_quote(ident)}{self._attrs({'label': label, **attrs})};")

    def edge(self, a: str, b: str, label: str | None = None, **attrs: Any) -> None:
        self.lines.append(
            f"{self.indent}{dot_quote(a)} -> {dot_quote(b)}{self._attrs({'label': label, **attrs})};"
        )

    def open_cluster(self, ident: str, label: str) -> None:
        self.lines.append(f"  subgraph {dot_quote('cluster_' + ident)} {{")
        shown = dot_quote(shorten_label(label))
        self.lines.append(f'    graph [label={shown}, labeljust=l, style="rounded", color=gray60];')
        self.indent = "    "

    def close_cluster(self) -> None:
        self.lines.append("  }")
        self.indent = "  "

    def text(self) -> str:
        return "\n".join([*self.lines, "}"]) + "\n"


def share_color(share: float) -> str:
    """Fill colour for a share of latency: white at 0, saturated red at 1 (graphviz HSV).

    Examples
    --------
    >>> share_color(0.0), share_color(1.0), share_color(7.0)
    ('0.000 0.000 1.000', '0.000 0.850 1.000', '0.000 0.850 1.000')
    """
    s = min(max(float(share), 0.0), 1.0)
    return f"0.000 {0.85 * s:.3f} 1.000"


def _header(pattern: dict[str, Any], rank: int | None) -> str:
    head = f"#{rank} " if rank is not None else ""
    approx = " (replicas merged)" if pattern.get("merged_ids") else ""
    return (
        f"{head}{pattern['id']}{approx}\n{int(pattern['count']):,} instances, "
        f"total {format_s(float(pattern['total_latency_s']))}"
    )


def _add_pattern(g: DotGraph, pattern: dict[str, Any], prefix: str) -> None:
    root = pattern["root"]
    selfs = self_times(root)
    whole = float(root["latency_s"]["mean"]) if root.get("latency_s") else 0.0
    shares = [s / whole if whole > 0 else 0.0 for s in selfs]
    hot = max(range(len(shares)), key=lambda k: shares[k]) if shares else -1
    caller = f"{prefix}caller"
    g.node(caller, root["caller"], shape="plaintext", style="solid")
    ids: dict[int, str] = {}
    for k, (v, parent, _) in enumerate(visits(root)):
        ident = f"{prefix}v{k}"
        ids[id(v)] = ident
        lat = v.get("latency_s") or {}
        label = (
            f"{v['node']}\n×{int(pattern['count']):,}  mean {format_s(lat.get('mean'))}  "
            f"p99 {format_s(lat.get('p99'))}\n"
            f"self {format_s(selfs[k])} ({shares[k]:.0%})"
        )
        attrs: dict[str, Any] = {
            "fillcolor": share_color(shares[k]),
            "tooltip": f"{v['caller']} -> {v['node']}",
        }
        if k == hot and shares[k] > 0:
            attrs.update(color="red3", penwidth="3")
        g.node(ident, label, **attrs)
        if parent is None:
            g.edge(caller, ident, f"×{int(pattern['count']):,}")
        else:
            g.edge(ids[id(parent)], ident, f"+{format_s((v.get('delay_s') or {}).get('mean'))}")


def pattern_dot(pattern: dict[str, Any], *, rank: int | None = None) -> str:
    """One nesting pattern (a paths-file pattern dict) as a DOT digraph.

    Examples
    --------
    >>> ms = lambda x: {"mean": x, "p50": x, "p90": x, "p99": x, "std": 0.0}
    >>> pat = {"id": "abc", "count": 3, "total_latency_s": 0.03, "root": {
    ...     "node": "WS1", "caller": "client", "latency_s": ms(0.010), "delay_s": None, "children": [
    ...         {"node": "DB1", "caller": "WS1", "latency_s": ms(0.008), "delay_s": ms(0.001),
    ...          "children": []}]}}
    >>> text = pattern_dot(pat)
    >>> '"v1" [label="DB1\\\\n×3  mean 8 ms  p99 8 ms\\\\nself 8 ms (80%)"' in text
    True
    >>> '"v0" -> "v1" [label="+1 ms"];' in text
    True
    """
    g = DotGraph(pattern["id"], _header(pattern, rank))
    _add_pattern(g, pattern, "")
    return g.text()


def convolution_dot(doc: dict[str, Any], *, top: int | None = None) -> str:
    """Convolution paths (``"algorithm": "convolution"``) as chains, one cluster each.

    Edge k (``nodes[k] -> nodes[k+1]``) carries ``counts[k]`` messages; from the second
    hop on it also lists ``delays_s[k-1]``, the delays between a message arriving at
    ``nodes[k]`` and the one it causes on this hop, most frequent first, after their
    median where the path gives one (``medians_s[k-1]``).

    Examples
    --------
    >>> doc = {"algorithm": "convolution", "paths": [
    ...     {"nodes": ["client", "WS1", "AP1"], "delays_s": [[0.021, 0.2]], "counts": [100, 90]}]}
    >>> text = convolution_dot(doc)
    >>> '"c0n1" -> "c0n2" [label="90 msgs\\\\nafter 21 ms, 200 ms"];' in text
    True
    """
    # Each path a row (left to right), the paths one under another: top to bottom they
    # stood side by side, a drawing thousands of points wide for a dozen paths.
    g = DotGraph("convolution", "convolution paths", rankdir="LR")
    for k, path in enumerate(doc.get("paths", [])[:top]):
        nodes, counts, delays = path["nodes"], path["counts"], path["delays_s"]
        medians = path.get("medians_s") or [None] * len(delays)
        g.open_cluster(f"c{k}", f"path {k + 1}: {' -> '.join(nodes)}")
        for j, name in enumerate(nodes):
            g.node(f"c{k}n{j}", name)
        for j in range(len(nodes) - 1):
            label = f"{round(counts[j]):,} msgs"
            if j >= 1 and delays[j - 1]:
                label += "\nafter " + ", ".join(format_s(float(d)) for d in delays[j - 1])
                if medians[j - 1] is not None:
                    label += f"\nmedian {format_s(float(medians[j - 1]))}"
            g.edge(f"c{k}n{j}", f"c{k}n{j + 1}", label)
        g.close_cluster()
    return g.text()


def paths_dot(
    doc: dict[str, Any],
    *,
    top: int | None = 5,
    sort: str = "total",
    min_share: float = 0.0,
    collapse: Sequence[str] = (),
) -> str:
    """A paths file as one DOT digraph: the chosen patterns, one cluster each.

    Nesting patterns are chosen by ``viz.paths.select_patterns`` (``top``, ``sort``,
    ``min_share``) after ``collapse`` merges replicas; convolution paths are drawn by
    :func:`convolution_dot`.

    Examples
    --------
    >>> doc = {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": []}
    >>> paths_dot(doc).splitlines()[0]
    'digraph "paths" {'
    """
    if doc.get("algorithm") == "convolution":
        return convolution_dot(doc, top=top)
    chosen = select_patterns(collapse_replicas(doc, collapse), top=top, sort=sort, min_share=min_share)
    g = DotGraph("paths")
    for rank, pat in enumerate(chosen, 1):
        g.open_cluster(f"p{rank}", _header(pat, rank) + "\n" + shape_of(pat))
        _add_pattern(g, pat, f"p{rank}_")
        g.close_cluster()
    return g.text()
