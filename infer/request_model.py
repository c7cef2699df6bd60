"""Request rounds of the nesting algorithm: whole visits scored against the shapes the
trace itself shows, and the parents of blocks of calls chosen together by an exact
solver.

The rounds before (``infer.chains``) move one call, swap two or move a run of calls
made at once, each judged with the rest held fixed. Where requests overlap heavily
that search settles on answers in which a visit has taken some of another visit's
calls: each visit alone still looks plausible. Three things change here:

**The shapes of visits are learnt from sure visits.** A *visit* is a call into a node;
its *type* is (caller, node, the call's label where the trace has one: a URL, a gRPC
method); its *shape* the multiset of its children's classes (callee and label). A
visit is *sure* when every call its node makes during it has no other candidate
parent: its shape is read off the trace, whatever any assignment says. The shapes of a
type's sure visits make its *grammar*, each with its share; a shape no sure visit
shows costs ``UNSEEN_SHAPE`` nats (as good as ruled out, still finite, so the answer
held before stays a way out). So "a compose-review visit stores either nothing or one
review, one user review and one movie review" is learnt from the data, never told.
Types with fewer than ``MIN_SURE`` sure visits learn their grammar from the current
answer instead.

**Whole requests are scored.** Per request type (the root call's type) and call class,
the distribution of how many such calls a request makes, learnt from the current
answer: "every request makes exactly one review-storage call" is a count of 1 in
nearly every request.

**Parents are chosen jointly.** The calls with more than one candidate and their
candidate parents form a bipartite graph; each connected component is a *window*, cut
by call time into pieces of at most ``window`` visits (a call whose candidates lie in
two pieces keeps its parent in that round; pieces shift by half from one round to the
next). In a window every visit's possible child tuples are enumerated (its calls that
are sure or held fixed, plus a choice of the free calls that gives a shape of its
grammar, and the tuple it has now), scored by the chain model's likelihood of the
whole tuple (``ChainModel.chain_likelihood``) plus the shape's log-share, and cut to
the ``tuples`` best per visit. An integer program (``scipy.optimize.milp``, HiGHS)
then picks one tuple per visit so that every free call is in exactly one, maximising
the tuples' scores plus the requests' count terms. Blocks of calls can so be exchanged
among several requests at once, and since the tuples held before are always among the
choices, a round never lowers the objective.

The chain model a round judges by is learnt from the answer it starts from.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from infer.callpairs import CallPairs
from infer.chains import ChainModel, chain_edges
from infer.params import NestingParams
from infer.patterns import depths

__all__ = [
    "MIN_SURE",
    "UNSEEN_SHAPE",
    "Grammar",
    "RequestRound",
    "RequestTerm",
    "Window",
    "call_kinds",
    "request_log_likelihood",
    "request_rounds",
    "solve_window",
    "sure_visits",
    "window_objective",
]

#: Nats a shape that no sure visit of its type shows is charged: measured on media at
#: load 125, requests fully right 57.9% with 20 against 56.4% with no charge beyond the
#: shape's Laplace share.
UNSEEN_SHAPE = 20.0
#: Sure visits a type needs for its grammar to be learnt from them.
MIN_SURE = 5
#: Answers' shapes a type without enough sure visits keeps: those of at least this
#: share of its visits (and seen twice).
_ANSWER_SHARE = 0.01
#: Tuples one shape of one visit may enumerate before that shape is skipped for it.
_MAX_COMBINATIONS = 64
#: The solver's time per window, in seconds: past it the window keeps its parents.
_TIME_LIMIT = 0.25


def call_kinds(pairs: CallPairs, labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per call pair its visit type (caller, callee, label) and its class as a child
    (callee, label), each as dense codes.

    >>> from infer.callpairs import CallPairs
    >>> p = CallPairs(np.array([0, 1, 1]), np.array([1, 2, 2]), np.array([0, 1, 2]),
    ...     np.array([9, 3, 4]), np.arange(3), np.arange(3), 0, 0, 0)
    >>> [k.tolist() for k in call_kinds(p, np.array([0, 5, 6]))]
    [[0, 1, 2], [0, 1, 2]]
    """
    lab = np.zeros(len(pairs), np.int64) if labels is None else labels.astype(np.int64) + 1
    width = np.int64(lab.max(initial=0) + 1)
    nodes = np.int64(max(int(pairs.caller.max(initial=0)), int(pairs.callee.max(initial=0))) + 1)
    vtype = np.unique((pairs.caller * nodes + pairs.callee) * width + lab, return_inverse=True)[1]
    klass = np.unique(pairs.callee * width + lab, return_inverse=True)[1]
    return vtype.ravel().astype(np.int64), klass.ravel().astype(np.int64)


def sure_visits(n: int, cand_c: np.ndarray, cand_p: np.ndarray) -> np.ndarray:
    """Whether each call's children are sure: no call that could be its child has
    another candidate parent (a call with no candidate children at all is sure).

    >>> sure_visits(4, np.array([1, 2, 2, 3]), np.array([0, 0, 1, 1])).tolist()
    [False, False, True, True]
    """
    ambiguous = np.bincount(cand_c, minlength=n) > 1
    sure = np.ones(n, bool)
    sure[cand_p[ambiguous[cand_c]]] = False
    return sure


@dataclass
class Grammar:
    """Per visit type, the shapes its visits take and each one's log-share.

    ``shapes[t]`` maps a shape (a sorted tuple of ``(class, count)``) to its log-share
    among the type's visits; ``floor[t]`` is the log-share of any other shape.
    """

    shapes: dict[int, dict[tuple[tuple[int, int], ...], float]]
    floor: dict[int, float]

    @classmethod
    def learn(
        cls,
        vtype: np.ndarray,
        klass: np.ndarray,
        parent: np.ndarray,
        sure: np.ndarray,
        *,
        min_sure: int = MIN_SURE,
        unseen: float = UNSEEN_SHAPE,
    ) -> Grammar:
        """Shapes from the sure visits of each type with at least ``min_sure`` of them,
        from the current answer (``parent``) for the rest.

        >>> vtype = np.zeros(8, np.int64); vtype[4:] = 1
        >>> klass = np.array([0, 0, 0, 0, 1, 1, 1, 1])
        >>> g = Grammar.learn(vtype, klass, np.array([-1, -1, -1, -1, 0, 1, 2, 3]),
        ...     np.ones(8, bool), min_sure=2)
        >>> sorted(g.shapes[0]), sorted(g.shapes[1])
        ([((1, 1),)], [()])
        """
        n = vtype.size
        shapes: dict[int, dict[tuple[tuple[int, int], ...], float]] = {}
        floor: dict[int, float] = {}
        n_sure = np.bincount(vtype[sure], minlength=int(vtype.max(initial=0)) + 1)
        from_sure = n_sure[vtype] >= min_sure
        learnt = np.where(from_sure, sure, True)
        shape = _shapes_of(klass, parent, n)
        counts: dict[int, Counter] = defaultdict(Counter)
        for t, s in zip(vtype[learnt].tolist(), (shape[i] for i in np.flatnonzero(learnt)), strict=True):
            counts[t][s] += 1
        strict = set(vtype[from_sure].tolist())
        for t, seen in counts.items():
            total = sum(seen.values())
            keep = (
                dict(seen)
                if t in strict
                else {s: k for s, k in seen.items() if k >= 2 and k >= _ANSWER_SHARE * total}
            )
            shapes[t] = {s: float(np.log((k + 0.5) / (total + 1.0))) for s, k in keep.items()}
            floor[t] = float(np.log(0.5 / (total + 1.0))) - (unseen if t in strict else 0.0)
        return cls(shapes, floor)

    def score(self, t: int, shape: tuple[tuple[int, int], ...]) -> float:
        """The log-share of ``shape`` among visits of type ``t``."""
        return self.shapes.get(t, {}).get(shape, self.floor.get(t, 0.0))


def _shapes_of(klass: np.ndarray, parent: np.ndarray, n: int) -> list[tuple[tuple[int, int], ...]]:
    """Each call's shape: its children's classes with their counts, sorted."""
    kid = np.flatnonzero(parent >= 0)
    width = int(klass.max(initial=0)) + 1
    keys, counts = np.unique(parent[kid] * width + klass[kid], return_counts=True)
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for key, c in zip(keys.tolist(), counts.tolist(), strict=True):
        out[key // width].append((key % width, c))
    return [tuple(s) for s in out]


def request_log_likelihood(
    pairs: CallPairs,
    parent: np.ndarray,
    model: ChainModel,
    grammar: Grammar | None,
    vtype: np.ndarray,
    klass: np.ndarray,
) -> float:
    """Mean log-likelihood per call of ``parent``'s request trees under ``model`` and
    ``grammar``: every visit's chain of events and its shape's log-share (the tuples'
    scores of a request round, over the whole trace); without a grammar, the chains
    alone (what chain rounds judge by).

    >>> from infer.callpairs import CallPairs
    >>> p = CallPairs(np.array([0, 1]), np.array([1, 2]), np.array([0, 1]),
    ...     np.array([9, 3]), np.arange(2), np.arange(2), 0, 0, 0)
    >>> parent = np.array([-1, 0])
    >>> vtype, klass = call_kinds(p)
    >>> m = ChainModel.learn(p, parent, NestingParams(), 3)
    >>> g = Grammar.learn(vtype, klass, parent, np.ones(2, bool), min_sure=1)
    >>> bool(np.isfinite(request_log_likelihood(p, parent, m, g, vtype, klass)))
    True
    """
    n = len(pairs)
    if n == 0:
        return 0.0
    chains = float(model.lookup(model.cells(pairs, *chain_edges(pairs, parent))).sum())
    if grammar is None:
        return chains / n
    shapes = _shapes_of(klass, parent, n)
    prior = sum(grammar.score(t, s) for t, s in zip(vtype.tolist(), shapes, strict=True))
    return (chains + prior) / n


def _shape(klasses: list[int]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted(Counter(klasses).items()))


@dataclass
class _Requests:
    """Per request type and call class, the log-probability of each count of such calls
    in one request, learnt from an answer; and each call's request."""

    root: np.ndarray
    count: dict[tuple[int, int], int]
    log_p: dict[tuple[int, int], np.ndarray]

    @classmethod
    def learn(cls, vtype: np.ndarray, klass: np.ndarray, parent: np.ndarray) -> _Requests:
        root = depths(parent)[1]
        kid = np.flatnonzero(parent >= 0)
        width = int(klass.max(initial=0)) + 1
        keys, counts = np.unique(root[kid] * width + klass[kid], return_counts=True)
        where = zip((keys // width).tolist(), (keys % width).tolist(), strict=True)
        count = dict(zip(where, counts.tolist(), strict=True))
        roots = np.flatnonzero(parent < 0)
        seen: dict[int, set[int]] = defaultdict(set)
        for r, k in count:
            seen[int(vtype[r])].add(k)
        hist: dict[tuple[int, int], Counter] = defaultdict(Counter)
        for r in roots.tolist():
            t = int(vtype[r])
            for k in seen[t]:
                hist[(t, k)][count.get((r, k), 0)] += 1
        log_p = {}
        for key, h in hist.items():
            total = sum(h.values())
            top = max(h) + 2
            seen_m = np.array([h.get(m, 0) for m in range(top + 1)])
            log_p[key] = np.log((seen_m + 0.1) / (total + 0.1 * (top + 1)))
        return cls(root, count, log_p)


@dataclass(frozen=True)
class RequestTerm:
    """One request's count of one class of calls in a window's program: the tuples
    that add such calls (``tuples``) and how many (``counts``), the count held outside
    the window, the most likely total, and the cost of each call above and below it."""

    tuples: np.ndarray
    counts: np.ndarray
    outside: int
    mode: int
    up: float
    down: float

    @classmethod
    def of(cls, tuples: np.ndarray, counts: np.ndarray, outside: int, log_p: np.ndarray) -> RequestTerm:
        """The term whose totals have the log-probabilities ``log_p`` (0, 1, ...)."""
        mode = int(np.argmax(log_p))
        up = float(log_p[mode] - log_p[mode + 1]) if mode + 1 < log_p.size else 1.0
        down = float(log_p[mode] - log_p[mode - 1]) if mode > 0 else 0.0
        return cls(tuples, counts, outside, mode, up, down)


@dataclass
class Window:
    """A window's integer program: tuples (``owner``: its visit; members in ``kids``
    between ``start[j]`` and ``start[j + 1]``; ``score``), the free calls each must be
    in exactly one of, and the request terms (``req_rows``: per (request, class) the
    tuples' counts and the count held outside; ``req_logp``)."""

    visits: np.ndarray
    free: np.ndarray
    owner: np.ndarray
    kids: np.ndarray
    start: np.ndarray
    score: np.ndarray
    current: np.ndarray
    req_terms: list[RequestTerm]


def solve_window(w: Window) -> np.ndarray | None:
    """The tuple chosen for each visit of window ``w`` (indices into its tuples, one
    per visit, in the order of ``w.visits``), maximising the tuples' scores plus the
    request terms with every free call in exactly one chosen tuple; None when the
    solver finds no solution in its time (the window keeps its parents).

    >>> w = Window(np.array([0, 1]), np.array([5, 6]), np.array([0, 0, 1, 1]),
    ...     np.array([5, 6, 6, 5]), np.array([0, 1, 2, 3, 4]), np.array([1.0, 3.0, 1.0, 0.5]),
    ...     np.array([0, 2]), [])
    >>> solve_window(w).tolist()
    [1, 3]
    """
    n_t = w.owner.size
    vpos = np.searchsorted(w.visits, w.owner)
    seq = np.repeat(np.arange(n_t), np.diff(w.start))
    fpos = np.searchsorted(w.free, w.kids)
    is_free = (fpos < w.free.size) & (w.free[np.minimum(fpos, w.free.size - 1)] == w.kids)
    rows = [vpos, w.visits.size + fpos[is_free]]
    cols = [np.arange(n_t), seq[is_free]]
    vals = [np.ones(n_t), np.ones(int(is_free.sum()))]
    n_rows = w.visits.size + w.free.size
    lo = [np.ones(n_rows)]
    cost = [-w.score]
    n_cols = n_t
    for term in w.req_terms:
        # The chosen tuples' count, less a slack above plus one below, is the most
        # likely total; each slack costs the fall of the log-probability a call away
        # (a V about the mode: convex, so the relaxation stays tight).
        rows += [np.full(term.tuples.size + 2, n_rows)]
        cols += [np.concatenate([term.tuples, [n_cols, n_cols + 1]])]
        vals += [np.concatenate([term.counts.astype(float), [-1.0, 1.0]])]
        lo.append(np.array([float(term.mode - term.outside)]))
        cost.append(np.array([term.up, term.down]))
        n_rows += 1
        n_cols += 2
    entries = (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols)))
    a = csr_matrix(entries, shape=(n_rows, n_cols))
    b = np.concatenate(lo)
    c = np.concatenate(cost)
    upper = np.full(n_cols, np.inf)
    upper[:n_t] = 1.0
    # The linear relaxation first: for most windows its optimum is already whole.
    lp = linprog(c, A_eq=a, b_eq=b, bounds=np.column_stack([np.zeros(n_cols), upper]), method="highs")
    if lp.x is not None and np.all(np.minimum(lp.x[:n_t], 1 - lp.x[:n_t]) < 1e-9):
        chosen = np.flatnonzero(lp.x[:n_t] > 0.5)
        return chosen[np.argsort(vpos[chosen], kind="stable")]
    res = milp(
        c,
        constraints=LinearConstraint(a, b, b),
        integrality=(upper == 1.0).astype(int),
        bounds=Bounds(0, upper),
        options={"time_limit": _TIME_LIMIT, "presolve": False},
    )
    if res.x is None:
        return None
    chosen = np.flatnonzero(res.x[:n_t] > 0.5)
    chosen = chosen[np.argsort(vpos[chosen], kind="stable")]
    # Out of time, the solver's best may be worse than what the window holds.
    if not res.success and window_objective(w, chosen) < window_objective(w, w.current):
        return None
    return chosen


def window_objective(w: Window, chosen: np.ndarray) -> float:
    """The objective of ``w``'s integer program at the tuples ``chosen``: their scores
    less each request term's cost at the totals they make."""
    picked = np.zeros(w.owner.size, bool)
    picked[chosen] = True
    total = float(w.score[chosen].sum())
    for term in w.req_terms:
        off = term.outside + int(term.counts[picked[term.tuples]].sum()) - term.mode
        total -= term.up * off if off > 0 else -term.down * off
    return total


@dataclass(frozen=True)
class RequestRound:
    """One request round's outcome: the new parents, the calls moved, the rise of the
    objective (nats) and the windows solved, cut, or left for the solver's time."""

    parent: np.ndarray
    moved: int
    gain: float
    windows: int
    tuples: int
    timed_out: int


def _windows(
    pairs: CallPairs,
    cand_c: np.ndarray,
    cand_p: np.ndarray,
    cand_s: np.ndarray,
    parent: np.ndarray,
    size: int,
    shift: bool,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """The windows of the ambiguous calls: per window its visits (sorted), its free
    calls (sorted), and their candidate pairs ``(c, p)`` within it with their scores.

    The ambiguous calls and their candidates form a bipartite graph; each connected
    component's visits, in call order, are cut into pieces of ``size`` (shifted by
    half a piece with ``shift``). A call is free in the piece of the parent it has,
    among its candidates there.
    """
    n = len(pairs)
    ambiguous = np.bincount(cand_c, minlength=n) > 1
    keep = ambiguous[cand_c]
    c, p, sc = cand_c[keep], cand_p[keep], cand_s[keep]
    if c.size == 0:
        return
    graph = coo_matrix((np.ones(c.size), (c, p)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    visits = np.unique(p)
    order = visits[np.lexsort((pairs.t_call[visits], label[visits]))]
    ocomp = label[order]
    rank = np.arange(order.size) - np.searchsorted(ocomp, ocomp, side="left")
    piece = np.full(n, -1, np.int64)
    piece[order] = ocomp * np.int64(n + 1) + (rank + (size // 2 if shift else 0)) // size
    home = piece[np.maximum(parent[c], 0)]
    inside = (parent[c] >= 0) & (piece[p] == home)
    srt = np.flatnonzero(inside)[np.argsort(home[inside], kind="stable")]
    c, p, sc, key = c[srt], p[srt], sc[srt], home[srt]
    bounds = np.flatnonzero(np.diff(key)) + 1
    for cs, ps, ss in zip(np.split(c, bounds), np.split(p, bounds), np.split(sc, bounds), strict=True):
        yield np.unique(ps), np.unique(cs), cs, ps, ss


def request_round(
    pairs: CallPairs,
    cand_c: np.ndarray,
    cand_p: np.ndarray,
    cand_s: np.ndarray,
    parent: np.ndarray,
    model: ChainModel,
    grammar: Grammar,
    vtype: np.ndarray,
    klass: np.ndarray,
    *,
    window: int,
    tuples: int,
    shift: bool,
    requests: bool = True,
) -> RequestRound:
    """One request round from ``parent``: every window's integer program solved."""
    tc = pairs.t_call
    kids_of: dict[int, list[int]] = defaultdict(list)
    kid = np.flatnonzero(parent >= 0)
    for c, v in zip(kid.tolist(), parent[kid].tolist(), strict=True):
        kids_of[v].append(c)
    reqs = _Requests.learn(vtype, klass, parent) if requests else None
    # Every window's tuples first, so that the chain model scores them in one pass.
    built = []
    all_owner, all_kids, all_len, all_prior = [], [], [], []
    for visits, free, cs, ps, ss in _windows(pairs, cand_c, cand_p, cand_s, parent, window, shift):
        is_free = set(free.tolist())
        cands: dict[int, list[tuple[float, int]]] = defaultdict(list)
        for c, v, sc in zip(cs.tolist(), ps.tolist(), ss.tolist(), strict=True):
            cands[v].append((sc, c))
        owners, members, current, priors = [], [], [], []
        for v in visits.tolist():
            mine = kids_of.get(v, [])
            fixed = [c for c in mine if c not in is_free]
            t_v = int(vtype[v])
            current.append(len(owners))
            owners.append(v)
            members.append(tuple(mine))
            priors.append(grammar.score(t_v, _shape(klass[mine].tolist())))
            for t, shape in _visit_tuples(fixed, mine, cands[v], grammar.shapes.get(t_v, {}), klass):
                owners.append(v)
                members.append(t)
                priors.append(grammar.shapes[t_v][shape])
        built.append((visits, free, owners, current))
        all_owner += owners
        all_kids += [c for t in members for c in t]
        all_len += [len(t) for t in members]
        all_prior += priors
    if not built:
        return RequestRound(parent.copy(), 0, 0.0, 0, 0, 0)
    owner = np.array(all_owner, np.int64)
    lengths = np.array(all_len, np.int64)
    seq = np.repeat(np.arange(owner.size), lengths)
    kids = np.array(all_kids, np.int64)
    # Each tuple's children in call order, as chains are read.
    order = np.lexsort((kids, tc[kids], seq))
    kids = kids[order]
    score = model.chain_likelihood(pairs, owner, kids, seq) + np.array(all_prior)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    out = parent.copy()
    gain, n_tuples, timed_out, at = 0.0, 0, 0, 0
    for visits, free, owners, current in built:
        j = np.arange(at, at + len(owners))
        at += len(owners)
        w_score = score[j]
        w_owner = owner[j]
        # The best ``tuples`` of each visit, and the one it holds now.
        keep = _top_per_visit(w_owner, w_score, np.array(current), tuples)
        j, w_owner, w_score = j[keep], w_owner[keep], w_score[keep]
        cur = np.searchsorted(keep, current)
        w_kids = [kids[starts[i] : starts[i + 1]] for i in j]
        w_start = np.concatenate([[0], np.cumsum([k.size for k in w_kids])])
        flat = np.concatenate(w_kids) if w_kids else np.zeros(0, np.int64)
        terms = _request_terms(reqs, visits, w_owner, flat, w_start, klass, vtype, kids_of) if reqs else []
        win = Window(visits, free, w_owner, flat, w_start, w_score, cur, terms)
        n_tuples += w_owner.size
        if _held_is_best(win):
            continue
        chosen = solve_window(win)
        if chosen is None:
            timed_out += 1
            continue
        gain += float(w_score[chosen].sum() - w_score[cur].sum())
        for t in chosen.tolist():
            out[flat[w_start[t] : w_start[t + 1]]] = w_owner[t]
    moved = int(np.count_nonzero(out != parent))
    return RequestRound(out, moved, gain, len(built), n_tuples, timed_out)


def _visit_tuples(
    fixed: list[int],
    mine: list[int],
    cands: list[tuple[float, int]],
    shapes: dict[tuple[tuple[int, int], ...], float],
    klass: np.ndarray,
) -> Iterator[tuple[tuple[int, ...], tuple[tuple[int, int], ...]]]:
    """The tuples of children a visit could have besides its own (``mine``): its
    ``fixed`` children plus a choice among the free calls it is a candidate of
    (``cands``, each with its score as a pair) that makes one of its type's
    ``shapes``; with the shape each makes. Where a shape allows more than
    ``_MAX_COMBINATIONS`` choices, each class's candidates are cut to the likeliest
    (its own children first, then by the pair's score) until they fit."""
    have = Counter(int(klass[c]) for c in fixed)
    own = set(mine)
    by_class: dict[int, list[int]] = defaultdict(list)
    for _, c in sorted(cands, key=lambda sc: (sc[1] not in own, -sc[0])):
        by_class[int(klass[c])].append(c)
    current = tuple(sorted(mine))
    for shape in shapes:
        want = dict(shape)
        if any(have[k] > want.get(k, 0) for k in have):
            continue
        need = {k: m - have.get(k, 0) for k, m in want.items() if m > have.get(k, 0)}
        if any(m > len(by_class.get(k, ())) for k, m in need.items()):
            continue
        pools = {k: by_class[k] for k in need}
        while math.prod(math.comb(len(pools[k]), m) for k, m in need.items()) > _MAX_COMBINATIONS:
            k = max(pools, key=lambda k: len(pools[k]) - need[k])
            pools[k] = pools[k][:-1]
        combos = [itertools.combinations(pools[k], m) for k, m in need.items()]
        for pick in itertools.product(*combos):
            t = tuple(fixed) + tuple(c for g in pick for c in g)
            if tuple(sorted(t)) != current:
                yield t, shape


def _held_is_best(w: Window) -> bool:
    """Whether the tuples held now are each visit's best and every request term is at
    its most likely total: then they are the window's optimum, without a solver."""
    best = np.full(w.visits.size, -np.inf)
    np.maximum.at(best, np.searchsorted(w.visits, w.owner), w.score)
    if np.any(w.score[w.current] < best):
        return False
    held = np.zeros(w.owner.size, bool)
    held[w.current] = True
    return all(t.outside + int(t.counts[held[t.tuples]].sum()) == t.mode for t in w.req_terms)


def _top_per_visit(owner: np.ndarray, score: np.ndarray, current: np.ndarray, k: int) -> np.ndarray:
    """Indices of each owner's ``k`` best tuples and its current one, sorted."""
    order = np.lexsort((-score, owner))
    first = np.searchsorted(owner[order], owner[order], side="left")
    rank = np.empty(owner.size, np.int64)
    rank[order] = np.arange(owner.size) - first
    keep = rank < k
    keep[current] = True
    return np.flatnonzero(keep)


def _request_terms(
    reqs: _Requests,
    visits: np.ndarray,
    owner: np.ndarray,
    kids: np.ndarray,
    start: np.ndarray,
    klass: np.ndarray,
    vtype: np.ndarray,
    kids_of: dict[int, list[int]],
) -> list[RequestTerm]:
    """Per (request, class) met in the window: the tuples that add such calls to the
    request and how many, the count the request holds outside the window, and the
    log-probabilities of each total."""
    root = reqs.root
    inside: Counter = Counter()
    for v in visits.tolist():
        for c in kids_of.get(v, []):
            inside[(int(root[v]), int(klass[c]))] += 1
    adds: dict[tuple[int, int], Counter] = defaultdict(Counter)
    for j, v in enumerate(owner.tolist()):
        r = int(root[v])
        for k, m in Counter(klass[kids[start[j] : start[j + 1]]].tolist()).items():
            adds[(r, int(k))][j] += m
    terms = []
    for (r, k), per in adds.items():
        logp = reqs.log_p.get((int(vtype[r]), k))
        if logp is None:
            continue
        outside = reqs.count.get((r, k), 0) - inside[(r, k)]
        tuples = np.fromiter(per.keys(), np.int64)
        counts = np.fromiter(per.values(), np.int64)
        # Totals past the learnt ones keep the last one's log-probability less a nat each.
        terms.append(RequestTerm.of(tuples, counts, outside, logp))
    return terms


def request_rounds(
    pairs: CallPairs,
    cand_c: np.ndarray,
    cand_p: np.ndarray,
    cand_s: np.ndarray,
    parent: np.ndarray,
    params: NestingParams,
    n_nodes: int,
    labels: np.ndarray | None = None,
    cut_loops: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Iterator[tuple[RequestRound, ChainModel]]:
    """Up to ``params.request_rounds`` request rounds from ``parent``, each judged by the
    chain model learnt from the answer it starts from; each is yielded with the model
    learnt from its own answer (what the next round judges by, and what the answer's
    confidence is read from). They stop when nothing moves. ``cut_loops`` turns each
    round's parents into an assignment without loops (calls that are each other's
    ancestors within the clock-skew tolerance), which the next round starts from and
    whose requests it counts."""
    vtype, klass = call_kinds(pairs, labels)
    sure = sure_visits(len(pairs), cand_c, cand_p)
    parent = parent.copy()
    model = ChainModel.learn(pairs, parent, params, n_nodes)
    for r in range(params.request_rounds):
        grammar = Grammar.learn(vtype, klass, parent, sure)
        step = request_round(
            pairs,
            cand_c,
            cand_p,
            cand_s,
            parent,
            model,
            grammar,
            vtype,
            klass,
            window=params.request_window,
            tuples=params.request_tuples,
            shift=r % 2 == 1,
        )
        if cut_loops is not None:
            step = replace(step, parent=cut_loops(step.parent))
        # Counted again where calls moved: the model learnt from the new answer, to the bit.
        model = model.relearn(pairs, parent, step.parent)
        parent = step.parent
        yield step, model
        if step.moved == 0:
            return
