"""Paths files as the drawings need them: loading, choosing, collapsing replicas, self time.

A paths file (``docs/files.md``) holds nesting patterns as trees of visits. The drawings
need three more things: which patterns to show (``select_patterns``: ``top``, ``sort``,
``min_share``), patterns that differ only in which replica served them merged into one
(``collapse_replicas``, the paper's suggestion), and how much of a pattern's latency each
visit spends itself rather than waiting for its children (``self_times``).
"""

from __future__ import annotations

import copy
import fnmatch
import math
from collections.abc import Iterator, Sequence
from typing import Any

from tracefmt import ParameterError, check_sort
from tracefmt.display import printable
from tracefmt.pathsfile import hop_delays_s
from tracefmt.patterns import Shape, pattern_id, shape_text
from tracefmt.units import format_duration_ns

__all__ = [
    "collapse_replicas",
    "confident_patterns",
    "format_path",
    "mean_of",
    "pattern_shape",
    "replica_name",
    "select_patterns",
    "self_times",
    "shape_of",
    "tree_lines",
    "visits",
]

_STATS = ("mean", "p50", "p90", "p99", "std")


def visits(root: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any] | None, int]]:
    """Every visit of a pattern tree in preorder: ``(visit, parent visit or None, depth)``.

    Examples
    --------
    >>> tree = {"node": "WS1", "caller": "client", "children": [
    ...     {"node": "AP1", "caller": "WS1", "children": []}]}
    >>> [(v["node"], d) for v, _, d in visits(tree)]
    [('WS1', 0), ('AP1', 1)]
    """
    stack: list[tuple[dict[str, Any], dict[str, Any] | None, int]] = [(root, None, 0)]
    while stack:
        v, parent, depth = stack.pop()
        yield v, parent, depth
        stack.extend((c, v, depth + 1) for c in reversed(v.get("children", [])))


def pattern_shape(root: dict[str, Any]) -> Shape:
    """The ``tracefmt.patterns.Shape`` of a pattern tree (for its id and text).

    Examples
    --------
    >>> pattern_shape({"node": "WS1", "caller": "client", "children": []})
    Shape(caller='client', node='WS1', children=(), groups=())
    """
    built: dict[int, Shape] = {}
    # Children before their parents, with a stack of its own (call chains run deep).
    stack = [(root, False)]
    while stack:
        v, kids_done = stack.pop()
        kids = v.get("children", [])
        if not kids_done:
            stack.append((v, True))
            stack.extend((c, False) for c in kids)
            continue
        numbers = tuple(int(c["group"]) for c in kids if "group" in c)
        built[id(v)] = Shape(
            v["caller"],
            v["node"],
            tuple(built[id(c)] for c in kids),
            numbers if len(numbers) == len(kids) and len(set(numbers)) < len(numbers) else (),
        )
    return built[id(root)]


def mean_of(stats: dict[str, float] | None) -> float:
    """The mean of a visit's latency or delay statistics (0 where there are none)."""
    return float(stats["mean"]) if stats else 0.0


def self_times(root: dict[str, Any]) -> list[float]:
    """Mean time each visit spends itself, in preorder: its latency minus its children's.

    Children are taken as called one after another (what nesting sees in RPC systems);
    where they overlap the difference would go negative and is clipped to 0.

    Examples
    --------
    >>> tree = {"latency_s": {"mean": 0.010}, "children": [{"latency_s": {"mean": 0.004}, "children": []}]}
    >>> [round(s, 6) for s in self_times(tree)]
    [0.006, 0.004]
    """
    out = []
    for v, _, _ in visits(root):
        kids = sum(mean_of(c.get("latency_s")) for c in v.get("children", []))
        out.append(max(0.0, mean_of(v.get("latency_s")) - kids))
    return out


def select_patterns(
    doc: dict[str, Any], *, top: int | None = None, sort: str = "total", min_share: float = 0.0
) -> list[dict[str, Any]]:
    """The patterns to show: sorted, those below ``min_share`` dropped, the first ``top``.

    Parameters
    ----------
    doc : dict
        A nesting paths document.
    top : int, optional
        Keep at most this many.
    sort : {"total", "count"}
        By total latency or by instance count.
    min_share : float
        Drop patterns holding less than this share (0..1) of all patterns' total latency
        (``sort="total"``) or instances (``sort="count"``).

    Examples
    --------
    >>> doc = {"patterns": [{"id": "a", "count": 9, "total_latency_s": 1.0},
    ...                     {"id": "b", "count": 1, "total_latency_s": 3.0}]}
    >>> [p["id"] for p in select_patterns(doc)], [p["id"] for p in select_patterns(doc, sort="count")]
    (['b', 'a'], ['a', 'b'])
    >>> [p["id"] for p in select_patterns(doc, min_share=0.5)]
    ['b']
    """
    check_sort(sort)
    if top is not None and top < 1:
        raise ParameterError(f"top must be at least 1, not {top}")
    if not 0.0 <= min_share <= 1.0:
        raise ParameterError(f"min_share must be between 0 and 1, not {min_share}")
    key = "total_latency_s" if sort == "total" else "count"
    pats = sorted(doc.get("patterns", []), key=lambda p: (-float(p[key]), p["id"]))
    whole = sum(float(p[key]) for p in pats)
    if min_share > 0 and whole > 0:
        pats = [p for p in pats if float(p[key]) / whole >= min_share]
    return pats[:top]


def _merge_stats(parts: Sequence[tuple[int, dict[str, float] | None]]) -> dict[str, float] | None:
    """Statistics of a union of groups: mean and std exact (pooled); percentiles are the
    count-weighted mean of the groups' (an approximation, flagged on the pattern)."""
    parts = [(n, s) for n, s in parts if s is not None]
    if not parts:
        return None
    total = sum(n for n, _ in parts)
    mean = sum(n * s["mean"] for n, s in parts) / total
    var = sum(n * (s.get("std", 0.0) ** 2 + (s["mean"] - mean) ** 2) for n, s in parts) / total
    out = {name: sum(n * s.get(name, s["mean"]) for n, s in parts) / total for name in _STATS}
    out["mean"], out["std"] = mean, math.sqrt(max(var, 0.0))
    return out


def _rename(root: dict[str, Any], name: Any) -> dict[str, Any]:
    top: list[dict[str, Any]] = []
    stack = [(root, top)]
    while stack:
        old, siblings = stack.pop()
        v = {**old, "node": name(old["node"]), "caller": name(old["caller"]), "children": []}
        siblings.append(v)
        stack.extend((c, v["children"]) for c in reversed(old.get("children", [])))
    return top[0]


def confident_patterns(doc: dict[str, Any], min_confidence: float) -> tuple[dict[str, Any], int, int]:
    """A nesting paths document without the patterns whose confidence (the probability
    that an instance is exactly right) is below ``min_confidence``; also returns the
    patterns and the instances left out.

    Examples
    --------
    >>> doc = {"algorithm": "nesting", "patterns": [{"id": "a", "count": 9, "confidence": 0.97},
    ...                                             {"id": "b", "count": 4, "confidence": 0.4}]}
    >>> kept, patterns, instances = confident_patterns(doc, 0.9)
    >>> [p["id"] for p in kept["patterns"]], patterns, instances
    (['a'], 1, 4)
    """
    if not 0.0 <= min_confidence <= 1.0:
        raise ParameterError(f"min_confidence must be between 0 and 1, not {min_confidence}")
    pats = doc.get("patterns", [])
    if min_confidence == 0.0:
        return doc, 0, 0
    if doc.get("algorithm") != "nesting":
        raise ParameterError("a minimum confidence applies to nesting paths (convolution has no confidence)")
    if any("confidence" not in p for p in pats):
        raise ParameterError(
            "this paths file has no pattern confidence (written by an older wirepath): "
            "run wirepath infer nesting again, or leave out the minimum confidence"
        )
    kept = [p for p in pats if float(p["confidence"]) >= min_confidence]
    dropped = [p for p in pats if float(p["confidence"]) < min_confidence]
    return {**doc, "patterns": kept}, len(dropped), sum(int(p["count"]) for p in dropped)


def replica_name(node: str, globs: Sequence[str]) -> str:
    """The first of ``globs`` (shell-style) that ``node`` matches, else ``node`` itself.

    Examples
    --------
    >>> replica_name("AP2", ["WS*", "AP*"]), replica_name("DB1", ["WS*", "AP*"])
    ('AP*', 'DB1')
    """
    return next((g for g in globs if fnmatch.fnmatchcase(node, g)), node)


def collapse_replicas(doc: dict[str, Any], globs: Sequence[str]) -> dict[str, Any]:
    """Merge patterns that differ only in which replica served them.

    Every node name matching one of ``globs`` (shell-style, e.g. ``WS*``) is renamed to
    that glob; patterns whose renamed shapes are equal become one pattern under the id of
    the renamed shape, with counts and total latencies summed, means and standard
    deviations pooled exactly, and percentiles averaged by count (marked
    ``"approx_percentiles": true``, since percentiles of a union need the raw values).

    Examples
    --------
    >>> def pat(ws, ms, n):
    ...     leaf = {"mean": ms, "p50": ms, "p90": ms, "p99": ms, "std": 0.0}
    ...     return {"id": ws, "count": n, "total_latency_s": n * ms,
    ...             "root": {"node": ws, "caller": "c", "latency_s": leaf, "delay_s": None, "children": []}}
    >>> doc = {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": [pat("WS1", 1.0, 1),
    ...        pat("WS2", 3.0, 3)]}
    >>> [(p["root"]["node"], p["count"], p["root"]["latency_s"]["mean"])
    ...  for p in collapse_replicas(doc, ["WS*"])["patterns"]]
    [('WS*', 4, 2.5)]
    """
    globs = [g for g in globs if g]
    if not globs:
        return doc
    if doc.get("algorithm") != "nesting":
        raise ParameterError("collapsing replicas applies to nesting patterns (trees), not convolution paths")
    groups = _replica_groups(doc.get("patterns", []), globs)
    merged = [
        {
            **({**members[0], "id": pid} if len(members) == 1 else _merge_replicas(pid, members)),
            "replica_ids": [m["id"] for m in members],  # the patterns merged, as the run named them
        }
        for pid, members in groups.items()
    ]
    merged.sort(key=lambda p: (-p["total_latency_s"], p["id"]))
    out = {**doc, "patterns": merged}
    out["params"] = {**doc.get("params", {}), "collapse": list(globs)}
    return out


def _replica_groups(patterns: list[dict[str, Any]], globs: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Patterns renamed through ``globs``, grouped by the id of their renamed shape."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for pat in patterns:
        renamed = _rename(pat["root"], lambda n: replica_name(n, globs))
        groups.setdefault(pattern_id(pattern_shape(renamed)), []).append({**pat, "root": renamed})
    return groups


def _merge_replicas(pid: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """One pattern of several with the same renamed shape: counts and totals summed,
    every visit's statistics pooled (``_merge_stats``)."""
    counts = [int(m["count"]) for m in members]
    # Same renamed shape, so the preorder positions of all members line up.
    columns = zip(*(list(visits(m["root"])) for m in members), strict=True)
    root = copy.deepcopy(members[0]["root"])
    for (target, _, _), column in zip(visits(root), columns, strict=True):
        target["latency_s"] = _merge_stats(
            [(n, v.get("latency_s")) for n, (v, _, _) in zip(counts, column, strict=True)]
        )
        target["delay_s"] = _merge_stats(
            [(n, v.get("delay_s")) for n, (v, _, _) in zip(counts, column, strict=True)]
        )
    confident = [m.get("confidence") for m in members]
    weighted = None if None in confident else sum(n * c for n, c in zip(counts, confident, strict=True))
    return {
        "id": pid,
        "count": sum(counts),
        # A merged instance is right as often as the members' instances are.
        **({} if weighted is None else {"confidence": weighted / sum(counts)}),
        "total_latency_s": sum(float(m["total_latency_s"]) for m in members),
        "root": root,
        "approx_percentiles": True,
        "merged_ids": [m["id"] for m in members],
    }


def shape_of(pattern: dict[str, Any]) -> str:
    """The canonical shape text of a pattern dict (``caller>node(child,...)``).

    Examples
    --------
    >>> shape_of({"root": {"node": "WS1", "caller": "c", "children": []}})
    'c>WS1'
    """
    return shape_text(pattern_shape(pattern["root"]))


def _ops_text(visit: dict[str, Any]) -> str:
    """``"  [GET /item/:id]"``: a visit's most frequent operation, with its share when
    it is not every call's (``"  [GET /item/:id 80%, +2]"``), and the share of its
    returns that are server errors (``"  errors 2.0%"``); empty without either."""
    ops = visit.get("ops") or []
    errors = visit.get("errors", 0)
    bad = f"  errors {errors:.1%}" if errors else ""
    if not ops:
        return bad
    top = ops[0]
    if len(ops) == 1 and str(visit.get("node", "")).endswith(f" {top['op']}"):
        return bad  # patterns by operation (--by-label): the node's name says it already
    share = "" if top["share"] >= 0.995 else f" {top['share']:.0%}"
    more = f", +{len(ops) - 1}" if len(ops) > 1 else ""
    return f"  [{printable(top['op'])}{share}{more}]{bad}"


def tree_lines(pattern: dict[str, Any]) -> list[str]:
    """A pattern as an indented tree: node, mean latency, delay from the parent's call.

    Calls a visit makes at once (a concurrent group, ``B>C|B>D`` in the shape text)
    follow a ``(at once)`` line, and a ``|`` runs down the left of each of them and
    its subtree; a call made on its own (``,`` in the shape text) has no mark::

        A -> B  6.000 ms
          (at once)
          | B -> C  2.000 ms  +1.000 ms after parent
          | B -> D  3.500 ms  +1.500 ms after parent
          |   D -> F  1.000 ms  +0.500 ms after parent
          B -> E  1.000 ms  +4.000 ms after parent
    """
    lines = []
    # Preorder with a stack of its own (call chains run deep); an entry is a visit and its
    # indent, or a line to print as it comes.
    stack: list[tuple[dict[str, Any] | None, str]] = [(pattern["root"], "  ")]
    while stack:
        v, indent = stack.pop()
        if v is None:
            lines.append(indent)
            continue
        delay = f"  +{v['delay_s']['mean'] * 1e3:.3f} ms after parent" if v["delay_s"] else ""
        call = f"{printable(v['caller'])} -> {printable(v['node'])}"
        lines.append(f"{indent}{call}  {v['latency_s']['mean'] * 1e3:.3f} ms{delay}{_ops_text(v)}")
        # Children carry a group number only when some of them were made at once.
        groups = [c.get("group") for c in v["children"]]
        todo: list[tuple[dict[str, Any] | None, str]] = []
        previous = None
        for child, group in zip(v["children"], groups, strict=True):
            if group is None or groups.count(group) == 1:
                todo.append((child, indent + "  "))
            else:
                if group != previous:
                    todo.append((None, f"{indent}  (at once)"))
                todo.append((child, indent + "  | "))
            previous = group
        stack.extend(reversed(todo))
    return lines


def format_path(path: dict[str, Any]) -> str:
    """One path of a convolution paths file as text: nodes, with the delays before each
    hop (most frequent first), led by the hop's median where the path gives one.

    Examples
    --------
    >>> format_path({"nodes": ["a", "b", "c"], "delays_s": [[0.0021, 0.008]], "counts": [10, 7]})
    'a -> b -[2.1 ms|8 ms]-> c'
    >>> format_path({"nodes": ["a", "b", "a"], "delays_s": [[0.00002, 0.005]], "medians_s": [0.004]})
    'a -> b -[median 4 ms; 20 µs|5 ms]-> a'
    """
    nodes = [printable(str(n)) for n in path["nodes"]]
    parts = [f"{nodes[0]} -> {nodes[1]}"]
    medians = path.get("medians_s") or []
    for k, node in enumerate(nodes[2:]):
        delays = "|".join(format_duration_ns(round(d * 1e9)) for d in path["delays_s"][k])
        if k < len(medians) and medians[k] is not None:
            delays = f"median {format_duration_ns(round(hop_delays_s(path)[k] * 1e9))}; {delays}"
        parts.append(f" -[{delays}]-> {node}")
    return "".join(parts)
