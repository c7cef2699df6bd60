"""Request keys as evidence: calls that carry the same trace id or request id belong to
one request, calls with different ones never do.

A partly instrumented system puts request identity on some of its calls: a front proxy
stamps ``X-Request-ID``, a service with OpenTelemetry sends ``traceparent``, the boxes in
between pass nothing on. The capture keeps them (``trace_id`` and ``request_id``,
docs/files.md); here they become one code a call pair (:func:`call_keys`): pairs that
share a trace id or a request id, directly or through a third pair, share a code.

:func:`close_keys` spreads the codes along the calls they decide and says, per pair,
which candidate parents its key leaves (:class:`KeyEvidence`):

- a parent whose key differs from its child's is impossible;
- a keyed child with a candidate of its own key takes one of those: its request did
  visit the caller then;
- a child left with one candidate is pinned to it, and the two then share a key: the
  parent's key goes down to an unkeyed child, the child's up to an unkeyed parent; a
  child whose candidates all carry one key takes it;
- the keyed calls a request's first visit makes hang under one visit: where one root
  visit alone fits them all, it takes their key (a front proxy that stamps the id on the
  way out);
- an unkeyed visit can be of a request only if one of its own candidates can, so a
  keyed call's candidate that leads to no visit of its key is not its parent.

That repeats until nothing changes. :class:`~infer.candidates.CandidatePlan` applies the
same rule to every candidate it enumerates, so every stage of the nesting algorithm,
and the calibration, works on the choices the keys leave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from infer.callpairs import CallPairs
from infer.candidates import concat_ranges
from tracefmt import KEY_COLUMNS
from tracefmt.patterns import tree_depths

if TYPE_CHECKING:
    from infer.calibration import Calibration

__all__ = [
    "HeldOut",
    "KeyEvidence",
    "agree_keys",
    "allowed",
    "call_keys",
    "close_keys",
    "held_out_check",
    "key_evaluation",
    "key_evaluation_lines",
    "with_keys",
]

#: Rounds of :func:`close_keys` at most: each one spreads keys a hop further.
CLOSE_ROUNDS = 16


def call_keys(trace: pa.Table, pairs: CallPairs) -> tuple[np.ndarray, dict[str, int]] | None:
    """Per call pair, the code of its request key (-1: none), and how many pairs carry
    each kind of key; None when the trace has no key columns or they are empty.

    A pair's values are its call's, else its return's (a proxy may echo the id on the
    response only). Pairs that share any value of any key column share a code.

    Examples
    --------
    The third pair's call has no key, its return has one:

    >>> t = pa.table({"trace_id": ["a", None, "b", None, None, "a"],
    ...               "request_id": ["r1", "r2", None, "r2", None, None]})
    >>> p = CallPairs(*(np.zeros(3, np.int64),) * 4, np.array([0, 1, 4]),
    ...               np.array([5, 3, 2]), 0, 0, 0)
    >>> codes, kinds = call_keys(t, p)
    >>> codes.tolist(), kinds
    ([0, 1, 2], {'trace_id': 2, 'request_id': 2})
    """
    present = [c for c in KEY_COLUMNS if c in trace.column_names]
    if not present or not len(pairs):
        return None
    rows_src: list[np.ndarray] = []
    rows_val: list[np.ndarray] = []
    kinds: dict[str, int] = {}
    base = 0
    for column in present:
        col = trace[column]
        if col.null_count == len(col):
            continue
        code = _value_codes(col)
        value = np.where(code[pairs.call_row] >= 0, code[pairs.call_row], code[pairs.return_row])
        has = np.flatnonzero(value >= 0)
        kinds[column] = int(has.size)
        rows_src.append(has)
        rows_val.append(value[has] + base)
        base += int(code.max(initial=-1)) + 1
    if not rows_src or not sum(len(r) for r in rows_src):
        return None
    src, val = np.concatenate(rows_src), np.concatenate(rows_val)
    n = len(pairs)
    # Pairs and values as one graph: a pair joins each value it carries.
    from scipy.sparse import coo_matrix  # a trace without keys never loads it
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(src.size, np.int8), (src, n + val)), shape=(n + base, n + base))
    _, comp = connected_components(graph, directed=False)
    keyed = np.zeros(n, bool)
    keyed[src] = True
    # Codes numbered in the order of the pairs that carry them.
    _, first, inverse = np.unique(comp[:n][keyed], return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    codes = np.full(n, -1, np.int64)
    codes[keyed] = rank[inverse.ravel()]
    return codes, kinds


def _value_codes(col: pa.ChunkedArray) -> np.ndarray:
    """Per row, a code of the column's value (-1: null), the same for equal values."""
    enc = col.combine_chunks()
    if not pa.types.is_dictionary(enc.type):
        enc = enc.dictionary_encode()
    else:
        enc = enc.dictionary_decode().dictionary_encode()  # equal values, one code
    return enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def allowed(key: np.ndarray, strict: np.ndarray, child: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Whether each candidate (``child``, ``parent``) is left by the keys: not of two
    different keys, and of the child's own key where ``strict`` says the child has a
    candidate of that key.

    >>> key, strict = np.array([0, -1, 1, 0]), np.array([False, False, False, True])
    >>> allowed(key, strict, np.array([2, 2, 3, 3]), np.array([0, 1, 1, 0])).tolist()
    [False, True, False, True]
    """
    kc, kp = key[child], key[parent]
    return (kc == kp) | ((kc < 0) | (kp < 0)) & ~((kp < 0) & strict[child])


@dataclass
class KeyEvidence:
    """What the request keys decide: per pair its key after :func:`close_keys` (-1:
    none) and whether it must take a parent of its own key (``strict``), and counts for
    the paths file (``to_json``)."""

    key: np.ndarray
    strict: np.ndarray
    counts: dict[str, Any] = field(default_factory=dict)
    #: Per pair, the key it carried itself (before spreading; -1: none).
    given: np.ndarray | None = None
    #: Per pair, the parent its key decides (its one candidate of the same key; -1:
    #: none): the truth the held-out calibration scores against.
    known: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``keys`` section of the paths file (docs/files.md)."""
        return dict(self.counts)


def with_keys(pairs: CallPairs, evidence: KeyEvidence | None) -> CallPairs:
    """``pairs`` whose candidates are those ``evidence`` leaves (unchanged for None)."""
    if evidence is None:
        return pairs
    return replace(pairs, key=evidence.key, strict=evidence.strict)


def close_keys(
    pairs: CallPairs, key: np.ndarray, tol_ns: int, kinds: dict[str, int] | None = None
) -> KeyEvidence:
    """Spread ``key`` (per pair, -1: none) along the calls the keys decide, as the
    module docstring says, and count what they decided.

    Examples
    --------
    Two requests visit node 1 at once, and each call node 1 makes carries its request's
    key: both are pinned; the call of node 2 has no key, and only the first call into
    node 2 is open around it, so it is of that request.

    >>> p = CallPairs(np.array([0, 0, 1, 2, 1]), np.array([1, 1, 2, 3, 2]),
    ...     np.array([0, 1, 2, 4, 5]), np.array([20, 21, 12, 8, 13]), *(np.zeros(5, np.int64),) * 2,
    ...     0, 0, 0)
    >>> ev = close_keys(p, np.array([7, 8, 7, -1, 8]), 0)
    >>> ev.key.tolist(), ev.counts["pinned"]
    ([7, 8, 7, 7, 8], 2)
    """
    from infer.candidates import all_candidates

    n = len(pairs)
    given_key = key
    key = np.asarray(key, np.int64).copy()
    given = int(np.count_nonzero(key >= 0))
    c, par = all_candidates(pairs, tol_ns)  # the rounds filter them again and again
    before = np.bincount(c, minlength=n)
    for _ in range(CLOSE_ROUNDS):
        strict = _strict(key, c, par)
        keep = allowed(key, strict, c, par)
        left = np.bincount(c[keep], minlength=n)
        changed = _spread(key, c[keep], par[keep], left)
        changed |= _one_visit_each(key, pairs.caller, c[keep], par[keep], before == 0)
        changed |= _through_unkeyed(key, c[keep], par[keep])
        if not changed:
            break
    # The keys as they ended: a last round that changed some is filtered by them too.
    strict = _strict(key, c, par)
    keep = allowed(key, strict, c, par)
    left = np.bincount(c[keep], minlength=n)
    decided = (left == 1) & (before > 1)
    same = keep & (key[c] >= 0) & (key[c] == key[par])
    known = np.full(n, -1, np.int64)
    one = np.bincount(c[same], minlength=n) == 1
    known[c[same & one[c]]] = par[same & one[c]]
    counts: dict[str, Any] = {
        "pairs": n,
        "keyed": given,
        **{f"keyed_by_{column}": count for column, count in (kinds or {}).items()},
        "keyed_after_spreading": int(np.count_nonzero(key >= 0)),
        "requests": int(np.unique(key[key >= 0]).size),
        "narrowed": int(np.count_nonzero(left < before)),
        "pinned": int(np.count_nonzero(decided)),
        # The traffic's own parallelism (``stats.mean_parallelism`` is what the keys left).
        "mean_parallelism_without_keys": float(before[before > 0].mean()) if (before > 0).any() else 0.0,
    }
    return KeyEvidence(key, strict, counts, np.asarray(given_key, np.int64), known)


def _strict(key: np.ndarray, c: np.ndarray, par: np.ndarray) -> np.ndarray:
    """Per pair, whether it has a candidate of its own key (then it takes one of those)."""
    strict = np.zeros(key.size, bool)
    kc = key[c]
    strict[c[(kc >= 0) & (kc == key[par])]] = True
    return strict


def _one_visit_each(
    key: np.ndarray,
    caller: np.ndarray,
    c: np.ndarray,
    par: np.ndarray,
    root: np.ndarray,
) -> bool:
    """Give a request's first visit the key of the calls that must all hang under it, in
    place; whether any key changed.

    A request visits the node its first call enters once (``root``: the pairs that can
    be nothing but a request's first call). So the keyed calls that node makes for one
    request, none with a candidate of their key, belong under one unkeyed root visit (a
    front proxy that stamps the id on the way out): the visits every one of them fits
    in. Where that leaves one, it is of their request, and from the next round on no
    call of another key may take it. (Deeper nodes may be visited several times by one
    request: on TraceWeaver's media recording the same rule there lost 2-4 points.)
    """
    # Of their key now: the keys spread this round count.
    own = np.zeros(key.size, bool)
    own[c[(key[c] >= 0) & (key[c] == key[par])]] = True
    member = (key[c] >= 0) & ~own[c] & (key[par] < 0) & root[par]
    if not member.any():
        return False
    mc, mp = c[member].astype(np.int64), par[member].astype(np.int64)
    kids = np.unique(mc)
    span = int(key.max()) + 1  # groups are (caller node, key)
    group_of, group_kids = np.unique(caller[kids] * span + key[kids], return_counts=True)
    g = np.searchsorted(group_of, caller[mc] * span + key[mc])
    # (group, visit) seen once per member that fits the visit: all of them, or not.
    cell, fits = np.unique(g * key.size + mp, return_counts=True)
    cg = cell // key.size
    whole = cell[fits == group_kids[cg]]
    wg, wv = whole // key.size, whole % key.size
    one = np.bincount(wg, minlength=group_of.size) == 1
    wg, wv = wg[one[wg]], wv[one[wg]]
    # A visit two groups each need alone is a contradiction: neither is taken.
    v, times = np.unique(wv, return_counts=True)
    alone = np.isin(wv, v[times == 1])
    wg, wv = wg[alone], wv[alone]
    if not wv.size:
        return False
    key[wv] = group_of[wg] % span
    return True


def _distinct(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (by a sort: ``np.unique`` hashes large arrays
    of int64 many times slower here)."""
    a = np.sort(a)
    return a[np.r_[True, a[1:] != a[:-1]]] if a.size else a


#: Pairs (visit, key it could be of) :func:`_through_unkeyed` holds at most.
_POSSIBLE_BUDGET = 1 << 24


def _through_unkeyed(key: np.ndarray, c: np.ndarray, par: np.ndarray) -> bool:
    """Give an unkeyed visit the key of a call that can hang nowhere else, in place;
    whether any key changed.

    An unkeyed visit can be of a request only if one of its own candidates can: one of
    that key, or an unkeyed one that can (or a visit with no candidate at all, which may
    be of any). So a keyed call's unkeyed candidate whose candidates lead to no visit of
    its key is not its parent; a call left with one candidate so is pinned to it, and the
    visit takes its key.
    """
    n = key.size
    c, par = c.astype(np.int64), par.astype(np.int64)  # (visit, key) codes need 64 bits
    kc, kp = key[c], key[par]
    has = np.bincount(c, minlength=n) > 0
    free = ~has  # visits with no candidate: of any request
    span = int(key.max(initial=-1)) + 1
    if span == 0:
        return False
    # (visit, key) as one code; a visit's own key when it has one.
    possible = _distinct(
        np.concatenate([c[kp >= 0] * span + kp[kp >= 0], np.flatnonzero(key >= 0) * span + key[key >= 0]])
    )
    via = (kp < 0) & (kc < 0)  # unkeyed visit under an unkeyed candidate
    for _ in range(4):  # a few hops up: deeper chains of unkeyed visits are rare
        free_next = free.copy()
        free_next[c[via & free[par]]] = True
        # What each unkeyed candidate can be of, its visit can be of too.
        src = possible // span
        order = np.argsort(src, kind="stable")
        lo = np.searchsorted(src[order], par[via], "left")
        hi = np.searchsorted(src[order], par[via], "right")
        counts = hi - lo
        if int(counts.sum()) + possible.size > _POSSIBLE_BUDGET:
            return False
        rep = np.repeat(np.arange(counts.size), counts)
        at = concat_ranges(lo, counts)
        got = c[via][rep] * span + possible[order][at] % span
        grown = _distinct(np.concatenate([possible, got]))
        if grown.size == possible.size and np.array_equal(free_next, free):
            break
        possible, free = grown, free_next
    # A keyed call's unkeyed candidates that can be of its request.
    test = (kc >= 0) & (kp < 0)
    fits = np.ones(c.size, bool)
    code = par[test] * span + kc[test]
    pos = np.minimum(np.searchsorted(possible, code), max(possible.size - 1, 0))
    fits[test] = free[par[test]] | (possible.size > 0) & (possible[pos] == code)
    left = np.bincount(c[fits], minlength=n)
    pin = fits & test & (left[c] == 1)
    if not pin.any():
        return False
    agreed = _agreed(n, par[pin], kc[pin])
    agree = np.flatnonzero((agreed >= 0) & (key < 0))
    if not agree.size:
        return False
    key[agree] = agreed[agree]
    return True


def _spread(key: np.ndarray, c: np.ndarray, par: np.ndarray, left: np.ndarray) -> bool:
    """One round of spreading keys along the candidates left (``c``, ``par``; ``left``:
    each child's count): in place; whether any key changed."""
    n = key.size
    changed = False
    # A child whose candidates all carry one key is of that request.
    agreed = _agreed(n, c, key[par])
    take = (key < 0) & (left > 0) & (agreed >= 0)
    if take.any():
        key[take] = agreed[take]
        changed = True
    # A child pinned to an unkeyed parent gives it its key, unless two pinned children
    # of that parent disagree (the data contradict each other: nothing is spread).
    only = left[c] == 1
    up = only & (key[c] >= 0) & (key[par] < 0)
    if up.any():
        agreed = _agreed(n, par[up], key[c[up]])
        agree = np.flatnonzero(agreed >= 0)
        if agree.size:
            key[agree] = agreed[agree]
            changed = True
    return changed


def _agreed(n: int, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per index below ``n``, the one value ``values`` give it at ``at``: -1 where none
    is given, -2 where two differ (``values`` are keys: -1 or more).

    >>> _agreed(4, np.array([0, 0, 1, 1, 3]), np.array([5, 5, 5, 6, -1])).tolist()
    [5, -2, -1, -1]
    """
    lo = np.full(n, np.iinfo(np.int64).max)
    hi = np.full(n, -2, np.int64)
    np.minimum.at(lo, at, values)
    np.maximum.at(hi, at, values)
    return np.where(hi == -2, -1, np.where(lo == hi, hi, -2))


def agree_keys(pairs: CallPairs, parent: np.ndarray, tol_ns: int) -> tuple[np.ndarray, int]:
    """``parent`` with no inferred request holding two keys, and how many calls moved.

    The candidates keep a child from a parent of another key, but an unkeyed visit can
    still gather calls of two requests below it. Where a tree holds two keys, the calls
    whose key disagrees with what their tree holds above them (or, under an unkeyed
    visit, with its earliest keyed child's) move, with what hangs under them, to a
    candidate whose tree holds their key, else one whose tree holds none (the latest
    called); a call with none left becomes a root.

    Examples
    --------
    Node 1 is visited twice at once; the first visit got both calls, of keys 7 and 8:

    >>> p = CallPairs(np.array([0, 0, 1, 1]), np.array([1, 1, 2, 2]), np.array([0, 1, 2, 3]),
    ...     np.array([20, 21, 12, 13]), *(np.zeros(4, np.int64),) * 2, 0, 0, 0,
    ...     key=np.array([-1, -1, 7, 8]), strict=np.zeros(4, bool))
    >>> agree_keys(p, np.array([-1, -1, 0, 0]), 0)
    (array([-1, -1,  0,  1]), 1)
    """
    from infer.candidates import all_candidates

    key = pairs.key
    parent = parent.copy()
    if key is None or not (key >= 0).any():
        return parent, 0
    c, par = (a.astype(np.int64) for a in all_candidates(pairs, tol_ns))
    moved = np.zeros(parent.size, bool)
    for _ in range(CLOSE_ROUNDS):
        cut = _disagreeing(pairs, parent, key)
        if not cut.size:
            break
        moved[cut] = True
        parent[cut] = -1
        tree = _tree_keys(parent, key)
        want = tree[cut]  # the key each cut subtree holds (its own)
        slot = np.full(parent.size, -1, np.int64)
        slot[cut] = np.arange(cut.size)
        on = slot[c] >= 0
        cc, pp = c[on], par[on]
        tk = tree[pp]
        fits = (tk == -1) | (tk == want[slot[cc]])
        cc, pp = cc[fits], pp[fits]
        if not cc.size:
            continue
        # Each cut call's fitting candidate: of its own key before none, then the latest called.
        order = np.lexsort((-pairs.t_call[pp], tree[pp] < 0, cc))
        first = np.r_[True, cc[order][1:] != cc[order][:-1]]
        parent[cc[order][first]] = pp[order][first]
    cut = _disagreeing(pairs, parent, key)
    parent[cut] = -1  # what still disagrees stands alone
    moved[cut] = True
    return parent, int(np.count_nonzero(moved))


def _tree_keys(parent: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Per pair, the key its tree holds (-1: none, -2: several)."""
    root = tree_depths(parent)[1]
    has = key >= 0
    return _agreed(parent.size, root[has], key[has])[root]


def _disagreeing(pairs: CallPairs, parent: np.ndarray, key: np.ndarray) -> np.ndarray:
    """The calls to cut from their parents so that no tree holds two keys."""
    # A call under a loop of links (a move may close one; nesting cuts them after)
    # has no depth: it is left as it is.
    depth, _, in_loop = tree_depths(parent)
    depth = np.where(in_loop, -1, depth)
    top = int(depth.max(initial=0))
    levels = [np.flatnonzero(depth == d) for d in range(top + 1)]
    # Down: the key each call holds from itself or above.
    above = key.copy()
    for idx in levels[1:]:
        idx = idx[above[idx] < 0]
        above[idx] = above[parent[idx]]
    kid = np.flatnonzero(parent >= 0)
    cut = [kid[(key[kid] >= 0) & (above[parent[kid]] >= 0) & (above[parent[kid]] != key[kid])]]
    # Up, under visits that hold no key from above: the earliest keyed child's key wins.
    below = np.where(key >= 0, key, -1)
    for idx in reversed(levels[1:]):
        idx = idx[(below[idx] >= 0) & (above[parent[idx]] < 0)]
        if not idx.size:
            continue
        up = parent[idx]
        order = np.lexsort((pairs.t_call[idx], up))
        first = np.r_[True, up[order][1:] != up[order][:-1]]
        win = np.empty(parent.size, np.int64)
        win[up[order][first]] = below[idx[order][first]]
        cut.append(idx[below[idx] != win[up]])
        below[up[order][first]] = win[up[order][first]]
    return np.unique(np.concatenate(cut))


#: Folds of the held-out calibration: each run hides the keys of one fold's requests.
FOLDS = 2


@dataclass
class HeldOut:
    """The held-out check of a run (``held_out_check``): per hidden call whose parent
    its key decides, the odds its run stated, whether it was right, and its request."""

    stated: np.ndarray
    right: np.ndarray
    request: np.ndarray

    def to_json(self) -> dict[str, int]:
        """The counts ``stats.keys`` holds (``wirepath eval --truth keys``)."""
        _, inv = np.unique(self.request, return_inverse=True)
        wrong = np.bincount(inv.ravel(), weights=~self.right)
        return {
            "held_out_calls": int(self.right.size),
            "held_out_right": int(self.right.sum()),
            "held_out_requests": int(wrong.size),
            "held_out_requests_right": int(np.count_nonzero(wrong == 0)),
        }

    def calibration(self) -> Calibration:
        """The map from stated odds to the share right that the held-out calls show
        (``calibrate_from="keys"``)."""
        from infer.calibration import Calibration

        return replace(Calibration.learn(self.stated, self.right), kind="keys")


def held_out_check(
    pairs: CallPairs,
    evidence: KeyEvidence,
    infer_parents: Callable[[CallPairs], tuple[np.ndarray, np.ndarray, float]],
    tol_ns: int,
    *,
    seed: int = 0,
) -> HeldOut | None:
    """How right the inference is on the trace's own keys, hidden a fold at a time;
    None with too few calls whose parent the keys decide (``MIN_LINKS``).

    The requests with keys are dealt into ``FOLDS`` folds. For each, the keys of its
    requests are hidden, the rest spread again (``close_keys``) and the same inference
    run (``infer_parents``: parents, stated log-odds, likelihood); each hidden call
    whose parent its key decided (``KeyEvidence.known``) counts as right when the
    inference found that parent, at the odds it stated. No call is scored by a run it
    was visible in.
    """
    from infer.calibration import MIN_LINKS

    assert evidence.given is not None
    assert evidence.known is not None
    known = evidence.known
    if int(np.count_nonzero(known >= 0)) < MIN_LINKS:
        return None
    given = evidence.given
    codes = np.unique(given[given >= 0])
    fold_of = np.full(int(given.max()) + 1, -1, np.int64)
    fold_of[codes] = np.random.default_rng(seed).permutation(codes.size) % FOLDS
    fold = np.where(given >= 0, fold_of[np.maximum(given, 0)], -1)
    stated, right, request = [], [], []
    for f in range(FOLDS):
        hidden = fold == f
        kept = np.where(hidden, -1, given)
        variant = with_keys(pairs, close_keys(pairs, kept, tol_ns))
        got, log_odds, _ = infer_parents(variant)
        scored = np.flatnonzero(hidden & (known >= 0))
        stated.append(log_odds[scored])
        right.append(got[scored] == known[scored])
        request.append(given[scored])
    held = HeldOut(*(np.concatenate(x) for x in (stated, right, request)))
    return held if held.right.size >= MIN_LINKS else None


def key_evaluation(paths: dict[str, Any]) -> dict[str, Any]:
    """The held-out check of a paths file (``held_out_check``) as a report: calls and
    requests right, with their shares.

    Raises
    ------
    ParameterError
        The paths file holds no such check (a trace without keys, or too few calls
        whose parent the keys decide, or inferred without calibration).

    Examples
    --------
    >>> doc = {"stats": {"keys": {"keyed": 900, "held_out_calls": 400, "held_out_right": 300,
    ...        "held_out_requests": 100, "held_out_requests_right": 60}}}
    >>> key_evaluation(doc)["calls"]
    {'held_out': 400, 'right': 300, 'right_rate': 0.75}
    """
    from tracefmt import ParameterError

    keys = (paths.get("stats") or {}).get("keys") or {}
    if "held_out_calls" not in keys:
        why = "its trace has no request keys" if not keys else "too few calls have a parent their key decides"
        raise ParameterError(
            f"the paths file has no held-out check of request keys ({why}; it is made by "
            "'infer nesting' with --calibrate, on a trace with trace_id or request_id)"
        )
    calls, right = keys["held_out_calls"], keys["held_out_right"]
    requests, whole = keys["held_out_requests"], keys["held_out_requests_right"]
    return {
        "keyed_calls": keys.get("keyed"),
        "calls": {"held_out": calls, "right": right, "right_rate": right / calls if calls else None},
        "requests": {
            "held_out": requests,
            "fully_right": whole,
            "fully_right_rate": whole / requests if requests else None,
        },
    }


def key_evaluation_lines(report: dict[str, Any]) -> list[str]:
    """``key_evaluation`` as text.

    >>> doc = {"stats": {"keys": {"keyed": 900, "held_out_calls": 400, "held_out_right": 300,
    ...        "held_out_requests": 100, "held_out_requests_right": 60}}}
    >>> print("\\n".join(key_evaluation_lines(key_evaluation(doc))))
    calls      right parent 300 of 400 keyed calls held out (75.0%)
    requests   fully right 60 of 100 keyed requests held out (60.0%)
    (each call scored by a run its key was hidden in; the keys decide its true parent)
    """
    c, r = report["calls"], report["requests"]
    return [
        f"calls      right parent {c['right']:,} of {c['held_out']:,} keyed calls held out "
        f"({c['right_rate']:.1%})",
        f"requests   fully right {r['fully_right']:,} of {r['held_out']:,} keyed requests held out "
        f"({r['fully_right_rate']:.1%})",
        "(each call scored by a run its key was hidden in; the keys decide its true parent)",
    ]
