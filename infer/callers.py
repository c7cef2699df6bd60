"""Callers named by an address, attributed to the service on that address that made the calls.

A capture names the server side of a connection by its service (``10.0.0.5:8080`` with
``--node-by service``), but the client side leaves from an ephemeral port, so a
service's own calls are named by its bare address (``10.0.0.5``). On one host every
service's calls then come from one node, ``127.0.0.1``, and nesting cannot hang any of
them under the visit that made them: patterns are one hop each.

A connection is opened and used by one process. So each connection (the trace's
``flow``) whose caller is a bare address that also serves (``A`` beside ``A:port``) is
given to the service on ``A`` whose visits enclose its calls, when the evidence says so:
every service ``S`` on ``A`` is scored by how many of the connection's calls fall inside
one of its open visits (``k`` of ``n``) against how often that happens by chance
(``c``, the share of the trace's time ``S`` has a visit open): the log-likelihood ratio
``k log(1 / c)`` of "made by S" over "by chance". A connection goes to the best service
when at least 90% of its calls fall in its visits, the ratio passes ``log(1000)``, and
it beats the next service by ``log(10)``; otherwise it keeps its address. So a
connection that carries many calls is attributed even on a busy host, and one that
carries a single call only where its service is seldom busy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from infer.callpairs import NodeCodes, _fifo_match, node_codes
from tracefmt import OP_CALL, OP_RETURN, op_codes

__all__ = ["CallerAttribution", "attribute_callers"]

_MIN_ENCLOSED = 0.9
_MIN_LLR = math.log(1000.0)
_MARGIN_LLR = math.log(10.0)


@dataclass
class CallerAttribution:
    """What :func:`attribute_callers` did: per renaming ``address -> service``, the
    connections given to it; the connections that stayed named by their address."""

    renamed: dict[str, int] = field(default_factory=dict)
    kept: int = 0

    def to_json(self) -> dict[str, object]:
        return {"renamed": dict(self.renamed), "kept": self.kept}

    def lines(self) -> list[str]:
        """Notes for people (empty when there was nothing to attribute)."""
        if not self.renamed and not self.kept:
            return []
        done = ", ".join(f"{k} ({v:,} connection{'s' * (v != 1)})" for k, v in sorted(self.renamed.items()))
        out = []
        if done:
            out.append(
                f"callers named by an address, given to the service there that holds their calls: {done}"
            )
        if self.kept:
            out.append(
                f"{self.kept:,} connection{'s' * (self.kept != 1)} from an address that also serves kept "
                "its address as caller: a client on that host, or calls that do not tell which service "
                "made them (a names file entry per source address, or services calling from addresses "
                "of their own, settle those)"
            )
        return out


def attribute_callers(trace: pa.Table) -> tuple[pa.Table, CallerAttribution]:
    """``trace`` with the callers of its connections attributed as the module docstring
    says (a time-sorted, valid trace with a ``flow`` column; else returned as it is).

    Examples
    --------
    >>> import pyarrow as pa
    >>> from tracefmt import validate_trace
    >>> rows, a, front, back = [], "1.1.1.1", "1.1.1.1:80", "1.1.1.1:90"
    >>> for t in range(0, 2000, 100):  # the front's visits call the back over its connection 7
    ...     rows += [(t, "call", "10.0.0.9", front, 1), (t + 5, "call", a, back, 7),
    ...              (t + 8, "return", back, a, 7), (t + 10, "return", front, "10.0.0.9", 1)]
    >>> ts, op, s, r, f = zip(*rows)
    >>> t = validate_trace(pa.table({"timestamp": pa.array(ts, pa.timestamp("ns")), "sender": s,
    ...     "receiver": r, "op": op, "id": pa.nulls(len(ts), pa.uint64()), "flow": pa.array(f, pa.uint64())}))
    >>> out, did = attribute_callers(t)
    >>> sorted(set(out["sender"].to_pylist())), did.renamed
    (['1.1.1.1:80', '1.1.1.1:90', '10.0.0.9'], {'1.1.1.1 -> 1.1.1.1:80': 1})
    """
    did = CallerAttribution()
    if "flow" not in trace.column_names or trace.num_rows == 0:
        return trace, did
    nodes = node_codes(trace)
    services = _services_by_address(nodes.names)
    if not services:
        return trace, did
    ops = op_codes(trace)
    is_call, is_ret = ops == OP_CALL, ops == OP_RETURN
    caller = np.where(is_call, nodes.sender, nodes.receiver)
    callee = np.where(is_call, nodes.receiver, nodes.sender)
    anonymous = (is_call | is_ret) & np.isin(caller, list(services))
    if not anonymous.any():
        return trace, did
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    flow = trace["flow"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    flows, owner = _owners(ts, flow, caller, callee, is_call, is_ret, anonymous, services)
    given = owner >= 0
    did.kept = int((~given).sum())
    # Each renaming with its connections: (address code, service code) pairs counted.
    address_of = caller[anonymous][np.unique(flow[anonymous], return_index=True)[1]]
    pairs, counts = np.unique(np.stack([address_of[given], owner[given]]), axis=1, return_counts=True)
    for (a, s), n in zip(pairs.T.tolist(), counts.tolist(), strict=True):
        did.renamed[f"{nodes.names[a]} -> {nodes.names[s]}"] = n
    if not given.any():
        return trace, did
    new = np.full(anonymous.size, -1, np.int64)
    at = np.searchsorted(flows, flow[anonymous])
    new[anonymous] = owner[at]
    hit = new >= 0
    sender = np.where(hit & is_call, new, nodes.sender)
    receiver = np.where(hit & is_ret, new, nodes.receiver)
    return _with_nodes(trace, nodes, sender, receiver), did


def _with_nodes(trace: pa.Table, nodes: NodeCodes, sender: np.ndarray, receiver: np.ndarray) -> pa.Table:
    """``trace`` with its sender and receiver columns given as codes into ``nodes.names``."""
    names = pa.array(nodes.names, pa.string())
    for column, codes in (("sender", sender), ("receiver", receiver)):
        col = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), names)
        trace = trace.set_column(
            trace.schema.get_field_index(column), column, col.cast(trace.schema.field(column).type)
        )
    return trace


def _services_by_address(names: list[str]) -> dict[int, list[int]]:
    """Codes of the bare addresses that also serve, with their services' codes
    (``A`` -> ``[A:p, ...]``)."""
    code = {name: k for k, name in enumerate(names)}
    by_address: dict[int, list[int]] = {}
    for name, k in code.items():
        address, sep, port = name.rpartition(":")
        address = address.strip("[]")
        if sep and port.isdigit() and address in code:
            by_address.setdefault(code[address], []).append(k)
    return by_address


def _owners(
    ts: np.ndarray,
    flow: np.ndarray,
    caller: np.ndarray,
    callee: np.ndarray,
    is_call: np.ndarray,
    is_ret: np.ndarray,
    anonymous: np.ndarray,
    services: dict[int, list[int]],
) -> tuple[np.ndarray, np.ndarray]:
    """The anonymous connections (sorted flow ids) and the service code each is given
    to, -1 where the evidence does not decide."""
    rows = np.flatnonzero(is_call | is_ret)
    # Visits: a call and its return, in order within their connection (a connection
    # carries one call at a time, or ids tell them apart).
    none = np.zeros(rows.size, bool)
    ci, ri = _fifo_match(flow[rows], np.zeros(rows.size, np.uint64), none, ts[rows], is_call[rows])
    v_start, v_end, v_node = ts[rows[ci]], ts[rows[ri]], callee[rows[ci]]
    span = max(int(ts.max()) - int(ts.min()), 1)
    calls = np.flatnonzero(anonymous & is_call)
    flows = np.unique(flow[anonymous])
    owner = np.full(flows.size, -1, np.int64)
    at = np.searchsorted(flows, flow[calls])
    n_calls = np.bincount(at, minlength=flows.size)
    for address, servs in services.items():
        mine = caller[calls] == address
        # Per service (a few on an address), per connection: the log-likelihood ratio.
        llr = np.full((len(servs), flows.size), -np.inf)
        for j, service in enumerate(servs):
            sel = v_node == service
            if not sel.any():
                continue
            starts, ends = np.sort(v_start[sel]), np.sort(v_end[sel])
            t = ts[calls[mine]]
            enclosed = (np.searchsorted(starts, t, "right") - np.searchsorted(ends, t, "left")) > 0
            # A call opens a visit of its callee: that one holds it, but did not make it.
            enclosed &= callee[calls[mine]] != service
            k = np.bincount(at[mine], weights=enclosed, minlength=flows.size)
            chance = min(max(_covered(starts, ends) / span, 1e-9), 1.0 - 1e-9)
            llr[j] = np.where((k >= _MIN_ENCLOSED * n_calls) & (k > 0), k * math.log(1.0 / chance), -np.inf)
        second = np.partition(llr, -2, axis=0)[-2] if len(servs) > 1 else np.full(flows.size, -np.inf)
        top = llr.max(axis=0)
        with np.errstate(invalid="ignore"):  # -inf - -inf where no service holds a connection
            ok = (top >= _MIN_LLR) & (top - second >= _MARGIN_LLR)
        owner = np.where(ok, np.asarray(servs)[llr.argmax(axis=0)], owner)
    return flows, owner


def _covered(starts: np.ndarray, ends: np.ndarray) -> float:
    """Nanoseconds with at least one visit open (visits as sorted starts and ends)."""
    times = np.concatenate([starts, ends])
    step = np.concatenate([np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)])
    order = np.lexsort((-step, times))  # at one instant, opens before closes
    times, open_ = times[order], np.cumsum(step[order])
    return float(np.sum(np.diff(times)[open_[:-1] > 0]))
