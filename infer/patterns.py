"""Phase 5 of nesting: path instances from parent links, grouped into patterns.

Instances are the trees of calls under each root. Two instances share a pattern when
their shapes match (node names, tree structure, children in call order): a 64-bit hash
of every subtree is computed bottom up, level by level, then each distinct root hash
becomes one pattern, named by ``tracefmt.patterns.pattern_id`` of its shape. Latency
is attributed per visit (call to return, descendants included) and per edge (parent
call to child call), kept apart for each pattern.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from infer.callpairs import CallPairs
from tracefmt.hashing import mix64
from tracefmt.memory import collector_paused
from tracefmt.pathsfile import is_server_error
from tracefmt.patterns import Shape, join_text, shape_text, sibling_groups, text_id, tree_depths

__all__ = ["Pattern", "build_patterns", "group_stats"]

#: The statistics of a latency or delay distribution, in the paths file's order.
STAT_NAMES = ("mean", "p50", "p90", "p99", "std")

_P = np.uint64(0x9E3779B97F4A7C15)  # odd: powers of it never vanish mod 2**64


def _sorted_by_group(group: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` and ``group`` sorted by (group, value)."""
    group = group.astype(np.int64)
    if values.size and np.issubdtype(values.dtype, np.integer):
        lo = int(values.min())
        bits = (int(values.max()) - lo).bit_length()
        if bits + int(group.max()).bit_length() <= 62:
            # Group and value packed in one int64: a single plain sort, no argsort.
            key = np.sort((group << bits) | (values.astype(np.int64) - lo))
            return (key & ((1 << bits) - 1)) + lo, key >> bits
    # One sort of values, then one of (group, value rank) keys: faster than lexsort.
    by_value = np.argsort(values, kind="stable")
    rank = np.empty(values.size, np.int64)
    rank[by_value] = np.arange(values.size)
    width = max(values.size, 1)
    key = np.sort(group * width + rank)
    return values[by_value[key % width]], key // width


def group_stats(
    group: np.ndarray, values: np.ndarray, n_groups: int, *, scale: float = 1.0
) -> dict[str, np.ndarray]:
    """``latency_stats`` of every group at once (numpy's linear percentiles), no loop per group.

    Integer ``values`` (nanoseconds, say) sort fastest; ``scale`` multiplies every
    result (1e-9 for seconds).

    Examples
    --------
    >>> g = group_stats(np.array([0, 0, 0, 1]), np.array([1.0, 2.0, 3.0, 5.0]), 2)
    >>> g["p50"].tolist(), g["mean"].tolist()
    ([2.0, 5.0], [2.0, 5.0])
    >>> group_stats(np.array([1, 0, 1]), np.array([3, 7, 1]), 2, scale=0.5)["p50"].tolist()
    [3.5, 1.0]
    """
    v, g = _sorted_by_group(group, values)
    v = v.astype(np.float64) * scale
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


@dataclass
class Pattern:
    """One path pattern: a shape, its instances' count and per-visit latencies."""

    id: str
    shape: Shape
    count: int
    total_latency_s: float
    #: Per visit in preorder: mean, p50, p90, p99, std of the latency (call to return)
    #: and of the delay (parent call to this call; NaN at the root), in seconds.
    latency_table: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    delay_table: np.ndarray = field(default_factory=lambda: np.zeros((0, 5)))
    #: The probability that an instance of the pattern is exactly right: the mean over
    #: its instances of theirs (``build_patterns``' ``instance_map``; None: not known).
    confidence: float | None = None
    #: Per visit in preorder: its most frequent operations (``infer.operations``) and
    #: the share of its calls each makes, most frequent first (empty: no labels).
    operations: list[list[tuple[str, float]]] = field(default_factory=list)
    #: Per visit in preorder: its returns' most frequent statuses and their shares.
    statuses: list[list[tuple[str, float]]] = field(default_factory=list)
    #: Per visit in preorder: the share of its returns with a server error
    #: (:func:`tracefmt.pathsfile.is_server_error`); empty: no statuses.
    errors: list[float] = field(default_factory=list)

    @property
    def shape_text(self) -> str:
        return shape_text(self.shape)

    @property
    def latency(self) -> list[dict[str, float]]:
        """Per visit in preorder: the latency statistics as in the paths file."""
        return [dict(zip(STAT_NAMES, row, strict=True)) for row in self.latency_table.tolist()]

    @property
    def delay(self) -> list[dict[str, float] | None]:
        """Per visit in preorder: the delay statistics (None at the root)."""
        rows = self.delay_table.tolist()
        return [None, *(dict(zip(STAT_NAMES, row, strict=True)) for row in rows[1:])] if rows else []

    def to_json(self) -> dict[str, Any]:
        """The pattern in the paths-file form of ``docs/files.md``."""
        latency, delay = self.latency, self.delay
        position = iter(range(len(latency)))

        def visit(s: Shape, group: int | None) -> dict[str, Any]:
            k = next(position)
            ops = self.operations[k] if self.operations else []
            status = self.statuses[k] if self.statuses else []
            return {
                "node": s.node,
                "caller": s.caller,
                **({"ops": [{"op": op, "share": share} for op, share in ops]} if ops else {}),
                **({"status": [{"status": c, "share": share} for c, share in status]} if status else {}),
                **({"errors": self.errors[k]} if self.errors and self.errors[k] > 0 else {}),
                "latency_s": latency[k],
                "delay_s": delay[k],
                # Only children of a visit with a concurrent group carry their group's number.
                **({} if group is None else {"group": group}),
                "children": [],
            }

        # Preorder (the visit tables' order) with a stack of its own, as deep as the
        # deepest call chain.
        top: list[dict[str, Any]] = []
        stack: list[tuple[Shape, int | None, list[dict[str, Any]]]] = [(self.shape, None, top)]
        while stack:
            s, group, siblings = stack.pop()
            v = visit(s, group)
            siblings.append(v)
            numbers = s.groups or [None] * len(s.children)
            stack.extend(
                (c, g, v["children"]) for c, g in reversed(list(zip(s.children, numbers, strict=True)))
            )
        root = top[0]

        return {
            "id": self.id,
            "count": self.count,
            **({} if self.confidence is None else {"confidence": self.confidence}),
            "total_latency_s": self.total_latency_s,
            "root": root,
        }


def depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth of every pair and its root (itself for a root), by pointer jumping
    (O(log depth) passes); ``ValueError`` when the links form a loop.

    Examples
    --------
    >>> [a.tolist() for a in depths(np.array([-1, 0, 1, -1]))]
    [[0, 1, 2, 0], [0, 0, 0, 3]]
    """
    depth, up, in_loop = tree_depths(parent)
    if in_loop.any():
        raise ValueError("parent links form a loop: every call must have a root above it")
    return depth, up


def log_confidence_by(labels: np.ndarray, confidence: np.ndarray, size: int) -> np.ndarray:
    """Per label (an instance's root, say), the sum of its calls' log-confidences: the
    log of their product, -inf where one is 0.

    >>> log_confidence_by(np.array([0, 0, 2]), np.array([0.5, 0.5, 1.0]), 3).round(3).tolist()
    [-1.386, 0.0, 0.0]
    """
    with np.errstate(divide="ignore"):
        return np.bincount(labels, weights=np.log(confidence), minlength=size)


@dataclass(frozen=True)
class _Children:
    """Every pair with a parent, sorted by (parent, call time), with its concurrent group
    (``sibling_groups``) and depth; ``n_children`` is per pair."""

    kids: np.ndarray
    parent: np.ndarray  # each kid's parent
    depth: np.ndarray
    starts: np.ndarray  # first child of its parent
    new_group: np.ndarray
    group_number: np.ndarray
    n_children: np.ndarray

    @classmethod
    def of(cls, pairs: CallPairs, parent: np.ndarray, depth: np.ndarray) -> _Children:
        # Pairs are in call-time order already, so a stable sort by parent gives
        # (parent, call time, index).
        kids = np.flatnonzero(parent >= 0)
        kids = kids[np.argsort(parent[kids], kind="stable")]
        kid_parent = parent[kids]
        starts = np.ones(kids.size, bool)
        starts[1:] = kid_parent[1:] != kid_parent[:-1]
        new_group, group_number = sibling_groups(kid_parent, pairs.t_call[kids], pairs.t_return[kids])
        n_children = np.bincount(kid_parent, minlength=parent.size)
        return cls(kids, kid_parent, depth[kids], starts, new_group, group_number, n_children)


def _subtree_hashes(
    pairs: CallPairs, parent: np.ndarray, ch: _Children, max_depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """Every pair's subtree hash and size, deepest level first.

    Within a concurrent group the children's hashes are summed (any order gives the
    same sum); each group's mixed sum is weighted by the group's position.
    """
    kids, kid_parent, n_children = ch.kids, ch.parent, ch.n_children
    h = mix64(pairs.caller.astype(np.uint64) * np.uint64(1_000_003) + pairs.callee.astype(np.uint64))
    size = np.ones(parent.size, np.int64)
    # Powers of an odd constant mod 2**64 (exact Python ints; one per group position).
    power = np.array(
        [pow(int(_P), k, 1 << 64) for k in range(int(ch.group_number.max(initial=0)) + 2)], np.uint64
    )
    for d in range(max_depth, 0, -1):
        level = np.flatnonzero(ch.depth == d)
        c = kids[level]
        done = mix64(h[c] ^ mix64(n_children[c].astype(np.uint64)))
        # Siblings are adjacent (kids are sorted by parent), and so are the members of a group.
        par = kid_parent[level]
        if par.size:
            cut = np.concatenate([[True], par[1:] != par[:-1]])
            grun = np.flatnonzero(cut | ch.new_group[level])
            members = np.diff(np.append(grun, par.size)).astype(np.uint64)
            sums = np.add.reduceat(done, grun)
            weighted = (
                mix64(sums ^ mix64(members + np.uint64(1 << 32))) * power[ch.group_number[level[grun]] + 1]
            )
            gpar = par[grun]
            prun = np.flatnonzero(np.concatenate([[True], gpar[1:] != gpar[:-1]]))
            h[gpar[prun]] += np.add.reduceat(weighted, prun)
            run = np.flatnonzero(cut)
            size[par[run]] += np.add.reduceat(size[c], run)
        h[c] = done
    roots = np.flatnonzero(parent < 0)
    h[roots] = mix64(h[roots] ^ mix64(n_children[roots].astype(np.uint64)))
    return h, size


def _shapes(
    pairs: CallPairs, names: list[str], ch: _Children, h: np.ndarray, root: np.ndarray, rep_root: np.ndarray
) -> tuple[list[tuple[Shape, str]], dict[int, tuple[Shape, str]]]:
    """The shape and text of each representative instance (roots ``rep_root``), and of
    every distinct subtree met on the way, by subtree hash.

    Shapes are built in Python for one representative instance per pattern only, from
    plain lists of those instances' calls (local numbers). Equal subtree hashes, equal
    shapes: each shape and its text is built once. Children of a concurrent group are
    put in the order of their texts.
    """
    n = root.size
    in_rep = np.zeros(n, bool)
    in_rep[rep_root] = True
    in_rep = in_rep[root]
    sub = np.flatnonzero(in_rep)
    local = np.full(n, -1, np.int64)
    local[sub] = np.arange(sub.size)
    n_kids = ch.n_children[sub]
    first = np.concatenate([[0], np.cumsum(n_kids)[:-1]]).tolist()
    n_kids = n_kids.tolist()
    rep_kid = in_rep[ch.kids]
    sub_kids = local[ch.kids[rep_kid]].tolist()  # kids are sorted by parent, as sub is
    sub_group = ch.group_number[rep_kid].tolist()
    key_of = h[sub].tolist()
    name = np.asarray(names, dtype=object)
    caller_of, callee_of = name[pairs.caller[sub]].tolist(), name[pairs.callee[sub]].tolist()
    memo: dict[int, tuple[Shape, str]] = {}

    def build(i: int) -> None:
        lo = first[i]
        built = [(sub_group[j], *memo[key_of[c]]) for j, c in enumerate(sub_kids[lo : lo + n_kids[i]], lo)]
        built.sort(key=lambda b: (b[0], b[2]))
        numbers = [b[0] for b in built]
        groups = tuple(numbers) if len(set(numbers)) < len(numbers) else ()
        a, b = caller_of[i], callee_of[i]
        memo[key_of[i]] = (
            Shape(a, b, tuple(k[1] for k in built), groups),
            join_text(a, b, [k[2] for k in built], groups),
        )

    def shape(top: int) -> tuple[Shape, str]:
        # Children before their parent, with a stack of its own: a call chain thousands of
        # levels deep (real traces have them) would overflow Python's recursion.
        stack = [(top, False)]
        while stack:
            i, kids_done = stack.pop()
            if key_of[i] in memo:
                continue
            if kids_done:
                build(i)
                continue
            stack.append((i, True))
            lo = first[i]
            stack.extend((c, False) for c in sub_kids[lo : lo + n_kids[i]] if key_of[c] not in memo)
        return memo[key_of[top]]

    rep_local = local[rep_root].tolist()
    with collector_paused():
        shapes = [shape(i) for i in rep_local]
    return shapes, memo


def _preorder_positions(
    ch: _Children, h: np.ndarray, size: np.ndarray, memo: dict[int, tuple[Shape, str]], max_depth: int
) -> np.ndarray:
    """Preorder position of every call within its instance, its shape's visit order.

    Every subtree of every instance has a representative's twin (``memo``): the
    subtrees are ranked by text, so that children sit in their shape's order, (group,
    text, call time).
    """
    texts = sorted((t, k) for k, (_, t) in memo.items())
    known = np.array([k for _, k in texts], np.uint64)
    # ``known`` is in text order; sorted by hash for the search, each keeps its text rank.
    text_rank = np.argsort(known)
    known = known[text_rank]
    kid_rank = text_rank[np.minimum(np.searchsorted(known, h[ch.kids]), known.size - 1)]
    canon = np.lexsort((ch.kids, kid_rank, ch.group_number, ch.parent))
    kids, kid_parent, kid_depth = ch.kids[canon], ch.parent[canon], ch.depth[canon]
    # The canonical order keeps each parent's children together where they were, so
    # ``starts`` still marks the first of each.
    order_pos = np.zeros(h.size, np.int64)
    csize = size[kids]
    cum = np.cumsum(csize)
    group_cum_start = (cum - csize)[ch.starts][np.cumsum(ch.starts) - 1]
    sib_before = cum - csize - group_cum_start
    for d in range(1, max_depth + 1):
        level = kid_depth == d
        order_pos[kids[level]] = order_pos[kid_parent[level]] + 1 + sib_before[level]
    return order_pos


def _visit_tables(
    pairs: CallPairs, parent: np.ndarray, group: np.ndarray, n_groups: int, first_group: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per (pattern, visit position) ``group``: the latency and delay statistics, one
    row each in ``STAT_NAMES`` order (no delay at the roots, ``first_group``)."""
    lat_stats = group_stats(group, pairs.t_return - pairs.t_call, n_groups, scale=1e-9)
    kid = np.flatnonzero(parent >= 0)
    delay_stats = group_stats(group[kid], pairs.t_call[kid] - pairs.t_call[parent[kid]], n_groups, scale=1e-9)
    lat_rows = np.column_stack([lat_stats[k] for k in STAT_NAMES])
    delay_rows = np.column_stack([delay_stats[k] for k in STAT_NAMES])
    delay_rows[first_group] = np.nan  # the roots
    return lat_rows, delay_rows


def _sorted_patterns(patterns: list[Pattern], sort: str) -> tuple[list[Pattern], np.ndarray]:
    """``patterns`` by total latency (or, with ``sort="count"``, by count), ties by id,
    and each pattern's new index."""
    if sort == "count":
        order = sorted(range(len(patterns)), key=lambda i: (-patterns[i].count, patterns[i].id))
    else:
        order = sorted(range(len(patterns)), key=lambda i: (-patterns[i].total_latency_s, patterns[i].id))
    remap = np.empty(len(patterns), np.int64)
    remap[order] = np.arange(len(order))
    return [patterns[i] for i in order], remap


def _instance_patterns(h: np.ndarray, roots: np.ndarray, root: np.ndarray) -> tuple[np.ndarray, ...]:
    """Each distinct root hash is a pattern: per root its pattern, per pair its
    instance's, and each pattern's first root (its representative)."""
    pat_of_root = np.unique(h[roots], return_inverse=True)[1].ravel()
    by_root = np.empty(root.size, np.int64)
    by_root[roots] = pat_of_root
    rep_root = roots[np.unique(pat_of_root, return_index=True)[1]]
    return pat_of_root, by_root[root], rep_root


def _by_operation(
    pairs: CallPairs, parent: np.ndarray, names: list[str], operations: tuple[np.ndarray, list[str]]
) -> tuple[CallPairs, list[str]]:
    """``pairs`` whose callee is the node with the call's operation (``web GET
    /cart/:id``; the node alone where the call has none), and each child's caller its
    parent's; the names, the first ones ``names``.

    Examples
    --------
    >>> p = CallPairs(np.array([0, 1]), np.array([1, 2]), *(np.zeros(2, np.int64),) * 4, 0, 0, 0)
    >>> q, names = _by_operation(p, np.array([-1, 0]), ["c", "w", "d"], (np.array([0, -1]), ["GET /a"]))
    >>> [names[i] for i in q.caller], [names[i] for i in q.callee]
    (['c', 'w GET /a'], ['w GET /a', 'd'])
    """
    codes, ops = operations
    width = len(ops) + 1
    keys, node = np.unique(pairs.callee * width + (codes + 1), return_inverse=True)
    named = [names[k // width] + ("" if k % width == 0 else f" {ops[k % width - 1]}") for k in keys.tolist()]
    callee = len(names) + node.ravel()
    caller = np.where(parent >= 0, callee[np.maximum(parent, 0)], pairs.caller)
    return replace(pairs, caller=caller, callee=callee), [*names, *named]


def _pattern_list(
    shapes: list[tuple[Shape, str]],
    count: np.ndarray,
    total: np.ndarray,
    confidence: np.ndarray | None,
    rows: tuple[np.ndarray, np.ndarray],
    first_group: np.ndarray,
    visits: np.ndarray,
    ops: list[list[tuple[str, float]]] | None = None,
    statuses: list[list[tuple[str, float]]] | None = None,
    errors: np.ndarray | None = None,
) -> list[Pattern]:
    """One ``Pattern`` per shape, with its rows of the visit tables (``rows``: latency
    and delay) and its visits' operations (``ops``, per group)."""
    lat_rows, delay_rows = rows
    patterns: list[Pattern] = []
    with collector_paused():
        for u, (g0, nv) in enumerate(zip(first_group.tolist(), visits.tolist(), strict=True)):
            s, text = shapes[u]
            at = slice(g0, g0 + nv)
            conf = None if confidence is None else float(confidence[u])
            patterns.append(
                Pattern(
                    text_id(text),
                    s,
                    int(count[u]),
                    float(total[u]),
                    lat_rows[at],
                    delay_rows[at],
                    conf,
                    ops[g0 : g0 + nv] if ops else [],
                    statuses[g0 : g0 + nv] if statuses else [],
                    errors[g0 : g0 + nv].tolist() if errors is not None else [],
                )
            )
    return patterns


#: The operations (and statuses) kept per visit, most frequent first.
TOP_PER_VISIT = 3


def error_shares(group: np.ndarray, codes: np.ndarray, n_groups: int, names: list[str]) -> np.ndarray:
    """Per group, the share of its calls whose return's status is a server error
    (:func:`tracefmt.pathsfile.is_server_error`: an HTTP 5xx, a gRPC code of the server's
    failing, a database's ``ERROR``, a DNS ``SERVFAIL``, a Redis error; ``codes`` index
    ``names``, -1 for none).

    Examples
    --------
    >>> error_shares(np.array([0, 0, 0, 0, 1]), np.array([0, 1, 0, -1, 0]), 2, ["200", "503"]).tolist()
    [0.25, 0.0]
    >>> names = ["OK", "UNAVAILABLE", "NOT_FOUND", "ERROR 42P01"]
    >>> error_shares(np.array([0, 0, 1, 1]), np.array([0, 1, 2, 3]), 2, names).tolist()
    [0.5, 0.5]
    """
    bad = np.array([is_server_error(n) for n in names] + [False], bool)
    is_error = bad[np.where(codes >= 0, codes, len(names))]
    calls = np.bincount(group, minlength=n_groups)
    return np.bincount(group, weights=is_error, minlength=n_groups) / np.maximum(calls, 1)


def top_per_visit(
    group: np.ndarray, codes: np.ndarray, n_groups: int, names: list[str]
) -> list[list[tuple[str, float]]]:
    """Per group (a pattern's visit), its ``TOP_PER_VISIT`` most frequent values (an
    operation, a status) and the share of the group's calls each is (``codes``: a value
    per call, -1 for none).

    Examples
    --------
    >>> top_per_visit(np.array([0, 0, 0, 1]), np.array([1, 1, 0, -1]), 2, ["GET /a", "GET /b"])
    [[('GET /b', 0.6666666666666666), ('GET /a', 0.3333333333333333)], []]
    """
    calls = np.bincount(group, minlength=n_groups)
    ok = codes >= 0
    width = max(len(names), 1)
    keys, n = np.unique(group[ok] * width + codes[ok], return_counts=True)
    g, c = keys // width, keys % width
    order = np.lexsort((c, -n, g))  # per group, most frequent first (ties by code)
    g, c, n = g[order], c[order], n[order]
    rank = np.arange(g.size) - np.searchsorted(g, g, side="left")
    out: list[list[tuple[str, float]]] = [[] for _ in range(n_groups)]
    for gi, ci, ni in zip(*(a[rank < TOP_PER_VISIT].tolist() for a in (g, c, n)), strict=True):
        out[gi].append((names[ci], ni / int(calls[gi])))
    return out


def build_patterns(
    pairs: CallPairs,
    parent: np.ndarray,
    names: list[str],
    *,
    sort: str = "total",
    confidence: np.ndarray | None = None,
    instance_map: Callable[[np.ndarray], np.ndarray] | None = None,
    operations: tuple[np.ndarray, list[str]] | None = None,
    statuses: tuple[np.ndarray, list[str]] | None = None,
    by_operation: bool = False,
) -> tuple[list[Pattern], np.ndarray, np.ndarray]:
    """Instances and patterns from parent links; returns (patterns, instance, pattern index).

    Children a call makes at once (``sibling_groups``) form an unordered concurrent
    group: instances whose concurrent calls left in different orders share a pattern.
    With ``confidence`` (each pair's probability that its parent is right), each
    pattern gets the mean over its instances of the probability that the instance is
    exactly right: ``instance_map`` of the sum of its calls' log-confidences, by default
    their product. With ``operations`` (a code per pair and the operations' names,
    ``infer.operations.operation_codes``), each visit lists its most frequent ones; so with
    ``statuses`` (a code per pair of its return's status), and each visit's error share.
    ``by_operation``: patterns told apart by their visits' operations too (a visit's
    node is ``node operation``, ``web GET /cart/:id``), so each endpoint has patterns of
    its own.
    """
    n = parent.size
    if n == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    if by_operation and operations is not None:
        pairs, names = _by_operation(pairs, parent, names, operations)
    depth, root = depths(parent)
    max_depth = int(depth.max())
    ch = _Children.of(pairs, parent, depth)
    h, size = _subtree_hashes(pairs, parent, ch, max_depth)
    roots = np.flatnonzero(parent < 0)
    pat_of_root, pattern_index, rep_root = _instance_patterns(h, roots, root)
    shapes, memo = _shapes(pairs, names, ch, h, root, rep_root)
    # One group per (pattern, visit position), numbered in that order: a pattern's
    # groups follow those of the patterns before it, one per visit.
    visits = size[rep_root]
    first_group = np.concatenate([[0], np.cumsum(visits)[:-1]])
    group = first_group[pattern_index] + _preorder_positions(ch, h, size, memo, max_depth)
    rows = _visit_tables(pairs, parent, group, int(visits.sum()), first_group)
    n_patterns = rep_root.size
    count = np.bincount(pat_of_root, minlength=n_patterns)
    lat = (pairs.t_return - pairs.t_call) / 1e9
    total = np.bincount(pat_of_root, weights=lat[roots], minlength=n_patterns)
    pattern_confidence = None
    if confidence is not None:
        right_whole = (instance_map or np.exp)(log_confidence_by(root, confidence, n)[roots])
        pattern_confidence = np.bincount(pat_of_root, weights=right_whole, minlength=n_patterns)
        pattern_confidence /= np.maximum(count, 1)
    n_groups = int(visits.sum())
    ops = None if operations is None else top_per_visit(group, operations[0], n_groups, operations[1])
    st = errors = None
    if statuses is not None:
        st = top_per_visit(group, statuses[0], n_groups, statuses[1])
        errors = error_shares(group, statuses[0], n_groups, statuses[1])
    patterns = _pattern_list(
        shapes, count, total, pattern_confidence, rows, first_group, visits, ops, st, errors
    )
    patterns, remap = _sorted_patterns(patterns, sort)
    return patterns, root, remap[pattern_index]
