"""The inner loop of chain rounds, compiled: the likelihood of a parent's chain spliced
with one candidate put in or taken out, for millions of candidates a round.

Why compiled (numba): every candidate needs its parent's chain rebuilt, of a length
that varies from parent to parent, with a running maximum of returns restarted per
concurrent group. In numpy that is a dozen temporary arrays the size of all chains
together per round; here it is one pass with no temporaries, several times faster at
high parallelism. ``infer.chains.ChainModel.chain_likelihood`` is the same model in
numpy, kept for learning and as the reference the tests compare this loop to.
"""

from __future__ import annotations

import numpy as np

from tracefmt.compiled import compiled

__all__ = ["bin_edges", "run_move_gains", "spliced_likelihood", "tuples_likelihood"]

_CALL, _RETURN, _SENT = 0, 1, 2


def bin_edges(bins_of, n_bins: int) -> np.ndarray:
    """For bin k = 1 .. n_bins - 1, the smallest delay in ns that ``bins_of`` puts in
    bin k or above, found by bisection on ``bins_of`` itself, so that counting the
    edges at or below a delay reproduces its bin exactly, float rounding included."""
    k = np.arange(1, n_bins, dtype=np.int64)
    lo = np.zeros(k.size, np.int64)  # bins_of(lo) < k
    hi = np.full(k.size, np.int64(1) << 62)  # bins_of(hi) >= k
    for _ in range(63):
        mid = lo + (hi - lo) // 2
        up = bins_of(mid) >= k
        hi = np.where(up, mid, hi)
        lo = np.where(up, lo, mid)
        if np.all(hi - lo <= 1):
            break
    # bins_of(0) is 0 < k for every k, so hi is the first delay reaching bin k.
    return hi


@compiled(inline="always")
def _bin(delay: np.int64, edges: np.ndarray, n_bins: np.int64) -> np.int64:
    """The delay's bin, as ``infer.candidates.delay_bins``: the edges at or below its
    magnitude, counted by bisection; negative delays in the mirror bins."""
    mag = -delay if delay < 0 else delay
    lo, hi = 0, edges.size
    while lo < hi:
        mid = (lo + hi) >> 1
        if edges[mid] <= mag:
            lo = mid + 1
        else:
            hi = mid
    return lo + n_bins if delay < 0 else lo


# The model travels as separate arguments, not a tuple: arrays in a tuple are
# reference-counted at every call, which made the loop nearly three times slower.
# ``ChainModel.kernel_arguments`` lists them in this order.


@compiled(inline="always")
def _edge(
    in_kind: np.int64,
    in_pair: np.int64,
    out_kind: np.int64,
    out_pair: np.int64,
    t_call: np.ndarray,
    t_return: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    n_nodes: np.int64,
    edges: np.ndarray,
    n_bins: np.int64,
    table: np.ndarray,
    slot: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    unseen: np.float64,
    choice: np.ndarray,
) -> float:
    """The log-likelihood of one edge, as ``ChainModel.lookup(ChainModel.cells(...))``."""
    if in_kind == _CALL:
        node, in_peer, t_in = callee[in_pair], caller[in_pair], t_call[in_pair]
    elif in_kind == _RETURN:
        node, in_peer, t_in = caller[in_pair], callee[in_pair], t_return[in_pair]
    else:
        node, in_peer, t_in = caller[in_pair], callee[in_pair], t_call[in_pair]
    if out_kind == _CALL:
        out_peer, t_out = callee[out_pair], t_call[out_pair]
    else:
        out_peer, t_out = caller[out_pair], t_return[out_pair]
    head_in = (node * n_nodes + in_peer) * 3 + in_kind
    head_out = (head_in * n_nodes + out_peer) * 2 + out_kind
    delay_bin = _bin(t_out - t_in, edges, n_bins)
    cell = head_out * (2 * n_bins) + delay_bin
    # The tables have the choice's log-probability folded in (``ChainModel.kernel_arguments``).
    if table.size > 0:
        if slot.size == 0:  # every cell up to the largest key
            if cell < table.size:
                return table[cell]
            return choice[head_in] + unseen
        row = slot[head_out]  # the learnt heads' rows
        if row >= 0:
            return table[row * (2 * n_bins) + delay_bin]
        return choice[head_in] + unseen
    score = choice[head_in]
    if keys.size == 0:
        return score + unseen
    at = np.searchsorted(keys, cell)
    if at < keys.size and keys[at] == cell:
        return score + values[at]
    return score + unseen


@compiled(inline="always")
def _chain(
    o: np.int64,
    buf: np.ndarray,
    length: np.int64,
    t_call: np.ndarray,
    t_return: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    n_nodes: np.int64,
    edges: np.ndarray,
    n_bins: np.int64,
    table: np.ndarray,
    slot: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    unseen: np.float64,
    choice: np.ndarray,
) -> float:
    """The log-likelihood of the chain of call ``o`` with the children ``buf[:length]``
    (in call order): edges as ``infer.chains._sequence_edges``."""
    total = 0.0
    prev = -1
    latest = -1
    latest_t = np.int64(0)
    for j in range(length):
        kid = buf[j]
        if j == 0:
            total += _edge(
                _CALL, o, _CALL, kid,
                t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                table, slot, keys, values, unseen, choice,
            )  # fmt: skip
            latest, latest_t = kid, t_return[kid]
        elif t_call[kid] < latest_t:  # called while an earlier sibling is out: at once
            total += _edge(
                _SENT, prev, _CALL, kid,
                t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                table, slot, keys, values, unseen, choice,
            )  # fmt: skip
            if t_return[kid] > latest_t:
                latest, latest_t = kid, t_return[kid]
        else:
            total += _edge(
                _RETURN, latest, _CALL, kid,
                t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                table, slot, keys, values, unseen, choice,
            )  # fmt: skip
            latest, latest_t = kid, t_return[kid]
        prev = kid
    if length == 0:
        return total + _edge(
            _CALL, o, _RETURN, o,
            t_call, t_return, caller, callee, n_nodes, edges, n_bins,
            table, slot, keys, values, unseen, choice,
        )  # fmt: skip
    return total + _edge(
        _RETURN, latest, _RETURN, o,
        t_call, t_return, caller, callee, n_nodes, edges, n_bins,
        table, slot, keys, values, unseen, choice,
    )  # fmt: skip


@compiled()
def tuples_likelihood(
    owner: np.ndarray,
    kids: np.ndarray,
    start: np.ndarray,
    t_call: np.ndarray,
    t_return: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    n_nodes: np.int64,
    edges: np.ndarray,
    n_bins: np.int64,
    table: np.ndarray,
    slot: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    unseen: np.float64,
    choice: np.ndarray,
) -> np.ndarray:
    """Per tuple s: the log-likelihood of the chain of call ``owner[s]`` with the
    children ``kids[start[s]:start[s + 1]]`` (in call order): what request rounds score
    each visit's offered children by."""
    out = np.zeros(owner.size)
    for s in range(owner.size):
        out[s] = _chain(
            owner[s], kids[start[s] : start[s + 1]], start[s + 1] - start[s],
            t_call, t_return, caller, callee, n_nodes, edges, n_bins,
            table, slot, keys, values, unseen, choice,
        )  # fmt: skip
    return out


# Long on purpose: a compiled loop kernel, whose steps as functions cost a call each inside numba.
@compiled()
def spliced_likelihood(
    owner: np.ndarray,
    group: np.ndarray,
    insert: np.ndarray,
    insert_rank: np.ndarray,
    remove_rank: np.ndarray,
    c: np.ndarray,
    member_pos: np.ndarray,
    member_start: np.ndarray,
    member_count: np.ndarray,
    t_call: np.ndarray,
    t_return: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    n_nodes: np.int64,
    edges: np.ndarray,
    n_bins: np.int64,
    table: np.ndarray,
    slot: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    unseen: np.float64,
    choice: np.ndarray,
) -> np.ndarray:
    """Per entry s: the log-likelihood of the chain of call ``owner[s]`` whose children
    are the members of ``group[s]`` (positions ``member_pos[member_start[g] :
    member_start[g] + member_count[g]]`` into ``c``, in call order) less the one at
    ``remove_rank[s]`` (-1: none), with position ``insert[s]`` (-1: none) put in at
    ``insert_rank[s]`` among the rest."""
    out = np.zeros(owner.size)
    for s in range(owner.size):
        g = group[s]
        ins, ri, ro = insert[s], insert_rank[s], remove_rank[s]
        length = member_count[g] - (1 if ro >= 0 else 0) + (1 if ins >= 0 else 0)
        o = owner[s]
        # ``_chain``'s walk, written out again and reading the spliced children in place:
        # copying them to a buffer first, or sharing the walk's step with ``_chain`` as a
        # function returning a tuple, made this loop (run for every candidate of every
        # round) 1.6x slower (benchmarks/chain_kernel.py).
        total = 0.0
        prev = -1
        latest = -1
        latest_t = np.int64(0)
        for j in range(length):
            if ins >= 0 and j == ri:
                kid = c[ins]
            else:
                jj = j - 1 if (ins >= 0 and j > ri) else j
                if ro >= 0 and jj >= ro:
                    jj += 1
                kid = c[member_pos[member_start[g] + jj]]
            if j == 0:
                total += _edge(
                    _CALL, o, _CALL, kid,
                    t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                    table, slot, keys, values, unseen, choice,
                )  # fmt: skip
                latest, latest_t = kid, t_return[kid]
            elif t_call[kid] < latest_t:
                total += _edge(
                    _SENT, prev, _CALL, kid,
                    t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                    table, slot, keys, values, unseen, choice,
                )  # fmt: skip
                if t_return[kid] > latest_t:
                    latest, latest_t = kid, t_return[kid]
            else:
                total += _edge(
                    _RETURN, latest, _CALL, kid,
                    t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                    table, slot, keys, values, unseen, choice,
                )  # fmt: skip
                latest, latest_t = kid, t_return[kid]
            prev = kid
        if length == 0:
            total += _edge(
                _CALL, o, _RETURN, o,
                t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                table, slot, keys, values, unseen, choice,
            )  # fmt: skip
        else:
            total += _edge(
                _RETURN, latest, _RETURN, o,
                t_call, t_return, caller, callee, n_nodes, edges, n_bins,
                table, slot, keys, values, unseen, choice,
            )  # fmt: skip
        out[s] = total
    return out


# Long on purpose: a compiled loop kernel, whose steps as functions cost a call each inside numba.
@compiled()
def run_move_gains(
    source: np.ndarray,
    dest: np.ndarray,
    first: np.ndarray,
    count_moved: np.ndarray,
    order: np.ndarray,
    start: np.ndarray,
    count: np.ndarray,
    t_call: np.ndarray,
    t_return: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    n_nodes: np.int64,
    edges: np.ndarray,
    n_bins: np.int64,
    table: np.ndarray,
    slot: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    unseen: np.float64,
    choice: np.ndarray,
) -> np.ndarray:
    """Per proposal: the gain in log-likelihood of moving the children at positions
    ``first .. first + count_moved - 1`` of ``order`` (children grouped by parent, in
    call order; a parent's at ``start``, ``count`` of them) from ``source`` to ``dest``,
    both chains rebuilt (the run merged into the destination's children in call order,
    ties by pair index)."""
    out = np.zeros(source.size)
    longest = 1
    for p in range(count.size):
        longest = max(longest, count[p])
    buf = np.empty(longest + 64, np.int64)
    for s in range(source.size):
        p, q, f, k = source[s], dest[s], first[s], count_moved[s]
        if buf.size < count[q] + k:
            buf = np.empty(count[q] + k, np.int64)
        n = 0
        for j in range(start[p], start[p] + count[p]):
            buf[n] = order[j]
            n += 1
        gain = -_chain(
            p, buf, n, t_call,
            t_return, caller, callee, n_nodes, edges, n_bins, table, slot, keys, values, unseen, choice,
        )  # fmt: skip
        n = 0
        for j in range(start[p], start[p] + count[p]):
            if j < f or j >= f + k:
                buf[n] = order[j]
                n += 1
        gain += _chain(
            p, buf, n, t_call,
            t_return, caller, callee, n_nodes, edges, n_bins, table, slot, keys, values, unseen, choice,
        )  # fmt: skip
        n = 0
        for j in range(start[q], start[q] + count[q]):
            buf[n] = order[j]
            n += 1
        gain -= _chain(
            q, buf, n, t_call,
            t_return, caller, callee, n_nodes, edges, n_bins, table, slot, keys, values, unseen, choice,
        )  # fmt: skip
        # Merge the destination's children and the run, both in call order.
        a, b, n = start[q], f, 0
        while a < start[q] + count[q] or b < f + k:
            take_a = b >= f + k
            if not take_a and a < start[q] + count[q]:
                x, y = order[a], order[b]
                take_a = t_call[x] < t_call[y] or (t_call[x] == t_call[y] and x < y)
            if take_a:
                buf[n] = order[a]
                a += 1
            else:
                buf[n] = order[b]
                b += 1
            n += 1
        out[s] = gain + _chain(
            q, buf, n, t_call,
            t_return, caller, callee, n_nodes, edges, n_bins, table, slot, keys, values, unseen, choice,
        )  # fmt: skip
    return out


@compiled()
def occupants(
    c: np.ndarray,
    member: np.ndarray,
    group: np.ndarray,
    member_pos: np.ndarray,
    member_start: np.ndarray,
    member_count: np.ndarray,
    t_call: np.ndarray,
    t_return: np.ndarray,
    callee: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """For each non-member position of a chunk, its occupant: the member of its group
    (positions ``member_pos[member_start[g] : + member_count[g]]``) calling the same node
    that overlaps it in time, the nearest in call time (ties: the earlier). Returns the
    positions that have one and their occupants' positions."""
    found = np.empty(c.size, np.int64)
    occupant = np.empty(c.size, np.int64)
    n = 0
    for i in range(c.size):
        if member[i]:
            continue
        k = c[i]
        g = group[i]
        best, gap = -1, np.int64(-1)
        for j in range(member_start[g], member_start[g] + member_count[g]):
            o = c[member_pos[j]]
            if callee[o] != callee[k] or not (t_call[o] < t_return[k] and t_call[k] < t_return[o]):
                continue
            d = t_call[o] - t_call[k]
            d = -d if d < 0 else d
            if best < 0 or d < gap:
                best, gap = member_pos[j], d
        if best >= 0:
            found[n], occupant[n] = i, best
            n += 1
    return found[:n], occupant[:n]
