"""Run-versus-run diff of two paths files: where did the time go (the paper's Figures 12, 15).

Patterns are matched by shape (their ids; with ``collapse``, after replicas are merged).
For each matched pattern the latency of every visit and the delay of every call are
compared. To say *where* a change happened, not just which visits it shows up in (a
slower database makes every caller above it slower too), each visit's latency is cut
into the segments its node spends itself, which add up under serial calls:

* ``wait``: the time the caller spends before a call, since its previous call returned
  (or since it was called, for its first call): ``delay_k - delay_{k-1} - latency_{k-1}``;
* ``reply``: after its last call returns, before it answers its own caller;
* ``leaf``: the whole visit of a node that calls nobody.

Segment changes are pooled over all matched patterns by what they are (caller, callee,
previous call), weighted by the slow run's counts. Each change carries ``z``, its size in
standard errors (from the spreads the paths files give: a segment's own, or that of the
delay or latency holding it, which bounds it from above). Changes of three standard
errors or more come first, the biggest ``change x requests`` first among them, and the
first one gives the sentence a user wants: ``WS2 -> AP*: +0.20 s in 3,314 of 14,246
requests``. Without the ranking by ``z``, a frequent pattern whose mean moved by noise
(a few requests held up by other work on the machine) outranks a real change in a
rarer one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt import ParameterError
from tracefmt.display import printable
from tracefmt.pathsfile import check_paths
from viz.dot import DotGraph, format_s
from viz.paths import collapse_replicas, mean_of, replica_name, select_patterns, shape_of, visits
from viz.shift import latency_shift

__all__ = ["PathsDiff", "convolution_diff_dot", "diff_convolution", "diff_dot", "diff_paths", "format_change"]


def format_change(seconds: float) -> str:
    """A signed change for text: ``+0.20 s`` from 0.1 s up, else with a smaller unit.

    Examples
    --------
    >>> format_change(0.2013), format_change(-0.0031), format_change(1.5)
    ('+0.20 s', '-3.1 ms', '+1.50 s')
    """
    if abs(seconds) >= 0.1:
        return f"{seconds:+.2f} s"
    return format_s(seconds, sign=True)


def _segments(root: dict[str, Any]) -> list[tuple[tuple[str, ...], int, int, float, float]]:
    """``(key, owner, edge, seconds, spread)`` of every segment of a pattern tree.

    Keys: ``("wait", caller, callee, previous callee or "")``, ``("reply", node, its
    caller)``, ``("leaf", caller, node)``. ``owner`` is the (preorder) position of the
    visit whose node spends the time; ``edge`` that of the called visit for ``wait``
    (the call the time is spent before), else -1. ``spread`` is a standard deviation
    that bounds the segment's from above: of the call's delay (``wait``), of the
    visit's latency (``leaf``, ``reply``); 0 where the paths file has none.
    """
    out: list[tuple[tuple[str, ...], int, int, float, float]] = []
    position = {id(v): k for k, (v, _, _) in enumerate(visits(root))}
    for v, _, _ in visits(root):
        kids = v.get("children", [])
        latency = v.get("latency_s")
        if not kids:
            key = ("leaf", v["caller"], v["node"])
            out.append((key, position[id(v)], -1, mean_of(latency), _std(latency)))
            continue
        previous: dict[str, Any] | None = None
        for c in kids:
            gap = mean_of(c.get("delay_s"))
            if previous is not None:
                gap -= mean_of(previous.get("delay_s")) + mean_of(previous.get("latency_s"))
            key = ("wait", v["node"], c["node"], previous["node"] if previous else "")
            out.append((key, position[id(v)], position[id(c)], gap, _std(c.get("delay_s"))))
            previous = c
        last = mean_of(previous.get("delay_s")) + mean_of(previous.get("latency_s"))
        key = ("reply", v["node"], v["caller"])
        out.append((key, position[id(v)], -1, mean_of(latency) - last, _std(latency)))
    return out


def _std(stats: dict[str, float] | None) -> float:
    return float(stats.get("std") or 0.0) if stats else 0.0


#: A change of a mean this many standard errors from 0 is told apart from noise.
SIGNIFICANT_Z = 3.0


def _describe(key: tuple[str, ...]) -> tuple[str, str]:
    """(short label, where in words) of a segment key (names made printable)."""
    kind, key = key[0], (key[0], *(printable(k) if k else k for k in key[1:]))
    if kind == "wait":
        _, caller, callee, prev = key
        where = (
            f"at {caller}, between its call to {prev} returning and its call to {callee}"
            if prev
            else f"at {caller}, before its first call (to {callee})"
        )
        return f"{caller} -> {callee}", where
    if kind == "reply":
        _, node, caller = key
        return (
            f"{node} -> {caller} (reply)",
            f"at {node}, after its last call returns, before it answers {caller}",
        )
    _, caller, node = key
    return f"{caller} -> {node}", f"inside {node}, called by {caller} (it calls nobody)"


@dataclass(frozen=True)
class PathsDiff:
    """The comparison of a base and a slow run (see the module docstring).

    Attributes
    ----------
    patterns : list of dict
        Matched patterns, those whose mean latency changed by ``SIGNIFICANT_Z`` standard
        errors or more first, most added latency (change of mean x slow count) first among
        them: ids, counts, ``z``, per-visit latency and self time and per-call delay and
        wait in both runs.
    changes : list of dict
        Segment changes pooled over patterns, ranked the same way (``z``, then
        ``|change| x requests``).
    new, gone : list of dict
        Patterns only in the slow run / only in the base run (id, shape, count).
    requests : int
        Instances (requests) in the slow run.
    params : dict
        ``collapse`` and ``min_count`` used.
    """

    patterns: list[dict[str, Any]]
    changes: list[dict[str, Any]]
    new: list[dict[str, Any]]
    gone: list[dict[str, Any]]
    requests: int
    params: dict[str, Any] = field(default_factory=dict)

    def sentence(self) -> str:
        """The one line a user wants: the biggest change, where, and in how many requests."""
        if not self.changes:
            return "no pattern appears in both runs: nothing to compare"
        top = self.changes[0]
        label = top["label"] + (f" ({printable(top['op'])})" if top.get("op") else "")
        if top.get("changed_requests"):
            # Counted from every request's latency: the share that changed, not the mean.
            return (
                f"{label}: {format_change(top['changed_delta_s'])} in {top['changed_requests']:,} "
                f"of {self.requests:,} requests ({top['changed_requests'] / top['of_requests']:.0%} "
                f"of the {top['of_requests']:,} that pass there)"
            )
        return (
            f"{label}: {format_change(top['change_s'])} in {top['requests']:,} of {self.requests:,} requests"
        )

    def text_lines(self, top: int = 5) -> list[str]:
        """The top changed segments as text, one a line: the change a request, in how
        many requests and patterns, the time it adds in all, where it is, and whether it
        is within noise (under ``SIGNIFICANT_Z`` standard errors, or of no known spread)."""
        lines = []
        for c in self.changes[:top]:
            noise = ""
            if _noise(c["z"]):
                noise = " [within noise]" if c["z"] is not None else " [spread unknown]"
            changed = ""
            if "changed_requests" in c:
                changed = (
                    f"; changed: {format_change(c['changed_delta_s'])} in {c['changed_requests']:,}"
                    if c["changed_requests"]
                    else "; no request changed beyond noise"
                )
            lines.append(
                f"{format_change(c['change_s']):>9}  {c['label']:<24} in {c['requests']:,} requests "
                f"({c['patterns']} pattern{'' if c['patterns'] == 1 else 's'}; "
                f"{format_change(c['impact_s'])} in all{changed}): {c['where']}{noise}"
            )
            q = c.get("quantiles")
            if q:
                moves = ", ".join(
                    f"{name} {format_s(b)} -> {format_s(s)}"
                    for name, b, s in zip(q["of"], q["base_s"], q["slow_s"], strict=True)
                )
                lines.append(f"{'':>11}{printable(q['visit'])}: {moves}")
        return lines

    def to_json(self) -> dict[str, Any]:
        """All of it as a JSON-ready dict (``wirepath viz diff --json``)."""
        return {
            "format": "wirepath.diff/1",
            "params": self.params,
            "sentence": self.sentence(),
            "requests": self.requests,
            "changes": self.changes,
            "patterns": self.patterns,
            "new": self.new,
            "gone": self.gone,
        }


def _instances(doc: dict[str, Any]) -> int:
    stats = doc.get("stats") or {}
    if stats.get("instances") is not None and not doc.get("params", {}).get("top"):
        return int(stats["instances"])
    return sum(int(p["count"]) for p in doc.get("patterns", []))


#: The quantiles of a visit's latency a change is shown with, as the paths file keeps them.
QUANTILES = ("p50", "p90", "p99")


def _quantiles(stats: dict[str, float] | None) -> list[float] | None:
    """A visit's latency p50, p90 and p99 (None where the paths file has not all three)."""
    if not stats or any(stats.get(q) is None for q in QUANTILES):
        return None
    return [float(stats[q]) for q in QUANTILES]


def _visit_rows(base: dict[str, Any], slow: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    base_visits = list(visits(base["root"]))
    for k, (v, parent, depth) in enumerate(visits(slow["root"])):
        b = base_visits[k][0]
        rows.append(
            {
                "caller": v["caller"],
                "node": v["node"],
                "depth": depth,
                "latency_base_s": mean_of(b.get("latency_s")),
                "latency_slow_s": mean_of(v.get("latency_s")),
                "latency_quantiles_s": (_quantiles(b.get("latency_s")), _quantiles(v.get("latency_s"))),
                "delay_quantiles_s": (
                    (None, None)
                    if parent is None
                    else (_quantiles(b.get("delay_s")), _quantiles(v.get("delay_s")))
                ),
                "delay_base_s": None if parent is None else mean_of(b.get("delay_s")),
                "delay_slow_s": None if parent is None else mean_of(v.get("delay_s")),
            }
        )
    return rows


def diff_paths(
    base: dict[str, Any],
    slow: dict[str, Any],
    *,
    collapse: Sequence[str] = (),
    min_count: int = 1,
    instances: tuple[pa.Table, pa.Table] | None = None,
) -> PathsDiff:
    """Compare two nesting paths documents (a base run and a slow run).

    Parameters
    ----------
    base, slow : dict
        Paths files (``docs/files.md``) of the two runs.
    collapse : sequence of str
        Node-name globs whose replicas are merged first (``["AP*", "DB*"]``), so a
        change spread over replicas is counted once.
    min_count : int
        Compare only patterns seen at least this often in both runs.
    instances : (pyarrow.Table, pyarrow.Table), optional
        The two runs' instances tables (``infer nesting --instances``): every request's
        latency, so each matched pattern's change is told as a share of its requests
        and their change, with a test (``viz.shift``), and the sentence counts the
        requests that changed, not those that pass where the mean moved.

    Examples
    --------
    >>> ms = lambda x: {"mean": x, "p50": x, "p90": x, "p99": x, "std": 0.0}
    >>> def doc(wait):
    ...     ap = {"node": "AP1", "caller": "WS2", "latency_s": ms(0.004), "delay_s": ms(wait),
    ...           "children": []}
    ...     root = {"node": "WS2", "caller": "client", "latency_s": ms(wait + 0.005), "delay_s": None,
    ...             "children": [ap]}
    ...     return {"format": "wirepath.paths/1", "algorithm": "nesting",
    ...             "patterns": [{"id": "p", "count": 10, "total_latency_s": 1.0, "root": root}]}
    >>> diff_paths(doc(0.001), doc(0.201)).sentence()
    'WS2 -> AP1: +0.20 s in 10 of 10 requests'
    """
    _check_runs(base, slow, "nesting", ": diff compares nesting trees")
    if min_count < 1:
        raise ParameterError(f"min_count must be at least 1, not {min_count}")
    base_c, slow_c = collapse_replicas(base, collapse), collapse_replicas(slow, collapse)
    by_id = {p["id"]: p for p in base_c["patterns"]}
    slow_ids = {p["id"] for p in slow_c["patterns"]}
    # Numbered as the report and viz draw number the slow run's patterns (by total time).
    rank_of = {p["id"]: k for k, p in enumerate(select_patterns(slow_c), 1)}
    pooled: dict[tuple[str, ...], _Pooled] = {}
    lat_b, lat_s = (
        (_root_latencies(instances[0], base_c), _root_latencies(instances[1], slow_c))
        if instances is not None
        else ({}, {})
    )
    matched = []
    for sp in slow_c["patterns"]:
        bp = by_id.get(sp["id"])
        if bp is None or min(int(bp["count"]), int(sp["count"])) < min_count:
            continue
        row = {**_compare_pattern(bp, sp, pooled), "rank": rank_of[sp["id"]]}
        b, s_ = lat_b.get(sp["id"]), lat_s.get(sp["id"])
        if b is not None and s_ is not None:
            row["shift"] = latency_shift(b, s_).to_json()
        matched.append(row)
    # Changes told apart from noise first: a frequent pattern's noise adds up to more
    # time than a real change in a rarer one.
    matched.sort(key=lambda p: (_noise(p["z"]), -abs(p["added_s"]), p["id"]))
    return PathsDiff(
        patterns=matched,
        changes=_pooled_changes(pooled, {p["id"]: p.get("shift") for p in matched}),
        new=[_brief(p) for p in slow_c["patterns"] if p["id"] not in by_id],
        gone=[_brief(p) for p in base_c["patterns"] if p["id"] not in slow_ids],
        requests=_instances(slow_c),
        params={"collapse": list(collapse), "min_count": min_count},
    )


def _check_runs(base: dict[str, Any], slow: dict[str, Any], algorithm: str, refusal: str) -> None:
    """Raise unless both documents are paths files of ``algorithm`` (``refusal`` ends
    the error about the other kind)."""
    for doc, where in ((base, "base"), (slow, "slow")):
        check_paths(doc, where)
        if doc["algorithm"] != algorithm:
            raise ParameterError(f"the {where} run is a {doc['algorithm']} paths file{refusal}")


@dataclass
class _Pooled:
    """One segment's changes over the patterns that have it (:func:`_compare_pattern`)."""

    requests: int = 0
    weighted: float = 0.0  # the change, times each pattern's requests
    patterns: int = 0
    variance: float = 0.0  # of ``weighted``
    #: (pattern id, whether the segment is where that pattern moved most)
    ids: list[tuple[str, bool]] = field(default_factory=list)
    #: requests per operation made there (labelled traces)
    ops: dict[str, int] = field(default_factory=dict)
    #: (requests, name, base p50/p90/p99, slow p50/p90/p99) of where it is spent, from the
    #: pattern with the most requests there
    where: tuple[int, str, list[float] | None, list[float] | None] | None = None


def _compare_pattern(
    bp: dict[str, Any], sp: dict[str, Any], pooled: dict[tuple[str, ...], _Pooled]
) -> dict[str, Any]:
    """One pattern of both runs compared: its visits' latencies, self times and waits,
    and its whole latency; its segments' changes are added to ``pooled``."""
    n, n_base = int(sp["count"]), int(bp["count"])
    rows = _visit_rows(bp, sp)
    for row in rows:
        row.update(self_base_s=0.0, self_slow_s=0.0)
    seg_b, seg_s = _segments(bp["root"]), _segments(sp["root"])
    # The operation a segment's time is spent for: the call it waits on, else its visit's.
    ops = [(v.get("ops") or [{}])[0].get("op") for v, _, _ in visits(sp["root"])]
    # Per segment key, what a request of this pattern gained (a key met twice in one
    # request, as two calls to one node, adds both) and its variance.
    mine: dict[tuple[str, ...], list[float]] = {}
    op_of: dict[tuple[str, ...], str | None] = {}
    visit_of: dict[tuple[str, ...], tuple[int, str]] = {}
    for (key, owner, edge, vb, sb), (_, _, _, vs, ss) in zip(seg_b, seg_s, strict=True):
        variance = sb * sb / n_base + ss * ss / n
        op_of.setdefault(key, ops[edge if edge >= 0 else owner])
        # A wait shows in the delay of the call it waits for; the rest in a visit's latency.
        visit_of.setdefault(key, (edge, "delay") if edge >= 0 else (owner, "latency"))
        one = mine.setdefault(key, [0.0, 0.0])
        one[0] += vs - vb
        one[1] += variance
        rows[owner]["self_base_s"] += vb
        rows[owner]["self_slow_s"] += vs
        rows[owner]["self_var"] = rows[owner].get("self_var", 0.0) + variance
        if edge >= 0:
            rows[edge].update(wait_base_s=vb, wait_slow_s=vs, wait_var=variance)
    # The segment that moved most: a change of this pattern's requests is put there.
    dominant = max(mine, key=lambda k: (abs(mine[k][0]), k)) if mine else None
    for key, (change, variance) in mine.items():
        acc = pooled.setdefault(key, _Pooled())
        acc.requests += n  # each of this pattern's once
        acc.weighted += n * change
        acc.patterns += 1
        acc.variance += n * n * variance
        acc.ids.append((sp["id"], key == dominant))
        if op_of.get(key) is not None:
            acc.ops[op_of[key]] = acc.ops.get(op_of[key], 0) + n
        k, stat = visit_of[key]
        if acc.where is None or n > acc.where[0]:
            row = rows[k]
            name = f"{row['caller']} -> {row['node']} {'call delay' if stat == 'delay' else 'latency'}"
            acc.where = (n, name, *row[f"{stat}_quantiles_s"])
    lat_b, lat_s = bp["root"].get("latency_s"), sp["root"].get("latency_s")
    change = mean_of(lat_s) - mean_of(lat_b)
    return {
        "id": sp["id"],
        "shape": shape_of(sp),
        "count_base": n_base,
        "count_slow": n,
        "mean_base_s": mean_of(lat_b),
        "mean_slow_s": mean_of(lat_s),
        "added_s": change * n,
        "z": _z(change, _std(lat_b) ** 2 / n_base + _std(lat_s) ** 2 / n),
        "visits": rows,
        "root": sp["root"],
        "base_root": bp["root"],
    }


def _pooled_changes(
    pooled: dict[tuple[str, ...], _Pooled], shifts: dict[str, dict[str, Any] | None]
) -> list[dict[str, Any]]:
    """Segment changes pooled over patterns, told apart from noise first, then the
    biggest ``|change| x requests``; with the patterns' latency shifts (``shifts``),
    the requests of those patterns that changed and by how much."""
    changes = []
    for key, acc in pooled.items():
        label, where = _describe(key)
        weight, weighted, ops = acc.requests, acc.weighted, acc.ops
        change_s = weighted / weight
        _, visit_name, q_base, q_slow = acc.where
        changes.append(
            {
                # In both runs the p50, p90 and p99 of where it is spent: the delay of the
                # call waited for, else the latency of the visit.
                "quantiles": None
                if q_base is None or q_slow is None
                else {"visit": visit_name, "of": list(QUANTILES), "base_s": q_base, "slow_s": q_slow},
                # The operation most of its requests make there (labelled traces only).
                "op": max(ops, key=lambda o: (ops[o], o)) if ops else None,
                **_changed_requests(weighted, [(shifts.get(i), here) for i, here in acc.ids]),
                "label": label,
                "where": where,
                "kind": key[0],
                "key": list(key),
                "change_s": change_s,
                "requests": int(weight),
                "patterns": acc.patterns,
                "impact_s": change_s * weight,
                "z": _z(change_s, acc.variance / (weight * weight)),
            }
        )
    changes.sort(key=lambda c: (_noise(c["z"]), -abs(c["impact_s"]), c["label"]))
    return changes


def _changed_requests(weighted: float, shifts: list[tuple[dict[str, Any] | None, bool]]) -> dict[str, Any]:
    """From the latency shifts of a change's patterns (None where not measured; with
    whether this segment is where the pattern moved most): how many of their requests
    changed, in the change's direction, beyond noise and here, and by how much on
    average; empty without shifts."""
    if not shifts or any(s is None for s, _ in shifts):
        return {}
    moved = [
        s
        for s, here in shifts
        if here and s["significant"] and s["share"] > 0 and s["delta_s"] * weighted > 0
    ]
    changed = sum(s["share"] * s["n_slow"] for s in moved)
    delta = sum(s["share"] * s["n_slow"] * s["delta_s"] for s in moved) / changed if changed else 0.0
    return {
        "changed_requests": round(changed),
        "changed_delta_s": delta,
        "of_requests": sum(s["n_slow"] for s, _ in shifts),
    }


def _root_latencies(table: pa.Table, collapsed: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every request's latency (its root call's, seconds) per pattern id of ``collapsed``
    (an instances table's patterns are the uncollapsed ones: merged here as the
    document's replicas were)."""
    need = {"parent", "pattern", "t_call", "t_return"}
    if not need <= set(table.column_names):
        raise ParameterError(f"not an instances table (needs columns {', '.join(sorted(need))})")
    roots = table.filter(pc.is_null(table["parent"]))
    lat = (roots["t_return"].cast(pa.int64()).to_numpy() - roots["t_call"].cast(pa.int64()).to_numpy()) / 1e9
    # Pattern ids as codes into their (few) distinct values: no Python loop per request.
    codes = pc.dictionary_encode(roots["pattern"].cast(pa.string())).combine_chunks()
    to_merged = {old: p["id"] for p in collapsed["patterns"] for old in p.get("replica_ids", [p["id"]])}
    merged = [to_merged.get(v) for v in codes.dictionary.to_pylist()]
    names = sorted({m for m in merged if m is not None})
    slot = np.array([names.index(m) if m is not None else -1 for m in merged] or [-1], np.int64)
    which = slot[codes.indices.to_numpy(zero_copy_only=False)] if len(codes) else np.zeros(0, np.int64)
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(names) + 1))
    return {pid: lat[order[bounds[k] : bounds[k + 1]]] for k, pid in enumerate(names)}


def _brief(p: dict[str, Any]) -> dict[str, Any]:
    return {"id": p["id"], "shape": shape_of(p), "count": int(p["count"])}


def _z(change: float, variance: float) -> float | None:
    """``change`` in standard errors (``variance``: of the change); ``None`` without
    spreads (paths files that give none)."""
    return change / math.sqrt(variance) if variance > 0 else None


def _noise(z: float | None) -> bool:
    """Whether a change is not told apart from noise: under ``SIGNIFICANT_Z`` standard
    errors, or of no known spread (a pattern of one request, a paths file without
    spreads), which leaves the ranking by size alone."""
    return z is None or abs(z) < SIGNIFICANT_Z


def _significant(change: float, base: float, min_change_s: float, rel: float, variance: float = 0.0) -> bool:
    """Whether a drawn change counts: big enough (``min_change_s`` and ``rel`` of the
    base value) and told apart from noise where its spread is known (``variance`` of
    the change > 0: at least ``SIGNIFICANT_Z`` standard errors)."""
    if abs(change) < max(min_change_s, rel * abs(base)):
        return False
    return variance <= 0 or abs(change) >= SIGNIFICANT_Z * math.sqrt(variance)


def _change_color(change: float, significant: bool) -> str:
    if not significant:
        return "gray40"
    return "red3" if change > 0 else "darkgreen"


def _change_box(change: float, significant: bool) -> dict[str, Any]:
    """Box attributes for a change: a red (slower) or green (faster) frame and fill when
    it counts, a grey frame otherwise."""
    attrs: dict[str, Any] = {"color": _change_color(change, significant)}
    if significant:
        attrs.update(penwidth="3", fillcolor="0.000 0.350 1.000" if change > 0 else "0.333 0.250 1.000")
    return attrs


def diff_dot(diff: PathsDiff, *, top: int = 3, min_change_s: float = 0.001, rel: float = 0.1) -> str:
    """The ``top`` patterns that gained (or lost) the most latency, each visit and call
    labelled base -> slow with its change; red where the run got slower, green where faster.

    A box is coloured by the change of its node's own time (its ``leaf`` or ``reply``
    segment and waits before its calls), an edge by the change of the wait before that
    call: so the colour sits where the time was added, not on every caller above it.
    A change counts when it is at least ``min_change_s`` and ``rel`` of the base value.

    Examples
    --------
    >>> empty = PathsDiff([], [], [], [], 0)
    >>> diff_dot(empty).splitlines()[0]
    'digraph "diff" {'
    """
    g = DotGraph("diff", diff.sentence())
    for rank, pat in enumerate(diff.patterns[:top], 1):
        head = (
            f"#{pat['rank']} {pat['id']}: {pat['count_base']:,} -> {pat['count_slow']:,} instances, mean "
            f"{format_s(pat['mean_base_s'])} -> {format_s(pat['mean_slow_s'])} "
            f"({format_s(pat['mean_slow_s'] - pat['mean_base_s'], sign=True)})"
        )
        g.open_cluster(f"d{rank}", head)
        prefix = f"d{rank}_"
        g.node(f"{prefix}caller", pat["visits"][0]["caller"], shape="plaintext", style="solid")
        idents: dict[int, str] = {}
        parent_of = {id(v): parent for v, parent, _ in visits(pat["root"])}
        for k, (v, row) in enumerate(zip((v for v, _, _ in visits(pat["root"])), pat["visits"], strict=True)):
            ident = f"{prefix}v{k}"
            idents[id(v)] = ident
            own_b = row.get("self_base_s", 0.0)
            own_s = row.get("self_slow_s", 0.0)
            own = own_s - own_b
            lat = row["latency_slow_s"] - row["latency_base_s"]
            sig = _significant(own, own_b, min_change_s, rel, row.get("self_var", 0.0))
            label = (
                f"{row['node']}\n{format_s(row['latency_base_s'])} -> {format_s(row['latency_slow_s'])} "
                f"({format_s(lat, sign=True)})\nown time {format_s(own, sign=True)}"
            )
            g.node(ident, label, **_change_box(own, sig))
            parent = parent_of[id(v)]
            if parent is None:
                g.edge(f"{prefix}caller", ident, f"×{pat['count_slow']:,}")
                continue
            wait = row.get("wait_slow_s", 0.0) - row.get("wait_base_s", 0.0)
            wsig = _significant(
                wait, row.get("wait_base_s", 0.0), min_change_s, rel, row.get("wait_var", 0.0)
            )
            d_b, d_s = row["delay_base_s"], row["delay_slow_s"]
            elabel = f"+{format_s(d_b)} -> +{format_s(d_s)}\n({format_s(d_s - d_b, sign=True)})"
            g.edge(
                idents[id(parent)],
                ident,
                elabel,
                color=_change_color(wait, wsig),
                fontcolor=_change_color(wait, wsig),
                penwidth="3" if wsig else "1",
            )
        g.close_cluster()
    return g.text()


def convolution_diff_dot(
    changes: list[dict[str, Any]], *, top: int = 3, min_change_s: float = 0.001, rel: float = 0.1
) -> str:
    """The ``top`` delay changes of ``diff_convolution`` as hop chains ``a -> b -> c``:
    the middle box holds the time ``b`` takes between the two messages, base -> slow,
    red where it grew, green where it shrank (a change counts when it is at least
    ``min_change_s`` and ``rel`` of the base value); edges carry the message count.

    Examples
    --------
    >>> c = [{"label": "AUTH -> WS2 -> AP1", "nodes": ["AUTH", "WS2", "AP1"], "at": "WS2",
    ...       "base_s": 0.001, "slow_s": 0.201, "change_s": 0.2, "messages": 40}]
    >>> '"h1_b" [label="WS2\\\\n1 ms -> 201 ms (+200 ms)", color="red3"' in convolution_diff_dot(c)
    True
    """
    title = (
        f"{changes[0]['label']}: {format_change(changes[0]['change_s'])} at {changes[0]['at']}"
        if changes
        else "no path in both runs"
    )
    g = DotGraph("diff", title)
    for rank, c in enumerate(changes[:top], 1):
        a, b, z = c["nodes"]
        prefix = f"h{rank}_"
        g.open_cluster(
            f"h{rank}",
            f"#{rank} {c['label']}: about {c['messages']:,} messages, {format_change(c['change_s'])}",
        )
        sig = _significant(c["change_s"], c["base_s"], min_change_s, rel)
        g.node(f"{prefix}a", a)
        g.node(
            f"{prefix}b",
            f"{b}\n{format_s(c['base_s'])} -> {format_s(c['slow_s'])} ({format_s(c['change_s'], sign=True)})",
            **_change_box(c["change_s"], sig),
        )
        g.node(f"{prefix}c", z)
        g.edge(f"{prefix}a", f"{prefix}b")
        g.edge(f"{prefix}b", f"{prefix}c", f"{c['messages']:,} msgs")
        g.close_cluster()
    return g.text()


def diff_convolution(
    base: dict[str, Any], slow: dict[str, Any], *, collapse: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Delay changes between two convolution paths files, biggest ``|change| x messages`` first.

    Paths are matched by their node sequence. The delay at hop k + 1 (``delays_s[k]``,
    most frequent first) is what ``nodes[k+1]`` takes between a message from
    ``nodes[k]`` and the one it sends on to ``nodes[k+2]``; each hop's delay (its median
    where both runs give one, else its most frequent) is compared and pooled over paths
    by that (from, at, to) triple, weighted by the slow run's message count on the later
    hop (a hop shared by several paths counts once).
    Node names matching a ``collapse`` glob are replaced by the glob. Each change has
    its ``label``, its triple as ``nodes``, ``at`` (the middle node), ``base_s``,
    ``slow_s``, ``change_s`` and ``messages``.

    Examples
    --------
    >>> def doc(d):
    ...     return {"format": "wirepath.paths/1", "algorithm": "convolution", "paths": [
    ...         {"nodes": ["c", "WS2", "AP1"], "delays_s": [[d]], "counts": [10, 8]}]}
    >>> c = diff_convolution(doc(0.001), doc(0.201))[0]
    >>> c["label"], round(c["change_s"], 3), c["messages"]
    ('c -> WS2 -> AP1', 0.2, 8)
    """
    _check_runs(base, slow, "convolution", ", not convolution")
    pooled = _pooled_delays(base, slow, collapse)
    out = []
    for (a, b, c), (w, sum_b, sum_s) in pooled.items():
        if w <= 0:
            continue
        out.append(
            {
                "label": f"{a} -> {b} -> {c}",
                "nodes": [a, b, c],
                "at": b,
                "base_s": sum_b / w,
                "slow_s": sum_s / w,
                "change_s": (sum_s - sum_b) / w,
                "messages": round(w),
            }
        )
    out.sort(key=lambda c: (-abs(c["change_s"]) * c["messages"], c["label"]))
    return out


def _compared(base: dict[str, Any], slow: dict[str, Any], k: int) -> tuple[float, float]:
    """Hop k's delay in each run: the medians where both runs give one (a median against
    a mode would be a change of statistic, not of delay), else the most frequent ones."""
    mb, ms = (p.get("medians_s") or [None] * len(p["delays_s"]) for p in (base, slow))
    if mb[k] is not None and ms[k] is not None:
        return float(mb[k]), float(ms[k])
    return float(base["delays_s"][k][0]), float(slow["delays_s"][k][0])


def _pooled_delays(
    base: dict[str, Any], slow: dict[str, Any], collapse: Sequence[str]
) -> dict[tuple[str, str, str], list[float]]:
    """(from, at, to) -> [weight, weighted base delay, weighted slow delay] over the
    paths of both runs, names collapsed, each shared hop prefix counted once."""
    by_nodes = {tuple(p["nodes"]): p for p in base["paths"]}
    pooled: dict[tuple[str, str, str], list[float]] = {}
    seen: set[tuple[str, ...]] = set()
    for sp in slow["paths"]:
        bp = by_nodes.get(tuple(sp["nodes"]))
        if bp is None:
            continue
        nodes = [replica_name(n, collapse) for n in sp["nodes"]]
        for k, (db, ds) in enumerate(zip(bp["delays_s"], sp["delays_s"], strict=True)):
            # Paths share their first hops (one vertex of the output graph): count each once.
            prefix = tuple(sp["nodes"][: k + 3])
            if not db or not ds or prefix in seen:
                continue
            seen.add(prefix)
            tb, ts = _compared(bp, sp, k)
            weight = float(sp["counts"][k + 1])
            acc = pooled.setdefault((nodes[k], nodes[k + 1], nodes[k + 2]), [0.0, 0.0, 0.0])
            acc[0] += weight
            acc[1] += weight * tb
            acc[2] += weight * ts
    return pooled
