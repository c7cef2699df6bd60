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
whole tuple (``ChainModel.tuples_likelihood``) plus the shape's log-share, and cut to
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
from types import ModuleType

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from infer.callpairs import CallPairs
from infer.candidates import concat_ranges
from infer.chains import PLAIN_BELOW, ChainModel, chain_edges
from infer.params import NestingParams
from infer.patterns import depths
from tracefmt.compiled import python_twin

__all__ = [
    "MIN_SURE",
    "UNSEEN_SHAPE",
    "Grammar",
    "RequestRound",
    "RequestTerm",
    "RequestTerms",
    "Window",
    "call_kinds",
    "request_log_likelihood",
    "request_rounds",
    "solve_window",
    "solve_windows",
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
#: Tuples whose windows' relaxations are solved as one program: measured on the
#: request rounds' own windows, the busy gateway's (~930 tuples each) took 5.6 s at
#: 5,000 against 6.5 s one window at a time and 12.5 s all at once; media's (~50
#: each) 0.74 s against 1.96 s and 0.93 s.
_BATCH_TUPLES = 5_000


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
    #: ``count`` as sorted codes (request * width + class) and their counts.
    width: int
    count_codes: np.ndarray
    count_values: np.ndarray
    #: Per (request type, class) as sorted codes (type * width + class): the most
    #: likely count and the cost of a call above and below it (``RequestTerm.vee``).
    vee_codes: np.ndarray
    vee: np.ndarray

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
        codes = np.array([t * width + k for t, k in log_p], np.int64)
        vees = np.array([RequestTerm.vee(lp) for lp in log_p.values()], float).reshape(-1, 3)
        order = np.argsort(codes)
        return cls(root, count, log_p, width, keys, counts, codes[order], vees[order])


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
        return cls(tuples, counts, outside, *cls.vee(log_p))

    @staticmethod
    def vee(log_p: np.ndarray) -> tuple[int, float, float]:
        """The most likely total of ``log_p`` and the cost of a call above and below it.

        >>> mode, up, down = RequestTerm.vee(np.log(np.array([0.1, 0.6, 0.3])))
        >>> mode, round(up, 6), round(down, 6)  # log 2 and log 6
        (1, 0.693147, 1.791759)
        """
        mode = int(np.argmax(log_p))
        up = float(log_p[mode] - log_p[mode + 1]) if mode + 1 < log_p.size else 1.0
        down = float(log_p[mode] - log_p[mode - 1]) if mode > 0 else 0.0
        return mode, up, down


@dataclass(frozen=True)
class RequestTerms:
    """A window's request terms, flat: term k's tuples are ``tuples[ptr[k]:ptr[k + 1]]``
    adding ``counts`` calls each, with ``outside``, ``mode``, ``up`` and ``down`` as
    ``RequestTerm``'s.

    >>> t = RequestTerms.of([RequestTerm(np.array([0, 2]), np.array([1, 1]), 0, 1, 2.0, 3.0)])
    >>> t.totals(np.array([True, False, True])).tolist(), t.cost(np.array([True, False, True]))
    ([2], 2.0)
    """

    ptr: np.ndarray
    tuples: np.ndarray
    counts: np.ndarray
    outside: np.ndarray
    mode: np.ndarray
    up: np.ndarray
    down: np.ndarray

    @classmethod
    def of(cls, terms: list[RequestTerm]) -> RequestTerms:
        """The terms of a list of ``RequestTerm``."""
        cat = np.concatenate
        return cls(
            np.cumsum([0] + [t.tuples.size for t in terms]).astype(np.int64),
            cat([t.tuples for t in terms] + [np.zeros(0, np.int64)]).astype(np.int64),
            cat([t.counts for t in terms] + [np.zeros(0, np.int64)]).astype(np.int64),
            np.array([t.outside for t in terms], np.int64),
            np.array([t.mode for t in terms], np.int64),
            np.array([t.up for t in terms], float),
            np.array([t.down for t in terms], float),
        )

    def __len__(self) -> int:
        return self.mode.size

    def totals(self, picked: np.ndarray) -> np.ndarray:
        """Each term's total when the tuples ``picked`` (a mask) are chosen."""
        term = np.repeat(np.arange(len(self)), np.diff(self.ptr))
        return self.outside + np.bincount(
            term, weights=self.counts * picked[self.tuples], minlength=len(self)
        ).astype(np.int64)

    def cost(self, picked: np.ndarray) -> float:
        """What the totals of the tuples ``picked`` cost: a V about each term's mode."""
        off = self.totals(picked) - self.mode
        return float(np.sum(np.where(off > 0, self.up * off, -self.down * off)))


@dataclass
class Window:
    """A window's integer program: tuples (``owner``: its visit; members in ``kids``
    between ``start[j]`` and ``start[j + 1]``; ``score``), the free calls each must be
    in exactly one of, and the request terms (``RequestTerms``; a list of
    ``RequestTerm`` is turned into them)."""

    visits: np.ndarray
    free: np.ndarray
    owner: np.ndarray
    kids: np.ndarray
    start: np.ndarray
    score: np.ndarray
    current: np.ndarray
    req_terms: RequestTerms | list[RequestTerm]

    def __post_init__(self) -> None:
        if not isinstance(self.req_terms, RequestTerms):
            self.req_terms = RequestTerms.of(self.req_terms)


@dataclass
class _Program:
    """A window's program as sparse entries: ``a @ x == b``, minimise ``c @ x``, the first
    ``n_t`` columns (the tuples) binary and the rest (the request terms' slacks) >= 0."""

    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    b: np.ndarray
    c: np.ndarray
    n_t: int
    vpos: np.ndarray

    @classmethod
    def of(cls, w: Window) -> _Program:
        n_t = w.owner.size
        vpos = np.searchsorted(w.visits, w.owner)
        seq = np.repeat(np.arange(n_t), np.diff(w.start))
        fpos = np.searchsorted(w.free, w.kids)
        is_free = (fpos < w.free.size) & (w.free[np.minimum(fpos, w.free.size - 1)] == w.kids)
        rows = [vpos, w.visits.size + fpos[is_free]]
        cols = [np.arange(n_t), seq[is_free]]
        vals = [np.ones(n_t), np.ones(int(is_free.sum()))]
        n_rows = w.visits.size + w.free.size
        # Per request term: the chosen tuples' count, less a slack above plus one
        # below, is the most likely total; each slack costs the fall of the
        # log-probability a call away (a V about the mode: convex, so the relaxation
        # stays tight).
        terms = w.req_terms
        k = len(terms)
        rows += [n_rows + np.repeat(np.arange(k), np.diff(terms.ptr)), n_rows + np.repeat(np.arange(k), 2)]
        cols += [terms.tuples, n_t + np.arange(2 * k)]
        vals += [terms.counts.astype(float), np.tile([-1.0, 1.0], k)]
        lo = np.concatenate([np.ones(n_rows), (terms.mode - terms.outside).astype(float)])
        cost = np.concatenate([-w.score, np.column_stack([terms.up, terms.down]).ravel()])
        cat = np.concatenate
        return cls(cat(rows), cat(cols), cat(vals), lo, cost, n_t, vpos)

    def chosen(self, x: np.ndarray) -> np.ndarray:
        """The tuples a solution picks, in the order of the window's visits."""
        chosen = np.flatnonzero(x[: self.n_t] > 0.5)
        return chosen[np.argsort(self.vpos[chosen], kind="stable")]

    def upper(self) -> np.ndarray:
        upper = np.full(self.c.size, np.inf)
        upper[: self.n_t] = 1.0
        return upper

    def matrix(self) -> csr_matrix:
        return csr_matrix((self.vals, (self.rows, self.cols)), shape=(self.b.size, self.c.size))


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
    return solve_windows([w])[0]


def solve_windows(windows: list[Window]) -> list[np.ndarray | None]:
    """``solve_window`` for each of ``windows``, their linear relaxations solved a few
    thousand tuples at a time as one program (the windows share no variable, so its
    optimum is each one's): fewer calls to the solver, whose set-up cost more than the
    solving of small windows, while each program stays small enough to solve quickly.
    A window whose relaxation is not whole gets its own integer program, one after
    another: each has a wall-clock limit, and programs run side by side on a busy
    machine ran out of it more often (one-off runs of a 16,000-message gateway beside
    three busy processes: 60.6% of parents right against 61.1% one at a time).

    >>> w = Window(np.array([0, 1]), np.array([5, 6]), np.array([0, 0, 1, 1]),
    ...     np.array([5, 6, 6, 5]), np.array([0, 1, 2, 3, 4]), np.array([1.0, 3.0, 1.0, 0.5]),
    ...     np.array([0, 2]), [])
    >>> [c.tolist() for c in solve_windows([w, w])]
    [[1, 3], [1, 3]]
    """
    out: list[np.ndarray | _Program | None] = []
    batch: list[Window] = []
    size = 0
    for w in windows:
        batch.append(w)
        size += w.owner.size
        if size >= _BATCH_TUPLES:
            out += _relaxed(batch)
            batch, size = [], 0
    out += _relaxed(batch)
    pending = [i for i, x in enumerate(out) if isinstance(x, _Program)]
    for i in pending:
        out[i] = _solve_integer(windows[i], out[i])
    return out  # type: ignore[return-value]


def _relaxed(windows: list[Window]) -> list[np.ndarray | _Program]:
    """The relaxations of a batch of windows solved as one program: per window the
    tuples chosen where its optimum is whole, else its program."""
    if not windows:
        return []
    progs = [_Program.of(w) for w in windows]
    row_at = np.cumsum([0] + [p.b.size for p in progs])
    col_at = np.cumsum([0] + [p.c.size for p in progs])
    rows = np.concatenate([p.rows + r for p, r in zip(progs, row_at, strict=False)])
    cols = np.concatenate([p.cols + c for p, c in zip(progs, col_at, strict=False)])
    a = csr_matrix((np.concatenate([p.vals for p in progs]), (rows, cols)), shape=(row_at[-1], col_at[-1]))
    b = np.concatenate([p.b for p in progs])
    c = np.concatenate([p.c for p in progs])
    upper = np.concatenate([p.upper() for p in progs])
    # The linear relaxation first: for most windows its optimum is already whole.
    lp = linprog(c, A_eq=a, b_eq=b, bounds=np.column_stack([np.zeros(c.size), upper]), method="highs")
    out: list[np.ndarray | _Program] = []
    for prog, at in zip(progs, col_at, strict=False):
        x = None if lp.x is None else lp.x[at : at + prog.n_t]
        whole = x is not None and np.all(np.minimum(x, 1 - x) < 1e-9)
        out.append(prog.chosen(x) if whole else prog)
    return out


def _solve_integer(w: Window, prog: _Program) -> np.ndarray | None:
    """The integer program of one window, within the solver's time for it."""
    upper = prog.upper()
    res = milp(
        prog.c,
        constraints=LinearConstraint(prog.matrix(), prog.b, prog.b),
        integrality=(upper == 1.0).astype(int),
        bounds=Bounds(0, upper),
        options={"time_limit": _TIME_LIMIT, "presolve": False},
    )
    if res.x is None:
        return None
    chosen = prog.chosen(res.x)
    # Out of time, the solver's best may be worse than what the window holds.
    if not res.success and window_objective(w, chosen) < window_objective(w, w.current):
        return None
    return chosen


def window_objective(w: Window, chosen: np.ndarray) -> float:
    """The objective of ``w``'s integer program at the tuples ``chosen``: their scores
    less each request term's cost at the totals they make."""
    picked = np.zeros(w.owner.size, bool)
    picked[chosen] = True
    return float(w.score[chosen].sum()) - w.req_terms.cost(picked)


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
    reqs = _Requests.learn(vtype, klass, parent) if requests else None
    wins = list(_windows(pairs, cand_c, cand_p, cand_s, parent, window, shift))
    if not wins:
        return RequestRound(parent.copy(), 0, 0.0, 0, 0, 0)
    # Every window's tuples first, so that the chain model scores them in one pass.
    offers = _offers(pairs, wins, parent, grammar, vtype, klass)
    owner, lengths, kids, prior = offers.owner, offers.lengths, offers.kids, offers.prior
    built = [
        (w[0], w[1], int(offers.per_window[i]), offers.current[offers.visit_at[i] : offers.visit_at[i + 1]])
        for i, w in enumerate(wins)
    ]
    seq = np.repeat(np.arange(owner.size), lengths)
    # Each tuple's children in call order, as chains are read.
    order = np.lexsort((kids, tc[kids], seq))
    kids = kids[order]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    score = model.tuples_likelihood(pairs, owner, kids, starts) + prior
    out = parent.copy()
    gain, n_tuples, timed_out, at = 0.0, 0, 0, 0
    open_: list[Window] = []
    for visits, free, count, current in built:
        j = np.arange(at, at + count)
        at += count
        current = current - j[0]
        w_score = score[j]
        w_owner = owner[j]
        # The best ``tuples`` of each visit, and the one it holds now.
        keep = _top_per_visit(w_owner, w_score, current, tuples)
        j, w_owner, w_score = j[keep], w_owner[keep], w_score[keep]
        cur = np.searchsorted(keep, current)
        flat = kids[concat_ranges(starts[j], lengths[j])]
        w_start = np.concatenate([[0], np.cumsum(lengths[j])])
        terms = _request_terms(reqs, w_owner, flat, w_start, cur, klass, vtype) if reqs else []
        win = Window(visits, free, w_owner, flat, w_start, w_score, cur, terms)
        n_tuples += w_owner.size
        if not _held_is_best(win):
            open_.append(win)
    for win, chosen in zip(open_, solve_windows(open_), strict=True):
        if chosen is None:
            timed_out += 1
            continue
        gain += float(win.score[chosen].sum() - win.score[win.current].sum())
        for t in chosen.tolist():
            out[win.kids[win.start[t] : win.start[t + 1]]] = win.owner[t]
    moved = int(np.count_nonzero(out != parent))
    return RequestRound(out, moved, gain, len(built), n_tuples, timed_out)


@dataclass
class _Offers:
    """The tuples a round offers, flat: per tuple its visit, length and prior (its
    shape's log-share), the members of all in order; each visit's own tuple first
    among its tuples (``current``, an index into the tuples), and per window its
    tuples and the range of its visits (``visit_at``)."""

    owner: np.ndarray
    lengths: np.ndarray
    kids: np.ndarray
    prior: np.ndarray
    current: np.ndarray
    per_window: np.ndarray
    visit_at: np.ndarray


def _offers(
    pairs: CallPairs,
    wins: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    parent: np.ndarray,
    grammar: Grammar,
    vtype: np.ndarray,
    klass: np.ndarray,
) -> _Offers:
    """Every window's tuples (``_windows``), enumerated by ``infer._requestjit`` as
    ``_visit_tuples`` would, visit by visit."""
    n = len(pairs)
    visits = np.concatenate([w[0] for w in wins])
    visit_at = np.concatenate([[0], np.cumsum([w[0].size for w in wins])])
    free = np.zeros(n, bool)
    free[np.concatenate([w[1] for w in wins])] = True
    # Each visit's children now, in call-pair order.
    kid = np.flatnonzero(parent >= 0)
    kid = kid[np.argsort(parent[kid], kind="stable")]
    lo = np.searchsorted(parent[kid], visits, side="left")
    n_mine = np.searchsorted(parent[kid], visits, side="right") - lo
    mine_ptr = np.concatenate([[0], np.cumsum(n_mine)])
    mine_call = kid[concat_ranges(lo, n_mine)]
    # Each visit's candidates, by class, its own children first, then by score.
    vindex = np.full(n, -1, np.int64)
    vindex[visits] = np.arange(visits.size)
    cs = np.concatenate([w[2] for w in wins])
    cv = vindex[np.concatenate([w[3] for w in wins])]
    cscore = np.concatenate([w[4] for w in wins])
    own = parent[cs] == visits[cv]
    order = np.lexsort((np.arange(cs.size), -cscore, ~own, klass[cs], cv))
    cs, cv, own = cs[order], cv[order], own[order]
    cand_ptr = np.searchsorted(cv, np.arange(visits.size + 1))
    # The grammar as arrays, each type's shapes in their order.
    n_types = int(vtype.max(initial=0)) + 1
    type_ptr = np.zeros(n_types + 1, np.int64)
    shape_ptr, shape_class, shape_count, shape_logp = [0], [], [], []
    for t in range(n_types):
        for shape, logp in grammar.shapes.get(t, {}).items():
            shape_class += [k for k, _ in shape]
            shape_count += [m for _, m in shape]
            shape_ptr.append(len(shape_class))
            shape_logp.append(logp)
        type_ptr[t + 1] = len(shape_logp)
    kernels = _kernels(n)
    t_visit, t_shape, t_len, members = kernels.visit_tuples(
        vtype[visits],
        mine_ptr,
        mine_call,
        klass[mine_call],
        ~free[mine_call],
        cand_ptr,
        cs,
        klass[cs],
        own,
        type_ptr,
        np.array(shape_ptr, np.int64),
        np.array(shape_class, np.int64),
        np.array(shape_count, np.int64),
        int(klass.max(initial=0)) + 1,
        _MAX_COMBINATIONS,
    )
    ends = zip(mine_ptr[:-1].tolist(), mine_ptr[1:].tolist(), strict=True)
    own_prior = np.array(
        [
            grammar.score(t, _shape(klass[mine_call[a:b]].tolist()))
            for t, (a, b) in zip(vtype[visits].tolist(), ends, strict=True)
        ],
        float,
    )
    # Each visit's own tuple, then its others: a stable sort puts the own ones first.
    t_owner = np.concatenate([np.arange(visits.size), t_visit])
    t_lengths = np.concatenate([n_mine, t_len])
    flat = np.concatenate([mine_call, members])
    t_start = np.concatenate([[0], np.cumsum(t_lengths)])[:-1]
    pick = np.argsort(t_owner, kind="stable")
    lengths = t_lengths[pick]
    kids = flat[concat_ranges(t_start[pick], lengths)]
    prior = np.concatenate([own_prior, np.array(shape_logp, float)[t_shape]])[pick]
    rank = np.empty(pick.size, np.int64)
    rank[pick] = np.arange(pick.size)
    current = rank[: visits.size]
    tuple_at = np.searchsorted(t_owner[pick], visit_at)
    return _Offers(visits[t_owner[pick]], lengths, kids, prior, current, np.diff(tuple_at), visit_at)


def _kernels(n_pairs: int) -> ModuleType:
    """The tuples' loop (``infer._requestjit``), compiled, or as Python for a trace
    small enough that loading numba would cost more (``infer.chains.PLAIN_BELOW``)."""
    if n_pairs < PLAIN_BELOW:
        return python_twin("infer._requestjit")
    import infer._requestjit as kernels  # numba is imported when request rounds run

    return kernels


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
    return bool(np.all(w.req_terms.totals(held) == w.req_terms.mode))


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
    owner: np.ndarray,
    kids: np.ndarray,
    start: np.ndarray,
    current: np.ndarray,
    klass: np.ndarray,
    vtype: np.ndarray,
) -> RequestTerms:
    """Per (request, class) met in the window's tuples, in the order first met: the
    tuples that add such calls to the request and how many, the count the request
    holds outside the window (its count less what the visits' own tuples, ``current``,
    hold), and the cost of totals about the most likely one."""
    lengths = np.diff(start)
    seq = np.repeat(np.arange(owner.size), lengths)
    width = np.int64(reqs.width)
    key = reqs.root[owner][seq] * width + klass[kids]
    keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    # Per key, the tuples that add its calls (ascending) and how many each adds.
    pair, counts = np.unique(inverse * np.int64(owner.size) + seq, return_counts=True)
    pair_key, pair_tuple = pair // owner.size, pair % owner.size
    held = np.zeros(owner.size, bool)
    held[current] = True
    inside = np.bincount(inverse, weights=held[seq], minlength=keys.size).astype(np.int64)
    # Each key's request type's learnt counts, and the request's count now.
    at = _find(reqs.vee_codes, vtype[keys // width] * width + keys % width)
    now = _find(reqs.count_codes, keys)
    learnt = at >= 0
    # The learnt keys, in the order first met; their tuples in that order.
    order = np.argsort(first, kind="stable")
    order = order[learnt[order]]
    rank = np.full(keys.size, -1, np.int64)
    rank[order] = np.arange(order.size)
    sel = np.flatnonzero(rank[pair_key] >= 0)
    sel = sel[np.argsort(rank[pair_key[sel]], kind="stable")]
    sizes = np.bincount(rank[pair_key[sel]], minlength=order.size)
    vee = reqs.vee[at[order]]
    outside = np.where(now >= 0, reqs.count_values[now], 0) - inside
    return RequestTerms(
        np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        pair_tuple[sel],
        counts[sel].astype(np.int64),
        outside[order],
        vee[:, 0].astype(np.int64),
        vee[:, 1],
        vee[:, 2],
    )


def _find(codes: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The position of each query in the sorted ``codes``, -1 where it is not there.

    >>> _find(np.array([2, 5, 9]), np.array([5, 3, 9, 10])).tolist()
    [1, -1, 2, -1]
    """
    if codes.size == 0:
        return np.full(queries.size, -1, np.int64)
    at = np.minimum(np.searchsorted(codes, queries), codes.size - 1)
    return np.where(codes[at] == queries, at, -1)


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
