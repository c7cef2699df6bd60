"""Phase 1 of nesting: RPC calls matched with their returns.

With ids, a return closes the call with the same caller, callee and id; without ids
(null, or all zero for a caller/callee pair) or when ids repeat, it closes the
earliest still-open call between the same two nodes. Returns that find no open call
and calls never returned are counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tracefmt import OP_CALL, OP_RETURN, OP_SEND, SchemaError, format_instant_ns, op_codes

__all__ = ["CallPairs", "NodeCodes", "match_calls", "node_codes"]


@dataclass(frozen=True)
class NodeCodes:
    """Sender and receiver of every message as codes into one list of node names."""

    names: list[str]
    sender: np.ndarray
    receiver: np.ndarray


def node_codes(trace: pa.Table) -> NodeCodes:
    """One node numbering for both ``sender`` and ``receiver`` (their dictionaries differ)."""
    table = trace.select(["sender", "receiver"]).unify_dictionaries().combine_chunks()
    if table.num_rows == 0:
        return NodeCodes([], np.zeros(0, np.int64), np.zeros(0, np.int64))
    snd, rcv = table["sender"].chunk(0), table["receiver"].chunk(0)
    s_names = snd.dictionary.to_pylist()
    r_names = rcv.dictionary.to_pylist()
    names = sorted(set(s_names) | set(r_names))
    index = {n: i for i, n in enumerate(names)}
    s_map = np.array([index[n] for n in s_names], np.int64)
    r_map = np.array([index[n] for n in r_names], np.int64)
    return NodeCodes(
        names,
        s_map[snd.indices.to_numpy(zero_copy_only=False)],
        r_map[rcv.indices.to_numpy(zero_copy_only=False)],
    )


@dataclass(frozen=True)
class CallPairs:
    """Matched calls, one entry per pair, sorted by call time.

    Attributes
    ----------
    caller, callee : ndarray of int64
        Node codes.
    t_call, t_return : ndarray of int64
        Nanoseconds.
    call_row, return_row : ndarray of int64
        Rows of the two messages in the (time-sorted) trace.
    unmatched_calls, unmatched_returns, sends : int
        Messages left out.
    key, strict : ndarray, optional
        Per pair, its request key (-1: none) and whether it must take a parent of its
        own key (``infer.keys``): the candidates the keys leave. None: no keys.
    """

    caller: np.ndarray
    callee: np.ndarray
    t_call: np.ndarray
    t_return: np.ndarray
    call_row: np.ndarray
    return_row: np.ndarray
    unmatched_calls: int
    unmatched_returns: int
    sends: int
    key: np.ndarray | None = None
    strict: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.caller.size)

    @classmethod
    def from_rows(
        cls,
        nodes: NodeCodes,
        ts: np.ndarray,
        call_row: np.ndarray,
        return_row: np.ndarray,
        *,
        unmatched_calls: int,
        unmatched_returns: int,
        sends: int,
    ) -> CallPairs:
        """Pairs from the rows of their messages in a time-sorted trace, in call order.

        Row order is call-time order, with calls at one instant as the trace has them.
        """
        # Rows are distinct and below the trace length: place them, no sort needed.
        slot = np.full(ts.size, -1, np.int64)
        slot[call_row] = np.arange(call_row.size)
        order = slot[slot >= 0]
        call_row, return_row = call_row[order], return_row[order]
        return cls(
            caller=nodes.sender[call_row],
            callee=nodes.receiver[call_row],
            t_call=ts[call_row],
            t_return=ts[return_row],
            call_row=call_row,
            return_row=return_row,
            unmatched_calls=unmatched_calls,
            unmatched_returns=unmatched_returns,
            sends=sends,
        )

    def take(self, index: np.ndarray) -> CallPairs:
        """The pairs at ``index`` (unmatched counts are kept as they were)."""
        return CallPairs(
            self.caller[index],
            self.callee[index],
            self.t_call[index],
            self.t_return[index],
            self.call_row[index],
            self.return_row[index],
            self.unmatched_calls,
            self.unmatched_returns,
            self.sends,
            None if self.key is None else self.key[index],
            None if self.strict is None else self.strict[index],
        )


def _fifo_match(
    pair: np.ndarray, ident: np.ndarray, has_id: np.ndarray, ts: np.ndarray, is_call: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Match calls and returns of one key (pair, id or no id) in time order, earliest open call first.

    Returns ``(call_index, return_index)`` into the input arrays. A return with no open
    call is unmatched; calls left open at the end are unmatched.
    """
    n = pair.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # Events come in time order; at equal times calls go before returns, so a
    # zero-length call still pairs. Then a stable sort groups the keys, keeping that order.
    tie = np.concatenate([[0], np.cumsum(np.diff(ts) != 0)])
    # Nearly sorted already, so this stable sort is close to linear.
    order = np.argsort(tie * 2 + ~is_call, kind="stable")
    by_key, start = _group_order(pair[order] * 2 + has_id[order], ident[order])
    order = order[by_key]
    c = is_call[order]
    group = np.cumsum(start) - 1
    step = np.where(c, 1, -1).astype(np.int64)
    total = np.cumsum(step)
    s = total - (total - step)[start][group]  # running sum within the group
    # Open calls follow O_n = max(0, O_{n-1} + step): a return with none open is dropped.
    # O_n = S_n - min(0, min_{k<=n} S_k); the running minimum restarts per group by
    # lowering each later group below every earlier one.
    big = 2 * n + 2
    running_min = np.minimum.accumulate(s - group * big) + group * big
    o = s - np.minimum(running_min, 0)
    open_before = np.where(start, 0, np.concatenate([[0], o[:-1]]))
    matched_ret = ~c & (open_before > 0)
    # FIFO: the j-th matched return of a group closes the j-th call of the group.
    ret_rank = _rank_in_group(group, matched_ret)
    calls_sorted = np.flatnonzero(c)
    rets_sorted = np.flatnonzero(matched_ret)
    # Position of the j-th call of each group among calls_sorted.
    first_call = np.searchsorted(group[calls_sorted], group[rets_sorted], side="left")
    pick = calls_sorted[first_call + ret_rank[rets_sorted]]
    return order[pick], order[rets_sorted]


def _group_order(major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stable order by (major, minor), and where in that order each (major, minor) group
    starts: one plain sort of packed int64 keys when they fit (ids replaced by their rank
    among distinct ids when their range is wide), else lexsort."""
    n = major.size
    lo = int(minor.min()) if n else 0
    span = int(minor.max()) - lo if n else 0
    if span >= n:
        _, code = np.unique(minor, return_inverse=True)
        code, span = code.ravel().astype(np.int64), int(code.max()) if n else 0
    else:
        code = (
            (minor - np.uint64(lo)).astype(np.int64)
            if minor.dtype.kind == "u"
            else minor.astype(np.int64) - lo
        )
    minor_bits, pos_bits = span.bit_length(), max(n - 1, 0).bit_length()
    start = np.ones(n, bool)
    if int(major.max(initial=0)).bit_length() + minor_bits + pos_bits > 63:
        order = np.lexsort((minor, major))
        for k in (major[order], minor[order]):
            start[1:] &= k[1:] == k[:-1]
        return order, ~start | (np.arange(n) == 0)
    # The position last makes every key unique, so an unstable sort keeps the order.
    key = np.sort(
        (((major.astype(np.int64) << minor_bits) | code) << pos_bits) | np.arange(n, dtype=np.int64)
    )
    high = key >> pos_bits
    start[1:] = high[1:] != high[:-1]
    return key & ((1 << pos_bits) - 1), start


def _rank_in_group(group: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """0-based rank of each masked element among masked elements of its group (in order)."""
    cum = np.cumsum(mask)
    start = np.ones(group.size, bool)
    start[1:] = group[1:] != group[:-1]
    before_group = (cum - mask)[start][np.cumsum(start) - 1]
    return cum - mask - before_group


#: The longest span whose durations (a return minus its call, a child's delay) are int64.
MAX_SPAN_NS = 2**63 - 1


def check_span(ts: np.ndarray) -> None:
    """Refuse timestamps further apart than int64 nanoseconds can subtract (292 years):
    every duration the inference takes is a difference of two of them."""
    if ts.size and int(ts.max()) - int(ts.min()) > MAX_SPAN_NS:
        first, last = format_instant_ns(int(ts.min())), format_instant_ns(int(ts.max()))
        raise SchemaError(
            f"the trace spans {first} .. {last}, more than the 292 years between two timestamps "
            "whose difference int64 nanoseconds hold: drop the messages whose times are wrong, "
            "or split the trace"
        )


def match_calls(trace: pa.Table, nodes: NodeCodes, *, use_ids: bool = True) -> CallPairs:
    """Match every call with its return (see the module docstring).

    ``trace`` must be sorted by time (``tracefmt.sort_trace``), as ``infer_nesting``
    makes it.
    """
    ops = op_codes(trace)
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    check_span(ts)
    ident = trace["id"].combine_chunks()
    has_id = ident.is_valid().to_numpy(zero_copy_only=False) if use_ids else np.zeros(ts.size, bool)
    ids = ident.fill_null(0).to_numpy().astype(np.uint64) if ts.size else np.zeros(0, np.uint64)
    is_call, is_ret = ops == OP_CALL, ops == OP_RETURN
    rows = np.flatnonzero(is_call | is_ret)
    caller = np.where(is_call, nodes.sender, nodes.receiver)[rows]
    callee = np.where(is_call, nodes.receiver, nodes.sender)[rows]
    n_nodes = max(len(nodes.names), 1)
    pair = caller * n_nodes + callee
    idv, has = ids[rows], has_id[rows]
    # A pair whose ids are all zero has no ids: zero is what such protocols send.
    if has.any():
        nonzero = np.bincount(pair[has], weights=(idv[has] != 0), minlength=n_nodes * n_nodes)
        has &= nonzero[pair] > 0
    # Key: pair, then id where there is one; id-less messages of a pair share a key.
    ci, ri = _fifo_match(pair, np.where(has, idv, np.uint64(0)), has, ts[rows], is_call[rows])
    call_row, ret_row = rows[ci], rows[ri]
    return CallPairs.from_rows(
        nodes,
        ts,
        call_row,
        ret_row,
        unmatched_calls=int(is_call.sum()) - call_row.size,
        unmatched_returns=int(is_ret.sum()) - ret_row.size,
        sends=int((ops == OP_SEND).sum()),
    )
