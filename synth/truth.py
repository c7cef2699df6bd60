"""Ground truth of a synthetic trace: its patterns with true latencies, and its parallelism.

Memory stays bounded however long the trace: the true latencies kept for the
percentiles are thinned to a systematic sample once they pass ``_KEPT_VALUES``
(the first ``_HEAD`` instances of every pattern always stay; means and standard
deviations stay exact), and the distinct patterns may hold ``MAX_PATTERN_CALLS``
calls in all. A trace below the budget gets exact statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from synth.template import Batch, Template
from tracefmt import ParameterError
from tracefmt.patterns import Shape, latency_stats, path_id, pattern_id, shape_text

__all__ = ["MAX_PATTERN_CALLS", "PatternBook", "mean_parallelism"]

MAX_PATTERN_CALLS = 100_000  # calls of all distinct patterns together (their shapes are kept)
_KEPT_VALUES = 1 << 22  # latencies kept for percentiles, over all patterns (16 MB each kind)
_HEAD = 16  # the first instances of every pattern are always kept (at most 1.6 M values)
_PIECES = 64  # a pattern's kept values are joined into one array past this many pieces


@dataclass
class _Moments:
    """Count, mean and sum of squared deviations of each row, merged batch by batch."""

    n: int
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray) -> _Moments:
        x = x.astype(np.float64)
        mean = x.mean(axis=1)
        return cls(x.shape[1], mean, ((x - mean[:, None]) ** 2).sum(axis=1))

    def add(self, x: np.ndarray) -> None:
        other = _Moments.of(x)
        n = self.n + other.n
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.n / n)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.n * other.n / n)
        self.n = n

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.m2 / self.n)


@dataclass
class _Pattern:
    id: str
    template: int  # index of the template
    key: bytes
    slots: list[int]  # present slots, depth-first
    shape: Shape | None
    nodes: list[str] | None  # for linear (messages) patterns
    lat: list[np.ndarray] = field(default_factory=list)  # per-batch arrays (present slots, k)
    delay: list[np.ndarray] = field(default_factory=list)
    index: list[np.ndarray] = field(default_factory=list)  # which instances of the pattern are kept
    moments: tuple[_Moments, _Moments] | None = None  # (lat, delay) of all instances, once thinned
    order: tuple | None = None  # (slot, children...) in the shape's order, for nesting patterns
    total: float = 0.0
    count: int = 0


class PatternBook:
    """Patterns seen so far, keyed by template and instance shape."""

    def __init__(self, templates: list[Template], node_names: list[str]) -> None:
        self.templates = templates
        self.names = node_names
        self.patterns: list[_Pattern] = []
        self._by_key: dict[tuple[int, bytes], int] = {}
        self.calls = 0  # calls of all patterns
        self.level = 0  # instance j of a pattern is kept if j < _HEAD or j % 2**level == 0
        self.kept = 0  # latencies kept, over all patterns

    def classify(self, t: int, batch: Batch) -> np.ndarray:
        """Pattern index of every instance of a batch (new shapes are registered)."""
        codes = np.where(batch.present, batch.node + 1, 0).astype(np.int64)
        keys = np.vstack([batch.client[None, :].astype(np.int64), codes]).T
        base = len(self.names) + 1
        if keys.shape[1] * np.log2(base) < 62:
            # One int64 per shape (mixed radix): a 1-D unique is far cheaper than axis=0.
            packed = keys @ (base ** np.arange(keys.shape[1], dtype=np.int64))
            _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
            uniq = keys[first]
        else:
            uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        index = np.empty(len(uniq), np.int64)
        for u, row in enumerate(uniq):
            key = row.astype(np.int32).tobytes()
            found = self._by_key.get((t, key))
            if found is None:
                found = self._register(t, key, row)
            index[u] = found
        return index[inverse.ravel()]

    def _register(self, t: int, key: bytes, row: np.ndarray) -> int:
        tpl = self.templates[t]
        client = self.names[row[0]]
        present = [i for i in range(tpl.size) if row[i + 1] > 0]
        self.calls += len(present)
        if self.calls > MAX_PATTERN_CALLS:
            raise ParameterError(
                f"the instances take too many shapes: {len(self.patterns):,} distinct patterns hold more "
                f"than {MAX_PATTERN_CALLS:,} calls (the limit of the ground truth); fewer choices "
                "(to = [...]), optional calls (p) or repeat ranges make fewer patterns"
            )
        node = {i: self.names[row[i + 1] - 1] for i in present}
        if tpl.kind == "messages":
            nodes = [client] + [node[i] for i in present]
            pat = _Pattern(path_id(nodes), t, key, present, None, nodes)
        else:
            shape, order = self._shape(tpl, node, 0, client)
            pat = _Pattern(pattern_id(shape), t, key, present, shape, None, order=order)
        self.patterns.append(pat)
        self._by_key[(t, key)] = len(self.patterns) - 1
        return len(self.patterns) - 1

    @staticmethod
    def _shape(tpl: Template, node: dict[int, str], i: int, caller: str) -> tuple[Shape, tuple]:
        """The shape of slot ``i``'s visit and its slots in the shape's order: a parallel
        group of the template is a concurrent group, its children in canonical order."""
        groups = []
        for group in tpl.slots[i].children:
            built = [(*PatternBook._shape(tpl, node, c, node[i]), c) for c in group if c in node]
            if built:
                groups.append(sorted(built, key=lambda b: shape_text(b[0])))
        shape = Shape.grouped(caller, node[i], [[b[0] for b in g] for g in groups])
        return shape, (i, *(b[1] for g in groups for b in g))

    def add(self, t: int, batch: Batch, pattern: np.ndarray, keep: np.ndarray) -> None:
        """Record true latencies of the kept instances of a batch."""
        tpl = self.templates[t]
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return
        idx = idx[np.argsort(pattern[idx], kind="stable")]
        groups = np.split(idx, np.flatnonzero(np.diff(pattern[idx])) + 1)
        if tpl.kind == "messages":
            # A hop's "latency" is its delay after the previous hop.
            lat_all = np.diff(batch.t_call, axis=0, prepend=batch.t_call[:1])
            delay_all = lat_all
        else:
            lat_all = batch.t_ret - batch.t_call
            parent = np.array([max(s.parent, 0) for s in tpl.slots])
            delay_all = batch.t_call - batch.t_call[parent]
        for group in groups:
            pat = self.patterns[pattern[group[0]]]
            cells = np.ix_(pat.slots, group)
            if tpl.kind == "messages":
                total = batch.t_call[pat.slots[-1], group] - batch.t_call[pat.slots[0], group]
            else:
                total = lat_all[pat.slots[0], group]
            self._keep(pat, lat_all[cells].astype(np.float32), delay_all[cells].astype(np.float32))
            pat.total += float(total.sum())
            pat.count += group.size
        while self.kept > _KEPT_VALUES and self.level < 62:
            self._thin()

    def _kept(self, index: np.ndarray) -> np.ndarray:
        return (index < _HEAD) | (index % (1 << self.level) == 0)

    def _keep(self, pat: _Pattern, lat: np.ndarray, delay: np.ndarray) -> None:
        """Keep the latencies of a pattern's next instances that the sample takes."""
        if pat.moments is not None:
            pat.moments[0].add(lat)
            pat.moments[1].add(delay)
        elif self.level > 0:  # a pattern new since the sample was first thinned
            pat.moments = (_Moments.of(lat), _Moments.of(delay))
        index = pat.count + np.arange(lat.shape[1])
        keep = self._kept(index)
        taken = int(keep.sum())
        if not taken:
            return  # an empty piece per batch would grow the lists with the trace
        pat.lat.append(lat[:, keep])
        pat.delay.append(delay[:, keep])
        pat.index.append(index[keep])
        self.kept += lat.shape[0] * taken
        if len(pat.index) > _PIECES:
            # Once thinned, each batch adds a few values: join them so that the pieces'
            # per-array overhead does not grow with the trace either.
            pat.lat = [np.concatenate(pat.lat, axis=1)]
            pat.delay = [np.concatenate(pat.delay, axis=1)]
            pat.index = [np.concatenate(pat.index)]

    def _thin(self) -> None:
        """Halve the sample of every pattern (beyond its head); the first time, start
        exact running moments from the values, all of which are still there."""
        self.level += 1
        self.kept = 0
        for pat in self.patterns:
            if not pat.index:
                continue
            lat, delay = np.concatenate(pat.lat, axis=1), np.concatenate(pat.delay, axis=1)
            index = np.concatenate(pat.index)
            if pat.moments is None:
                pat.moments = (_Moments.of(lat), _Moments.of(delay))
            keep = self._kept(index)
            pat.lat, pat.delay, pat.index = [lat[:, keep]], [delay[:, keep]], [index[keep]]
            self.kept += lat.shape[0] * int(keep.sum())

    @staticmethod
    def _stats(values: np.ndarray, moments: _Moments | None, row: int) -> dict[str, float]:
        """Latency statistics of one row: percentiles from the values kept, mean and std
        over every instance."""
        stats = latency_stats(values)
        if moments is not None:
            stats["mean"], stats["std"] = float(moments.mean[row]), float(moments.std[row])
        return stats

    def _tree(self, pat: _Pattern, lat: np.ndarray, delay: np.ndarray) -> dict[str, Any]:
        """The pattern's visit tree with per-visit latency and per-edge delay statistics."""
        assert pat.shape is not None
        assert pat.order is not None
        row = {slot: k for k, slot in enumerate(pat.slots)}
        lat_m, delay_m = pat.moments or (None, None)

        def visit(order: tuple, shape: Shape, group: int | None) -> dict[str, Any]:
            i, kids = order[0], order[1:]
            numbers = shape.groups or [None] * len(kids)
            return {
                "node": shape.node,
                "caller": shape.caller,
                "latency_s": self._stats(lat[row[i]], lat_m, row[i]),
                "delay_s": None if i == pat.slots[0] else self._stats(delay[row[i]], delay_m, row[i]),
                **({} if group is None else {"group": group}),
                "children": [visit(o, s, g) for o, s, g in zip(kids, shape.children, numbers, strict=True)],
            }

        return visit(pat.order, pat.shape, None)

    def truth(self, *, messages: int, instances: int, parallelism: float) -> dict[str, Any]:
        """The truth file (``docs/files.md``): patterns by count, with true latency stats."""
        out = []
        for pat in self.patterns:
            if pat.count == 0:
                continue
            lat = np.concatenate(pat.lat, axis=1).astype(np.float64)
            delay = np.concatenate(pat.delay, axis=1).astype(np.float64)
            entry: dict[str, Any] = {"id": pat.id, "count": pat.count, "total_latency_s": pat.total}
            if pat.shape is None:
                assert pat.nodes is not None
                entry["nodes"] = pat.nodes
                delay_m = None if pat.moments is None else pat.moments[1]
                entry["hop_delays_s"] = [self._stats(delay[k], delay_m, k) for k in range(1, delay.shape[0])]
            else:
                entry["root"] = self._tree(pat, lat, delay)
            out.append(entry)
        out.sort(key=lambda e: (-e["count"], e["id"]))
        return {
            "format": "wirepath.truth/1",
            "messages": messages,
            "instances": instances,
            "mean_parallelism": parallelism,
            "patterns": out,
        }


def mean_parallelism(callee: np.ndarray, caller: np.ndarray, t_call: np.ndarray, t_ret: np.ndarray) -> float:
    """Mean number of candidate parents per child call, the paper's measure of parallelism.

    A candidate parent of a child call B->C is any call into B that started no later
    than the child's call and had not returned before the child returned (a parent with
    no own delay shares its child's timestamps, so both bounds are inclusive). Calls whose caller never
    receives a call (roots) are not children. Counted exactly with sorted blocks, in
    vectorized passes (no loop per call).

    Examples
    --------
    >>> # Two overlapping calls into B, each with one child B->C inside both.
    >>> callee = np.array([1, 1, 2, 2]); caller = np.array([0, 0, 1, 1])
    >>> t_call = np.array([0.0, 0.1, 0.2, 0.3]); t_ret = np.array([1.0, 1.1, 0.4, 0.5])
    >>> mean_parallelism(callee, caller, t_call, t_ret)
    2.0
    """
    total = 0
    children = 0
    for b in np.unique(caller):
        into = callee == b
        kids = caller == b
        if not into.any():
            continue
        order = np.argsort(t_call[into], kind="stable")
        s, e = t_call[into][order], t_ret[into][order]
        tc, tr = t_call[kids], t_ret[kids]
        prefix = np.searchsorted(s, tc, side="right")
        count = np.zeros(tc.size, np.int64)
        block = max(32, int(np.sqrt(s.size)))
        for lo in range(0, s.size, block):
            hi = min(lo + block, s.size)
            full = prefix >= hi
            if full.any():
                e_sorted = np.sort(e[lo:hi])
                count[full] += (hi - lo) - np.searchsorted(e_sorted, tr[full], side="left")
            part = (prefix > lo) & (prefix < hi)
            if part.any():
                q = np.flatnonzero(part)
                cols = np.arange(lo, hi)
                inside = cols[None, :] < prefix[q][:, None]
                count[q] += (inside & (e[lo:hi][None, :] >= tr[q][:, None])).sum(axis=1)
        total += int(count.sum())
        children += int(tc.size)
    return total / children if children else 0.0
