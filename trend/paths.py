"""Latency series from inferred paths: under names a user recognises, one trial per request.

A paths file (``wirepath infer ... --out``) gives each nesting pattern's and each visit's
*mean* latency: one number a run. MDL grouping cannot tell a run's noise from a change
with one sample a run, so an unchanged system's series split on noise. The instances
table (``infer nesting --instances``) holds every call with its inferred parent, instance
and pattern: from it each series gets one trial per request (the root latency of each
instance of the pattern) and per visit one trial per call at that place of the pattern,
and the grouping sees each run's spread (CSIT groups runs of trials the same way:
``jumpavg``'s runs are undivisible, with their trials' average and deviation).

Mapping an instance's calls onto its pattern's visits
-----------------------------------------------------
The paths file keys a visit by its place in the pattern's tree: the ``k``-th child of its
parent in the shape's canonical order (children in call order; children called at once,
a *concurrent group*, sorted by their subtree's text). The calls of an instance are put
in the same places without building a tree per instance:

1. every call's depth (pointer jumping) and its concurrent group among its siblings
   (``tracefmt.patterns.sibling_groups``, as ``infer`` numbers them);
2. a 64-bit hash of every subtree, bottom up a level at a time, that does not depend on
   the order of the children within a concurrent group; the same hash of every visit of
   the paths file's patterns;
3. top down a level at a time, a call's place is the visit under its parent's place with
   the same group and subtree hash; of equal siblings (a call repeated at once) the
   ``m``-th called takes the ``m``-th place, as ``infer`` orders equal texts by call time.

An instance whose root hash is not its pattern's (a pattern the paths file left out with
``--top`` or ``--min-count``) gives no trials; the mean of every visit's trials is the
paths file's mean latency of that visit.

Names
-----
A pattern's series is named by its shape text (``tracefmt.patterns.shape_text``), the
root's node followed by its operation in brackets where one operation makes at least
:data:`OP_SHARE` of the visit's labelled calls: ``path:client>nginx[GET /item/:id](nginx>app(app>backend))``.
A visit's series is the pattern's name, ``/`` and the visit's own call with its
operation, ``#n`` for the ``n``-th visit of the same text in the pattern (preorder):
``path:client>nginx[GET /item/:id](nginx>app(app>backend))/app>backend``. A shape text
longer than :data:`NAME_TEXT` characters is cut after its root, with the pattern id:
``path:client>nginx[GET /item/:id](... 41 visits) c8e6307e8e7bf729``. The names depend on
the pattern alone (its shape, stable between runs, and its dominant operations), never on
which other patterns a run found. Each series' tags hold its pattern id (``pattern:ID``)
and, for a visit, its place (``at:0/1``: child positions from the root).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt import ParameterError, ParseError, SchemaError, check_paths, hop_delays_s, read_paths
from tracefmt.hashing import mix64
from tracefmt.patterns import join_text, path_id, sibling_groups, tree_depths
from trend.numbers import check_number
from trend.series import RESULTS_SCHEMA, parse_time_ns
from trend.sources import MAX_TRIALS

__all__ = [
    "NAME_TEXT",
    "OP_SHARE",
    "InstanceTrials",
    "PathSeries",
    "PathsImport",
    "batch_means",
    "instance_trials",
    "path_series",
    "paths_import",
    "paths_results",
]

#: A visit's operation is named when it makes at least this share of the visit's
#: labelled calls: the visit *is* that operation, and the name does not flip between runs.
OP_SHARE = 0.9
#: The longest shape text a pattern's name holds; longer ones are cut after the root.
NAME_TEXT = 160
_P = np.uint64(0x9E3779B97F4A7C15)  # odd: its powers weight the groups of siblings


@dataclass(frozen=True)
class PathSeries:
    """The series of a paths file, one per nesting pattern and visit (in preorder) or per
    convolution path and hop: name, tags, the paths file's latency in seconds, and for
    nesting visits where they sit in the patterns (``parent``: the visit above, -1 at a
    root; ``group``: the concurrent group among its siblings; ``node`` and ``caller``:
    names). Convolution rows have ``parent`` -1 and no pattern."""

    names: list[str]
    tags: list[str]
    latency_s: np.ndarray
    pattern_ids: list[str]
    #: Per row, its pattern's instances in the run (-1 for convolution: not counted).
    count: np.ndarray
    #: Nesting only (empty for convolution): per visit, as described above.
    parent: np.ndarray
    group: np.ndarray
    node: list[str]
    caller: list[str]
    #: Per nesting pattern: the index of its root visit.
    roots: np.ndarray

    @property
    def nesting(self) -> int:
        """The visits of nesting patterns (the first rows)."""
        return int(self.parent.size)


def _top_op(visit: dict[str, Any]) -> str | None:
    """The visit's operation when one makes at least :data:`OP_SHARE` of its labelled calls
    (the shares listed; the node itself where patterns were told apart by operation)."""
    ops = visit.get("ops") or []
    if not ops:
        return None
    total = sum(float(o["share"]) for o in ops)
    op = str(ops[0]["op"])
    if total <= 0 or float(ops[0]["share"]) < OP_SHARE * total or str(visit["node"]).endswith(f" {op}"):
        return None
    return op


def _labelled(caller: str, node: str, op: str | None) -> str:
    return f"{caller}>{node}" + (f"[{op}]" if op else "")


def _pattern_name(
    pid: str, visits: list[dict[str, Any]], parent: list[int], groups: list[int], concurrent: list[bool]
) -> str:
    """The shape text of one pattern (its visits in preorder), the root's operation in it,
    cut after the root with the id when it is longer than :data:`NAME_TEXT`."""
    root = visits[0]
    head = _labelled(str(root["caller"]), str(root["node"]), _top_op(root))
    if len(visits) > 1 and sum(len(str(v["node"])) + len(str(v["caller"])) + 2 for v in visits) > NAME_TEXT:
        return f"{head}(... {len(visits) - 1} visits) {pid}"
    kids: list[list[int]] = [[] for _ in visits]
    for i in range(1, len(visits)):
        kids[parent[i]].append(i)
    texts: list[str] = [""] * len(visits)
    for i in range(len(visits) - 1, 0, -1):  # children after their parent in preorder
        v = visits[i]
        grouped = [groups[c] for c in kids[i]] if concurrent[i] else []
        texts[i] = join_text(str(v["caller"]), str(v["node"]), [texts[c] for c in kids[i]], grouped)
    grouped = [groups[c] for c in kids[0]] if concurrent[0] else []
    text = join_text("", "", [texts[c] for c in kids[0]], grouped)[1:]  # ">(...)" less its ">"
    return head + text


def _nesting_series(patterns: list[dict[str, Any]], prefix: str, out: dict[str, list[Any]]) -> None:
    """Rows of every pattern and visit, in preorder, into ``out``'s columns."""
    for p in patterns:
        pid = str(p["id"])
        base = len(out["parent"])
        visits: list[dict[str, Any]] = []
        parent: list[int] = []
        groups: list[int] = []
        at: list[str] = []
        concurrent: list[bool] = []
        # Preorder with a stack of its own: call chains run deeper than Python's recursion.
        stack: list[tuple[dict[str, Any], int, int, str]] = [(p["root"], -1, 0, "")]
        while stack:
            v, up, g, place = stack.pop()
            me = len(visits)
            visits.append(v)
            parent.append(up)
            groups.append(g)
            at.append(place)
            children = v.get("children") or []
            concurrent.append(any("group" in c for c in children))
            stack.extend(
                (c, me, int(c["group"]) if "group" in c else k, f"{place}/{k}" if place else str(k))
                for k, c in reversed(list(enumerate(children)))
            )
        name = prefix + _pattern_name(pid, visits, parent, groups, concurrent)
        seen: Counter[str] = Counter()
        for i, v in enumerate(visits):
            if i == 0:
                out["names"].append(name)
                out["tags"].append(f"pattern;pattern:{pid}")
            else:
                own = _labelled(str(v["caller"]), str(v["node"]), _top_op(v))
                seen[own] += 1
                out["names"].append(f"{name}/{own}" + (f"#{seen[own]}" if seen[own] > 1 else ""))
                out["tags"].append(f"visit;pattern:{pid};at:{at[i]}")
            out["latency_s"].append(float(v["latency_s"]["mean"]))
            out["pattern_ids"].append(pid)
            out["count"].append(int(p.get("count", -1)))
            out["parent"].append(-1 if parent[i] < 0 else base + parent[i])
            out["group"].append(groups[i])
            out["node"].append(str(v["node"]))
            out["caller"].append(str(v["caller"]))
        out["roots"].append(base)


def _convolution_series(paths: list[dict[str, Any]], prefix: str, out: dict[str, list[Any]]) -> None:
    """Rows of every convolution path (its latency) and hop (its most frequent delay, and
    its median in a series of its own where the run gives one)."""
    for path in paths:
        nodes = [str(n) for n in path["nodes"]]
        pid = str(path.get("id") or path_id(nodes))
        text = ">".join(nodes)
        name = prefix + (text if len(text) <= NAME_TEXT else f"{nodes[0]}>...>{nodes[-1]} {pid}")
        hops = hop_delays_s(path)
        total = path.get("latency_s")
        rows = [(name, f"pattern;path:{pid}", float(sum(hops) if total is None else total))]
        seen: Counter[str] = Counter()
        hop_names = []
        for k in range(len(nodes) - 1):
            own = f"{nodes[k]}>{nodes[k + 1]}"
            seen[own] += 1
            hop_names.append(f"{name}/{own}" + (f"#{seen[own]}" if seen[own] > 1 else ""))
        rows += [
            (hop_names[k], f"visit;path:{pid};at:{k}", float(d[0]))
            for k, d in enumerate(path["delays_s"])
            if d
        ]
        medians = path.get("medians_s") or []
        rows += [
            (f"{hop_names[k]}/median", f"visit;path:{pid};at:{k}", float(m))
            for k, m in enumerate(medians)
            if m is not None
        ]
        for n, tags, value in rows:
            out["names"].append(n)
            out["tags"].append(tags)
            out["latency_s"].append(value)
            out["pattern_ids"].append(pid)
            out["count"].append(-1)


def _unique(names: list[str], pattern_ids: list[str]) -> list[str]:
    """The names, any given twice (two shapes whose texts only node names holding
    ``>``, ``(`` or ``[`` make equal) told apart by their pattern id."""
    count = Counter(names)
    if len(count) == len(names):
        return names
    return [n if count[n] == 1 else f"{n} {pid}" for n, pid in zip(names, pattern_ids, strict=True)]


def path_series(doc: dict[str, Any], *, prefix: str = "path:", source: str = "<paths>") -> PathSeries:
    """The series a paths document gives, named as the module docstring says.

    Raises
    ------
    ParseError
        A pattern or path is malformed, or there are none.

    Examples
    --------
    >>> doc = {"patterns": [{"id": "p1", "root": {"node": "WS", "caller": "client",
    ...        "ops": [{"op": "GET /a", "share": 1.0}], "latency_s": {"mean": 0.02}, "children": [
    ...        {"node": "DB", "caller": "WS", "latency_s": {"mean": 0.01}, "children": []}]}}]}
    >>> path_series(doc).names
    ['path:client>WS[GET /a](WS>DB)', 'path:client>WS[GET /a](WS>DB)/WS>DB']
    """
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "names",
            "tags",
            "latency_s",
            "pattern_ids",
            "count",
            "parent",
            "group",
            "node",
            "caller",
            "roots",
        )
    }
    try:
        _nesting_series(doc.get("patterns") or [], prefix, out)
        _convolution_series(doc.get("paths") or [], prefix, out)
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise ParseError(source, 1, f"malformed pattern or path ({type(e).__name__}: {e})") from None
    if not out["names"]:
        raise ParseError(source, 1, "no patterns or paths in the file")
    if any(not n.strip() or n != n.strip() for n in out["names"]):
        raise ParameterError(f"--prefix {prefix!r} gives series names with spaces at an end or none")
    return PathSeries(
        names=_unique(out["names"], out["pattern_ids"]),
        tags=out["tags"],
        latency_s=np.array(out["latency_s"], np.float64),
        pattern_ids=out["pattern_ids"],
        count=np.array(out["count"], np.int64),
        parent=np.array(out["parent"], np.int64),
        group=np.array(out["group"], np.int64),
        node=out["node"],
        caller=out["caller"],
        roots=np.array(out["roots"], np.int64),
    )


# Instances onto visits -------------------------------------------------------------------


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every row under its root (parent -1); rows under a loop get -1."""
    depth, _, in_loop = tree_depths(parent)
    return np.where(in_loop, -1, depth)


def _subtree_hashes(
    caller: np.ndarray, callee: np.ndarray, parent: np.ndarray, group: np.ndarray, depth: np.ndarray
) -> np.ndarray:
    """A 64-bit hash of every subtree (names, structure and concurrent groups; the order
    of children within a group does not count), bottom up a level at a time."""
    h = mix64(caller.astype(np.uint64) * np.uint64(1_000_003) + callee.astype(np.uint64))
    kids_of = np.bincount(parent[parent >= 0], minlength=parent.size).astype(np.uint64)
    below = np.zeros(parent.size, np.uint64)  # the children's weighted sums
    top = int(group.max(initial=0)) + 2
    power = np.array([pow(int(_P), k, 1 << 64) for k in range(top)], np.uint64)
    with np.errstate(over="ignore"):
        for d in range(int(depth.max(initial=0)), -1, -1):
            level = np.flatnonzero(depth == d)
            h[level] = mix64((h[level] + below[level]) ^ mix64(kids_of[level]))
            if d == 0:
                break
            par, grp = parent[level], group[level]
            order = np.lexsort((grp, par))
            par, grp, done = par[order], grp[order], h[level[order]]
            cut = np.flatnonzero(np.r_[True, (par[1:] != par[:-1]) | (grp[1:] != grp[:-1])])
            sums = np.add.reduceat(done, cut)
            members = np.diff(np.r_[cut, par.size]).astype(np.uint64)
            weighted = mix64(sums ^ mix64(members + np.uint64(1 << 32))) * power[grp[cut] + 1]
            np.add.at(below, par[cut], weighted)
    return h


def _occurrence(parent: np.ndarray, group: np.ndarray, h: np.ndarray, order_key: np.ndarray) -> np.ndarray:
    """Per row with a parent, its rank among its siblings of the same group and subtree
    hash, by ``order_key`` (call time, or position in the paths file); 0 for the rest."""
    occ = np.zeros(parent.size, np.int64)
    kids = np.flatnonzero(parent >= 0)
    order = kids[np.lexsort((kids, order_key[kids], h[kids], group[kids], parent[kids]))]
    p, g, hh = parent[order], group[order], h[order]
    new = np.r_[True, (p[1:] != p[:-1]) | (g[1:] != g[:-1]) | (hh[1:] != hh[:-1])]
    start = np.flatnonzero(new)
    occ[order] = np.arange(order.size) - np.repeat(start, np.diff(np.r_[start, order.size]))
    return occ


def _place_keys(up_place: np.ndarray, group: np.ndarray, h: np.ndarray, occ: np.ndarray) -> np.ndarray:
    """One 64-bit key of (the parent's place, group, subtree hash, rank among equals)."""
    k = mix64(up_place.astype(np.uint64) + np.uint64(1))
    k = mix64(k ^ group.astype(np.uint64))
    k = mix64(k ^ h)
    return mix64(k ^ occ.astype(np.uint64))


def _codes(values: list[str], vocabulary: dict[str, int]) -> np.ndarray:
    """Codes of names into ``vocabulary``, adding the names it lacks."""
    return np.array([vocabulary.setdefault(v, len(vocabulary)) for v in values], np.int64)


def _column(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _names_of(table: pa.Table, column: str) -> tuple[np.ndarray, list[str]]:
    """A name column as codes (-1: none) and its distinct names."""
    col = _column(table, column)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    codes = col.indices.to_numpy(zero_copy_only=False)
    codes = np.where(col.is_valid().to_numpy(zero_copy_only=False), codes, -1).astype(np.int64)
    return codes, [str(s) for s in col.dictionary.to_pylist()]


@dataclass(frozen=True)
class InstanceTrials:
    """Per trial (one call at one visit), the visit (a row of :class:`PathSeries`), its
    latency in seconds and its call time (ns); and what was left out."""

    visit: np.ndarray
    latency_s: np.ndarray
    t_call_ns: np.ndarray
    instances: int
    #: Instances of patterns the paths file does not list (``--top``, ``--min-count``).
    unlisted: int
    #: Instances whose calls do not make their pattern's shape (a table of another run).
    unmatched: int


def _node_names(table: pa.Table, parent_row: np.ndarray, by_label: bool) -> tuple[list[str], list[str]]:
    """Every row's caller and callee name as the patterns name them: with ``by_label``,
    a callee is ``node operation`` and a child's caller its parent's callee."""
    callee, callee_names = _names_of(table, "callee")
    caller, caller_names = _names_of(table, "caller")
    if by_label:
        op, op_names = _names_of(table, "op")
        width = len(op_names) + 1
        keys, inverse = np.unique(callee * width + (op + 1), return_inverse=True)
        labelled = [
            callee_names[k // width] + ("" if k % width == 0 else f" {op_names[k % width - 1]}")
            for k in keys.tolist()
        ]
        callee_text = np.array(labelled, dtype=object)[inverse.ravel()]
        caller_text = np.where(
            parent_row >= 0,
            callee_text[np.maximum(parent_row, 0)],
            np.array(caller_names, dtype=object)[caller],
        )
        return caller_text.tolist(), callee_text.tolist()
    return (
        np.array(caller_names, dtype=object)[caller].tolist(),
        np.array(callee_names, dtype=object)[callee].tolist(),
    )


_INSTANCE_COLUMNS = ("caller", "callee", "t_call", "t_return", "parent", "instance", "pattern")


def instance_trials(series: PathSeries, table: pa.Table, *, source: str = "<instances>") -> InstanceTrials:
    """Every call of an instances table (``infer nesting --instances``) placed at its visit
    of the paths file's patterns (see the module docstring), with its latency.

    Raises
    ------
    SchemaError
        The table lacks a column this needs.
    """
    missing = [c for c in _INSTANCE_COLUMNS if c not in table.column_names]
    if missing:
        raise SchemaError(
            f"{source}: an instances table needs column {missing[0]!r} (infer nesting --instances)"
        )
    n = table.num_rows
    has_pairs = "pair" in table.column_names
    pair = _column(table, "pair").to_numpy(zero_copy_only=False) if has_pairs else np.arange(n)
    by_pair = np.argsort(pair, kind="stable")
    sorted_pairs = pair[by_pair]

    def rows_of(pairs: np.ndarray) -> np.ndarray:
        """The rows holding these pair numbers, -2 where none does."""
        if n == 0:
            return np.full(pairs.size, -2, np.int64)
        at = np.minimum(np.searchsorted(sorted_pairs, pairs), n - 1)
        return np.where(sorted_pairs[at] == pairs, by_pair[at], -2)

    par_col = _column(table, "parent")
    has_parent = par_col.is_valid().to_numpy(zero_copy_only=False)
    parent_row = np.full(n, -1, np.int64)
    parent_row[has_parent] = rows_of(par_col.to_numpy(zero_copy_only=False)[has_parent].astype(np.int64))
    root_row = rows_of(_column(table, "instance").to_numpy(zero_copy_only=False).astype(np.int64))
    # A row whose parent or root the table lacks (a filtered table) spoils its instance.
    bad = (parent_row == -2) | (root_row < 0)
    parent_row[parent_row == -2] = -1
    depth = _depths(parent_row)
    bad |= depth < 0
    depth[depth < 0] = 0

    t_call = _column(table, "t_call").cast(pa.int64()).to_numpy(zero_copy_only=False)
    t_return = _column(table, "t_return").cast(pa.int64()).to_numpy(zero_copy_only=False)
    # Concurrent groups among siblings, numbered as infer numbers them.
    kids = np.flatnonzero(parent_row >= 0)
    kids = kids[np.lexsort((kids, t_call[kids], parent_row[kids]))]
    group = np.zeros(n, np.int64)
    group[kids] = sibling_groups(parent_row[kids], t_call[kids], t_return[kids])[1]

    # Names in one vocabulary with the paths file's.
    plain = set(_names_of(table, "callee")[1]) | set(_names_of(table, "caller")[1])
    by_label = "op" in table.column_names and not set(series.node) <= plain
    vocabulary: dict[str, int] = {}
    doc_caller, doc_callee = _codes(series.caller, vocabulary), _codes(series.node, vocabulary)
    callers, callees = _node_names(table, parent_row, by_label)
    caller, callee = _codes(callers, vocabulary), _codes(callees, vocabulary)

    h = _subtree_hashes(caller, callee, parent_row, group, depth)
    m = series.nesting
    doc_depth = _depths(series.parent)
    doc_h = _subtree_hashes(doc_caller, doc_callee, series.parent, series.group, doc_depth)

    # Roots: the instance's pattern (by id) whose root has the instance's hash.
    roots = np.flatnonzero(parent_row < 0)
    pat_codes, pat_ids = _names_of(table, "pattern")
    root_of_id = {series.pattern_ids[r]: r for r in series.roots.tolist()}
    doc_root = np.array([root_of_id.get(p, -1) for p in pat_ids] + [-1], np.int64)[pat_codes]
    place = np.full(n, -1, np.int64)
    listed = doc_root[roots] >= 0
    match = listed & (doc_h[np.maximum(doc_root[roots], 0)] == h[roots])
    if bad.any():  # an instance with a call the table cannot place under it
        spoiled = np.zeros(n, bool)
        spoiled[root_row[bad & (root_row >= 0)]] = True
        match &= ~spoiled[roots]
    place[roots[match]] = doc_root[roots[match]]

    # Top down: a call's place is the visit under its parent's place that has its group,
    # subtree hash and rank among equal siblings.
    doc_occ = _occurrence(series.parent, series.group, doc_h, np.arange(m))
    doc_kids = np.flatnonzero(series.parent >= 0)
    doc_keys = _place_keys(
        series.parent[doc_kids], series.group[doc_kids], doc_h[doc_kids], doc_occ[doc_kids]
    )
    key_order = np.argsort(doc_keys)
    doc_keys, doc_kids = doc_keys[key_order], doc_kids[key_order]
    occ = _occurrence(parent_row, group, h, t_call)
    for d in range(1, int(depth.max(initial=0)) + 1):
        level = np.flatnonzero((depth == d) & (parent_row >= 0))
        level = level[place[parent_row[level]] >= 0]
        if not level.size or not doc_keys.size:
            break
        keys = _place_keys(place[parent_row[level]], group[level], h[level], occ[level])
        at = np.minimum(np.searchsorted(doc_keys, keys), doc_keys.size - 1)
        hit = doc_keys[at] == keys
        place[level[hit]] = doc_kids[at[hit]]
    placed = np.flatnonzero(place >= 0)
    placed = placed[np.lexsort((t_call[placed], place[placed]))]
    return InstanceTrials(
        visit=place[placed],
        latency_s=(t_return[placed] - t_call[placed]) * 1e-9,
        t_call_ns=t_call[placed],
        instances=int(roots.size),
        unlisted=int((~listed).sum()),
        unmatched=int((listed & ~match).sum()),
    )


# Results --------------------------------------------------------------------------------


def _paths_doc(source: str | os.PathLike[str] | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The paths file's name for messages and its document, checked to be one."""
    if isinstance(source, dict):
        check_paths(source, "<paths>")
        return "<paths>", source
    return str(source), read_paths(source)


def _results(
    series: PathSeries,
    visit: np.ndarray,
    values: np.ndarray,
    *,
    build: str,
    time_ns: int,
    testbed: str,
) -> pa.Table:
    """A results table (``RESULTS_SCHEMA``) of trials ``values`` of series rows ``visit``
    (sorted by visit), numbered 0, 1, ... within each series."""
    if not build.strip() or not testbed.strip():
        raise ParameterError("build and testbed must not be empty")
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        k = int(np.argmax(bad))
        raise ParameterError(f"{series.names[int(visit[k])]}: latency {values[k]:g} s is not a duration")
    n = values.size
    counts = np.bincount(visit, minlength=len(series.names))
    trial = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    names = pa.array(series.names, pa.string())
    tags = pa.array([t.split(";") for t in series.tags], pa.list_(pa.string()))
    index = pa.array(visit)

    def same(text: str) -> pa.Array:
        return pa.repeat(pa.scalar(text), n)

    return pa.table(
        {
            "test": names.take(index),
            "testbed": same(testbed.strip()),
            "build": same(build.strip()),
            "time": pa.array(np.full(n, time_ns, np.int64), pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            "trial": pa.array(trial.astype(np.int32), pa.int32()),
            "value": pa.array(values, pa.float64()),
            "unit": same("s"),
            "direction": same("smaller-is-better"),
            "tags": tags.take(index),
        },
        schema=RESULTS_SCHEMA,
    )


def batch_means(visit: np.ndarray, values: np.ndarray, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """Each visit's values (sorted by visit, in call order) as at most ``trials`` trials:
    consecutive batches of nearly equal size, each trial the mean of its batch (a visit
    with no more values keeps them). Returns the trials' visits and values.

    Examples
    --------
    >>> v, x = batch_means(np.array([0, 0, 0, 0, 1]), np.array([1.0, 3.0, 5.0, 7.0, 9.0]), 2)
    >>> v.tolist(), x.tolist()
    ([0, 0, 1], [2.0, 6.0, 9.0])
    """
    counts = np.bincount(visit)
    rank = np.arange(visit.size) - np.repeat(np.cumsum(counts) - counts, counts)
    size = counts[visit]
    batch = np.where(size > trials, rank * trials // np.maximum(size, 1), rank)
    keys, inverse = np.unique(
        visit.astype(np.int64) * (int(batch.max(initial=0)) + 1) + batch, return_inverse=True
    )
    inverse = inverse.ravel()
    sums = np.bincount(inverse, weights=values)
    n = np.bincount(inverse)
    return keys // (int(batch.max(initial=0)) + 1), sums / n


@dataclass(frozen=True)
class PathsImport:
    """What :func:`paths_import` made: the results table, the series of the paths file,
    the trials taken from an instances table (None without one) and the patterns left
    out for being seen fewer than ``min_count`` times."""

    table: pa.Table
    series: PathSeries
    trials: InstanceTrials | None
    rare_patterns: int


def paths_import(
    source: str | os.PathLike[str] | dict[str, Any],
    *,
    build: str,
    time_ns: int | None = None,
    testbed: str = "default",
    prefix: str = "path:",
    instances: str | os.PathLike[str] | pa.Table | None = None,
    min_count: int = 1,
    trials: int | None = None,
) -> PathsImport:
    """:func:`paths_results`, with what it took and left out (for a summary)."""
    min_count = int(check_number(min_count, "min_count", low=1, integer=True))
    if trials is not None:
        trials = int(check_number(trials, "trials", low=1, high=MAX_TRIALS, integer=True))
    name, doc = _paths_doc(source)
    if time_ns is None:
        end = (doc.get("trace") or {}).get("end")
        if end is None:
            raise ParameterError(f"{name} names no trace end: give the run's time (time_ns)")
        time_ns = parse_time_ns(end)
    series = path_series(doc, prefix=prefix, source=name)
    # A pattern seen a few times is no measurement of the run (and mostly an inference
    # mistake): its mean is one or two requests, which MDL splits on.
    kept = (series.count < 0) | (series.count >= min_count)
    rare = int((~kept[series.roots]).sum()) if series.roots.size else 0
    if not kept.any():
        raise ParameterError(
            f"{name}: every pattern was seen fewer than {min_count} times (min_count); give a smaller one"
        )
    if instances is None:
        visit = np.flatnonzero(kept)
        table = _results(
            series, visit, series.latency_s[visit], build=build, time_ns=time_ns, testbed=testbed
        )
        return PathsImport(table, series, None, rare)
    if doc.get("algorithm") != "nesting" or not series.nesting:
        raise ParameterError(f"{name}: an instances table goes with the patterns of infer nesting")
    if isinstance(instances, pa.Table):
        inst_table, inst_name = instances, "<instances>"
    else:
        from infer import read_instances  # costly to import: only here

        inst_table, inst_name = read_instances(instances), str(instances)
    taken = instance_trials(series, inst_table, source=inst_name)
    if taken.visit.size == 0:
        raise ParameterError(
            f"{inst_name}: none of its {taken.instances:,} instances is of a pattern of {name} "
            "(the instances table of another run?)"
        )
    mine = kept[taken.visit]
    visit, values = taken.visit[mine], taken.latency_s[mine]
    if trials is not None:
        visit, values = batch_means(visit, values, trials)
    table = _results(series, visit, values, build=build, time_ns=time_ns, testbed=testbed)
    return PathsImport(table, series, taken, rare)


def paths_results(
    source: str | os.PathLike[str] | dict[str, Any],
    *,
    build: str,
    time_ns: int | None = None,
    testbed: str = "default",
    prefix: str = "path:",
    instances: str | os.PathLike[str] | pa.Table | None = None,
    min_count: int = 1,
    trials: int | None = None,
) -> pa.Table:
    """Latency series rows from a paths file (``wirepath.paths/1``), one run of each.

    Nesting: a series per pattern (its root latency) and per visit (that visit's latency),
    named by the pattern's shape (see the module docstring). Without ``instances``, one
    trial a run: the paths file's mean. With ``instances`` (the table ``infer nesting
    --instances`` wrote for the same run, or its path), one trial per request at the
    pattern and per call at each visit, in call order. Convolution: a series per path
    (its ``latency_s``, else the sum of its most frequent hop delays) and per hop (its
    most frequent delay; ``.../median`` its median where the run gives one). The run's
    time is the trace's end unless ``time_ns`` is given. All are smaller-is-better, in
    seconds. ``min_count``: patterns seen fewer times in the run are left out with their
    visits. ``trials`` (with ``instances``): at most this many trials a run, each the mean
    of a batch of consecutive requests (:func:`batch_means`).

    Examples
    --------
    >>> doc = {"format": "wirepath.paths/1", "algorithm": "nesting", "trace": {"end": "2024-05-01T00:00:00Z"},
    ...        "patterns": [{"id": "p1", "count": 1, "total_latency_s": 0.02, "root": {"node": "WS",
    ...        "caller": "client", "latency_s": {"mean": 0.02}, "children": [{"node": "DB", "caller": "WS",
    ...        "latency_s": {"mean": 0.01}, "children": []}]}}]}
    >>> t = paths_results(doc, build="b1")
    >>> t.column("test").to_pylist(), t.column("value").to_pylist()
    (['path:client>WS(WS>DB)', 'path:client>WS(WS>DB)/WS>DB'], [0.02, 0.01])
    >>> t.column("tags").to_pylist()
    [['pattern', 'pattern:p1'], ['visit', 'pattern:p1', 'at:0']]
    """
    return paths_import(
        source,
        build=build,
        time_ns=time_ns,
        testbed=testbed,
        prefix=prefix,
        instances=instances,
        min_count=min_count,
        trials=trials,
    ).table
