"""The tuples of children a request round offers each visit, enumerated in one
compiled pass.

Why compiled (numba): a busy fan-out trace offers millions of tuples a round (every
shape of a visit's grammar times the choices of its candidates that make it), each
only a few calls long. As Python objects that was most of a request round's time.
``infer.request_model._visit_tuples`` is the reference this loop reproduces, tuple for
tuple and in the same order; the tests compare the two.
"""

from __future__ import annotations

import numpy as np

from tracefmt.compiled import compiled

__all__ = ["visit_tuples"]


@compiled()
def _comb(n: np.int64, k: np.int64) -> np.float64:
    """n choose k as a float (exact up to 2**53, and only compared with a small bound)."""
    if k < 0 or k > n:
        return 0.0
    out = 1.0
    for j in range(k):
        out = out * (n - j) / (j + 1)
    return out


@compiled()
def _walk(
    fill: bool,
    v_type: np.ndarray,
    mine_ptr: np.ndarray,
    mine_call: np.ndarray,
    mine_class: np.ndarray,
    mine_fixed: np.ndarray,
    cand_ptr: np.ndarray,
    cand_call: np.ndarray,
    cand_class: np.ndarray,
    cand_own: np.ndarray,
    type_ptr: np.ndarray,
    shape_ptr: np.ndarray,
    shape_class: np.ndarray,
    shape_count: np.ndarray,
    n_classes: np.int64,
    max_combinations: np.int64,
    t_visit: np.ndarray,
    t_shape: np.ndarray,
    t_len: np.ndarray,
    members: np.ndarray,
) -> tuple[np.int64, np.int64]:
    """Counts the tuples and their members, or with ``fill`` writes them too."""
    have = np.zeros(n_classes, np.int64)
    want = np.zeros(n_classes, np.int64)
    c_start = np.zeros(n_classes, np.int64)
    c_len = np.zeros(n_classes, np.int64)
    n_t = 0
    n_m = 0
    max_need = 0
    max_width = 0
    for s in range(shape_ptr.size - 1):
        max_need = max(max_need, shape_ptr[s + 1] - shape_ptr[s])
        max_width = max(max_width, shape_count[shape_ptr[s] : shape_ptr[s + 1]].sum())
    need_k = np.zeros(max_need + 1, np.int64)
    need_m = np.zeros(max_need + 1, np.int64)
    pool = np.zeros(max_need + 1, np.int64)
    comb_at = np.zeros(max_need + 2, np.int64)
    idx = np.zeros(max_width + 1, np.int64)
    for v in range(v_type.size):
        m0, m1 = mine_ptr[v], mine_ptr[v + 1]
        n_fixed = 0
        for j in range(m0, m1):
            if mine_fixed[j]:
                have[mine_class[j]] += 1
                n_fixed += 1
        k0, k1 = cand_ptr[v], cand_ptr[v + 1]
        for j in range(k0, k1):
            k = cand_class[j]
            if c_len[k] == 0:
                c_start[k] = j
            c_len[k] += 1
        t = v_type[v]
        for s in range(type_ptr[t], type_ptr[t + 1]):
            e0, e1 = shape_ptr[s], shape_ptr[s + 1]
            for e in range(e0, e1):
                want[shape_class[e]] = shape_count[e]
            ok = True
            for j in range(m0, m1):
                if mine_fixed[j] and have[mine_class[j]] > want[mine_class[j]]:
                    ok = False
            for e in range(e0, e1):
                want[shape_class[e]] = 0
            if not ok:
                continue
            n_need = 0
            total = n_fixed
            for e in range(e0, e1):
                k = shape_class[e]
                m = shape_count[e] - have[k]
                if m > 0:
                    if m > c_len[k]:
                        ok = False
                    need_k[n_need] = k
                    need_m[n_need] = m
                    pool[n_need] = c_len[k]
                    total += m
                    n_need += 1
            if not ok:
                continue
            # Cut the longest pool (beyond what it must give) by its least likely
            # candidate until the choices fit; the first such pool on ties.
            while True:
                prod = 1.0
                for q in range(n_need):
                    prod *= _comb(pool[q], need_m[q])
                if prod <= max_combinations:
                    break
                best = 0
                for q in range(1, n_need):
                    if pool[q] - need_m[q] > pool[best] - need_m[best]:
                        best = q
                pool[best] -= 1
            # The odometer over each needed class's combination, the last the fastest
            # (itertools.product of itertools.combinations).
            comb_at[0] = 0
            for q in range(n_need):
                comb_at[q + 1] = comb_at[q] + need_m[q]
            width = comb_at[n_need]
            for q in range(n_need):
                for r in range(need_m[q]):
                    idx[comb_at[q] + r] = r
            while True:
                # The visit's own tuple is offered apart, first.
                same = total == m1 - m0
                if same:
                    for q in range(n_need):
                        base = c_start[need_k[q]]
                        for r in range(need_m[q]):
                            if not cand_own[base + idx[comb_at[q] + r]]:
                                same = False
                if not same:
                    if fill:
                        t_visit[n_t] = v
                        t_shape[n_t] = s
                        t_len[n_t] = total
                        at = n_m
                        for j in range(m0, m1):
                            if mine_fixed[j]:
                                members[at] = mine_call[j]
                                at += 1
                        for q in range(n_need):
                            base = c_start[need_k[q]]
                            for r in range(need_m[q]):
                                members[at] = cand_call[base + idx[comb_at[q] + r]]
                                at += 1
                    n_t += 1
                    n_m += total
                # Next: advance the last class's combination, carrying leftwards.
                q = n_need - 1
                while q >= 0:
                    m = need_m[q]
                    n = pool[q]
                    a = comb_at[q]
                    r = m - 1
                    while r >= 0 and idx[a + r] == n - m + r:
                        r -= 1
                    if r >= 0:
                        idx[a + r] += 1
                        for u in range(r + 1, m):
                            idx[a + u] = idx[a + u - 1] + 1
                        break
                    for u in range(m):
                        idx[a + u] = u
                    q -= 1
                if q < 0 or width == 0:
                    break
        for j in range(m0, m1):
            if mine_fixed[j]:
                have[mine_class[j]] = 0
        for j in range(k0, k1):
            c_len[cand_class[j]] = 0
    return n_t, n_m


def visit_tuples(
    v_type: np.ndarray,
    mine_ptr: np.ndarray,
    mine_call: np.ndarray,
    mine_class: np.ndarray,
    mine_fixed: np.ndarray,
    cand_ptr: np.ndarray,
    cand_call: np.ndarray,
    cand_class: np.ndarray,
    cand_own: np.ndarray,
    type_ptr: np.ndarray,
    shape_ptr: np.ndarray,
    shape_class: np.ndarray,
    shape_count: np.ndarray,
    n_classes: int,
    max_combinations: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every visit's tuples besides its own: per tuple its visit (an index into
    ``v_type``), its shape (an index into ``shape_ptr``) and length, and the members of
    all of them, flat.

    Per visit ``v``: its children now are ``mine_call[mine_ptr[v]:mine_ptr[v + 1]]``
    (``mine_fixed``: held fixed, not free in the window); its candidates among the free
    calls are ``cand_call[cand_ptr[v]:cand_ptr[v + 1]]``, grouped by class and each class
    in the order they are to be preferred (``cand_own``: the visit's own). A type
    ``t``'s shapes are ``type_ptr[t]:type_ptr[t + 1]``, shape ``s`` the classes
    ``shape_class[shape_ptr[s]:shape_ptr[s + 1]]`` with their counts.

    >>> i = lambda *x: np.array(x, np.int64)
    >>> out = visit_tuples(i(0), i(0, 0), i(), i(), np.zeros(0, bool), i(0, 2), i(7, 8),
    ...     i(0, 0), np.zeros(2, bool), i(0, 1), i(0, 1), i(0), i(1), 1, 64)
    >>> [a.tolist() for a in out]
    [[0, 0], [0, 0], [1, 1], [7, 8]]
    """
    args = (
        v_type,
        mine_ptr,
        mine_call,
        mine_class,
        mine_fixed,
        cand_ptr,
        cand_call,
        cand_class,
        cand_own,
        type_ptr,
        shape_ptr,
        shape_class,
        shape_count,
        np.int64(n_classes),
        np.int64(max_combinations),
    )
    empty = np.zeros(0, np.int64)
    n_t, n_m = _walk(False, *args, empty, empty, empty, empty)
    t_visit, t_shape, t_len = (np.zeros(n_t, np.int64) for _ in range(3))
    members = np.zeros(n_m, np.int64)
    _walk(True, *args, t_visit, t_shape, t_len, members)
    return t_visit, t_shape, t_len, members
