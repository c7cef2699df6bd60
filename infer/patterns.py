"""Phase 5 of nesting: path instances from parent links, grouped into patterns.

Instances are the trees of calls under each root. Two instances share a pattern when
their shapes match (node names, tree structure, children in call order): a 64-bit hash
of every subtree is computed bottom up, level by level, then each distinct root hash
becomes one pattern, named by ``tracefmt.patterns.pattern_id`` of its shape. Latency
is attributed per visit (call to return, descendants included) and per edge (parent
call to child call), kept apart for each pattern.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from infer.callpairs import CallPairs
from tracefmt.patterns import Shape, pattern_id, shape_text

__all__ = ["Pattern", "build_patterns", "group_stats"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_P = np.uint64(0x9E3779B97F4A7C15)  # odd: powers of it never vanish mod 2**64


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a well-spread 64-bit hash of a 64-bit value."""
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


def group_stats(group: np.ndarray, values: np.ndarray, n_groups: int) -> dict[str, np.ndarray]:
    """``latency_stats`` of every group at once (numpy's linear percentiles), no loop per group.

    Examples
    --------
    >>> g = group_stats(np.array([0, 0, 0, 1]), np.array([1.0, 2.0, 3.0, 5.0]), 2)
    >>> g["p50"].tolist(), g["mean"].tolist()
    ([2.0, 5.0], [2.0, 5.0])
    """
    order = np.lexsort((values, group))
    v, g = values[order], group[order]
    count = np.bincount(g, minlength=n_groups)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    safe = np.maximum(count, 1)
    mean = np.bincount(g, weights=v, minlength=n_groups) / safe
    var = np.bincount(g, weights=(v - mean[g]) ** 2, minlength=n_groups) / safe
    out = {"mean": mean, "std": np.sqrt(var)}
    for q in (50, 90, 99):
        pos = q / 100 * (safe - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, safe - 1)
        vlo = v[np.minimum(first + lo, max(v.size - 1, 0))] if v.size else np.zeros(n_groups)
        vhi = v[np.minimum(first + hi, max(v.size - 1, 0))] if v.size else np.zeros(n_groups)
        out[f"p{q}"] = np.where(count > 0, vlo + (vhi - vlo) * (pos - lo), 0.0)
    return out


def _stats_at(stats: dict[str, np.ndarray], k: int) -> dict[str, float]:
    return {name: float(stats[name][k]) for name in ("mean", "p50", "p90", "p99", "std")}


@dataclass
class Pattern:
    """One path pattern: a shape, its instances' count and per-visit latencies."""

    id: str
    shape: Shape
    count: int
    total_latency_s: float
    latency: list[dict[str, float]] = field(default_factory=list)  # per visit, preorder
    delay: list[dict[str, float] | None] = field(default_factory=list)

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)

    def to_json(self) -> dict[str, Any]:
        """The pattern in the paths-file form of ``results.md``."""
        position = iter(range(len(self.latency)))

        def visit(s: Shape) -> dict[str, Any]:
            k = next(position)
            return {
                "node": s.node,
                "caller": s.caller,
                "latency_s": self.latency[k],
                "delay_s": self.delay[k],
                "children": [visit(c) for c in s.children],
            }

        return {
            "id": self.id,
            "count": self.count,
            "total_latency_s": self.total_latency_s,
            "root": visit(self.shape),
        }


def _depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth of every pair and its root, by pointer jumping (O(log depth) passes)."""
    n = parent.size
    idx = np.arange(n)
    up = np.where(parent >= 0, parent, idx)
    depth = (parent >= 0).astype(np.int64)
    while True:
        nxt = up[up]
        moved = nxt != up
        if not moved.any():
            break
        depth = depth + np.where(moved, depth[up], 0)
        up = nxt
    return depth, up


def build_patterns(
    pairs: CallPairs, parent: np.ndarray, names: list[str], *, sort: str = "total"
) -> tuple[list[Pattern], np.ndarray, np.ndarray]:
    """Instances and patterns from parent links; returns (patterns, instance, pattern index)."""
    n = parent.size
    if n == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    depth, root = _depths(parent)
    # Children in call order: sorted by (parent, call time, index).
    kids = np.flatnonzero(parent >= 0)
    kids = kids[np.lexsort((kids, pairs.t_call[kids], parent[kids]))]
    kid_parent = parent[kids]
    starts = np.ones(kids.size, bool)
    starts[1:] = kid_parent[1:] != kid_parent[:-1]
    pos = np.arange(kids.size)
    rank = pos - np.maximum.accumulate(np.where(starts, pos, 0))
    n_children = np.bincount(kid_parent, minlength=n)

    # Subtree hashes and sizes, deepest level first.
    h = _mix(pairs.caller.astype(np.uint64) * np.uint64(1_000_003) + pairs.callee.astype(np.uint64))
    size = np.ones(n, np.int64)
    kid_depth = depth[kids]
    max_depth = int(depth.max())
    # Powers of an odd constant mod 2**64 (exact Python ints; one per child position).
    power = np.array([pow(int(_P), k, 1 << 64) for k in range(int(rank.max(initial=0)) + 2)], np.uint64)
    for d in range(max_depth, 0, -1):
        level = kid_depth == d
        c = kids[level]
        done = _mix(h[c] ^ _mix(n_children[c].astype(np.uint64)))
        np.add.at(h, kid_parent[level], done * power[rank[level] + 1])
        np.add.at(size, kid_parent[level], size[c])
        h[c] = done
    roots = np.flatnonzero(parent < 0)
    h[roots] = _mix(h[roots] ^ _mix(n_children[roots].astype(np.uint64)))

    # Preorder position of every call within its instance, top level first.
    order_pos = np.zeros(n, np.int64)
    sib_before = np.zeros(kids.size, np.int64)
    csize = size[kids]
    cum = np.cumsum(csize)
    group_cum_start = (cum - csize)[starts][np.cumsum(starts) - 1]
    sib_before = cum - csize - group_cum_start
    for d in range(1, max_depth + 1):
        level = kid_depth == d
        order_pos[kids[level]] = order_pos[kid_parent[level]] + 1 + sib_before[level]

    uniq, pat_of_root = np.unique(h[roots], return_inverse=True)
    pattern_index = pat_of_root.ravel()[np.searchsorted(roots, root)]

    lat = (pairs.t_return - pairs.t_call) / 1e9
    delay = np.where(parent >= 0, (pairs.t_call - pairs.t_call[np.maximum(parent, 0)]) / 1e9, np.nan)
    # One group per (pattern, visit position): latency and delay statistics of all at once.
    _, group = np.unique(pattern_index * (int(size.max()) + 1) + order_pos, return_inverse=True)
    group = group.ravel()
    n_groups = int(group.max()) + 1
    lat_stats = group_stats(group, lat, n_groups)
    is_child = parent >= 0
    delay_stats = group_stats(group[is_child], delay[is_child], n_groups)
    first_member = np.zeros(n_groups, np.int64)
    first_member[group[::-1]] = np.arange(n - 1, -1, -1)

    patterns: list[Pattern] = []
    rep_root = roots[np.unique(pat_of_root.ravel(), return_index=True)[1]]
    count = np.bincount(pat_of_root.ravel(), minlength=uniq.size)
    total = np.bincount(pat_of_root.ravel(), weights=lat[roots], minlength=uniq.size)

    # Child ranges of every call at once; only the representatives' trees are built.
    first_kid = np.searchsorted(kid_parent, np.arange(n))
    last_kid = np.searchsorted(kid_parent, np.arange(1, n + 1))

    def shape(i: int) -> Shape:
        children = kids[first_kid[i] : last_kid[i]].tolist()
        return Shape(names[pairs.caller[i]], names[pairs.callee[i]], tuple(shape(c) for c in children))

    for u in range(uniq.size):
        s = shape(int(rep_root[u]))
        patterns.append(Pattern(pattern_id(s), s, int(count[u]), float(total[u])))
    # Groups are numbered in (pattern, preorder position) order.
    for k in range(n_groups):
        i = first_member[k]
        pat = patterns[int(pattern_index[i])]
        pat.latency.append(_stats_at(lat_stats, k))
        pat.delay.append(None if parent[i] < 0 else _stats_at(delay_stats, k))
    if sort == "count":
        order = sorted(range(len(patterns)), key=lambda i: (-patterns[i].count, patterns[i].id))
    else:
        order = sorted(range(len(patterns)), key=lambda i: (-patterns[i].total_latency_s, patterns[i].id))
    remap = np.empty(len(patterns), np.int64)
    remap[order] = np.arange(len(order))
    return [patterns[i] for i in order], root, remap[pattern_index]
