"""What is in a trace: counts, time span, nodes, edges, call/return balance."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from tracefmt.convert import iter_any_trace, trace_format
from tracefmt.display import printable
from tracefmt.parquet import iter_trace, read_trace_metadata
from tracefmt.schema import CORE_COLUMNS, OP_CALL, OP_RETURN, OPS, op_codes, validate_trace
from tracefmt.units import format_duration_ns, format_instant_ns

__all__ = ["TraceSummary", "summarize_trace"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TraceSummary:
    """A trace at a glance.

    Attributes
    ----------
    messages : int
    start_ns, end_ns : int or None
        First and last timestamp (nanoseconds since the epoch, UTC).
    op_counts : dict
        Messages per op (``call``, ``return``, ``send``).
    edges : dict
        ``(sender, receiver) -> messages``, every directed edge seen.
    rpc_pairs : dict
        ``(caller, callee) -> (calls, returns)`` where calls go caller->callee and
        returns come back callee->caller.
    null_ids : int
        Messages without an id.
    columns : list of str
        Optional and ground-truth columns present besides the core ones.
    provenance : dict
        The file's recorded provenance (empty for in-memory tables).
    """

    messages: int
    start_ns: int | None
    end_ns: int | None
    op_counts: dict[str, int]
    edges: dict[tuple[str, str], int]
    rpc_pairs: dict[tuple[str, str], tuple[int, int]]
    null_ids: int
    columns: list[str] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last message."""
        if self.start_ns is None or self.end_ns is None:
            return 0.0
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def rate_per_s(self) -> float:
        """Messages per second over the span (0 for a span of zero)."""
        return self.messages / self.span_s if self.span_s > 0 else 0.0

    @property
    def nodes(self) -> list[str]:
        """Every node that sends or receives, sorted."""
        return sorted({n for edge in self.edges for n in edge})

    @property
    def unbalanced_pairs(self) -> dict[tuple[str, str], tuple[int, int]]:
        """RPC pairs whose calls and returns differ in number."""
        return {k: v for k, v in self.rpc_pairs.items() if v[0] != v[1]}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; edges and pairs as lists sorted by message count."""
        calls = self.op_counts.get("call", 0)
        returns = self.op_counts.get("return", 0)
        return {
            "messages": self.messages,
            "start": format_instant_ns(self.start_ns),
            "end": format_instant_ns(self.end_ns),
            "span_s": self.span_s,
            "rate_per_s": self.rate_per_s,
            "nodes": self.nodes,
            "edges": [
                {"sender": s, "receiver": r, "messages": n}
                for (s, r), n in sorted(self.edges.items(), key=lambda kv: (-kv[1], kv[0]))
            ],
            "ops": dict(self.op_counts),
            "balance": {
                "calls": calls,
                "returns": returns,
                "calls_minus_returns": calls - returns,
                "unbalanced_pairs": [
                    {"caller": c, "callee": e, "calls": a, "returns": b}
                    for (c, e), (a, b) in sorted(self.unbalanced_pairs.items())
                ],
            },
            "null_ids": self.null_ids,
            "columns": self.columns,
            "provenance": self.provenance,
        }

    def describe(self, *, max_edges: int = 20) -> str:
        """A short human summary, a few lines."""
        ops = ", ".join(f"{op} {self.op_counts.get(op, 0):,}" for op in OPS)
        lines = [
            f"messages   {self.messages:,} ({ops})",
            f"time       {format_instant_ns(self.start_ns)} .. {format_instant_ns(self.end_ns)} "
            f"({format_duration_ns(int(self.span_s * 1e9))}, {self.rate_per_s:,.1f} msg/s)",
            f"nodes      {len(self.nodes)}: {' '.join(printable(n) for n in self.nodes)}",
            f"edges      {len(self.edges)} directed",
        ]
        ranked = sorted(self.edges.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = [(f"{printable(s)} -> {printable(r)}", n) for (s, r), n in ranked[:max_edges]]
        width = max((len(edge) for edge, _ in shown), default=0)
        lines += [f"  {edge:<{width}}  {n:>10,}" for edge, n in shown]
        if len(ranked) > max_edges:
            lines.append(f"  ... {len(ranked) - max_edges} more")
        calls, returns = self.op_counts.get("call", 0), self.op_counts.get("return", 0)
        unbalanced = self.unbalanced_pairs
        lines.append(
            f"balance    calls - returns = {calls - returns:+,}; "
            f"{len(unbalanced)} of {len(self.rpc_pairs)} RPC pairs unbalanced"
        )
        lines.append(f"ids        {self.null_ids:,} messages without an id")
        lines.append(f"columns    {', '.join(self.columns) if self.columns else '(core only)'}")
        return "\n".join(lines)


def _edge_counts(table: pa.Table, counts: Counter[tuple[str, str, int]]) -> None:
    """Add (sender, receiver, op) message counts of a table, one bincount per chunk."""
    ops = op_codes(table).astype(np.int64)
    table = table.unify_dictionaries()
    sender = table["sender"].combine_chunks()
    receiver = table["receiver"].combine_chunks()
    s_idx = sender.indices.to_numpy().astype(np.int64)
    r_idx = receiver.indices.to_numpy().astype(np.int64)
    n_r = len(receiver.dictionary)
    key = (s_idx * n_r + r_idx) * len(OPS) + ops
    found = np.bincount(key)
    s_names, r_names = sender.dictionary.to_pylist(), receiver.dictionary.to_pylist()
    for k in np.flatnonzero(found):
        sr, op = divmod(int(k), len(OPS))
        s, r = divmod(sr, n_r)
        counts[(s_names[s], r_names[r], op)] += int(found[k])


def summarize_trace(source: PathLike | pa.Table) -> TraceSummary:
    """Summarize a trace file of either form (streamed, bounded memory) or a table.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([0, 2_000_000_000], pa.timestamp("ns")),
    ...     "sender": ["client", "web"], "receiver": ["web", "client"],
    ...     "op": ["call", "return"], "id": pa.array([1, 1], pa.uint64())})
    >>> s = summarize_trace(t)
    >>> s.messages, s.span_s, s.nodes, s.unbalanced_pairs
    (2, 2.0, ['client', 'web'], {})
    """
    provenance: dict[str, Any] = {}
    if isinstance(source, pa.Table):
        batches: Iterable[pa.Table] = [validate_trace(source)]
        names = source.column_names
    elif trace_format(source) == "text":
        batches = iter_any_trace(source)
        names = list(CORE_COLUMNS)
    else:
        meta = read_trace_metadata(source)
        provenance = meta.provenance
        names = meta.schema.names if meta.schema is not None else []
        batches = iter_trace(source, columns=list(CORE_COLUMNS))
    counts: Counter[tuple[str, str, int]] = Counter()
    messages = null_ids = 0
    start = end = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        messages += batch.num_rows
        null_ids += batch["id"].null_count
        ts = batch["timestamp"].cast(pa.int64()).to_numpy()
        lo, hi = int(ts.min()), int(ts.max())
        start = lo if start is None else min(start, lo)
        end = hi if end is None else max(end, hi)
        _edge_counts(batch, counts)
    edges: Counter[tuple[str, str]] = Counter()
    op_counts = dict.fromkeys(OPS, 0)
    for (s, r, op), n in counts.items():
        edges[(s, r)] += n
        op_counts[OPS[op]] += n
    pairs: dict[tuple[str, str], tuple[int, int]] = {}
    for (s, r, op), _ in counts.items():
        if op in (OP_CALL, OP_RETURN):
            caller, callee = (s, r) if op == OP_CALL else (r, s)
            pairs[(caller, callee)] = (counts[(caller, callee, OP_CALL)], counts[(callee, caller, OP_RETURN)])
    return TraceSummary(
        messages=messages,
        start_ns=start,
        end_ns=end,
        op_counts=op_counts,
        edges=dict(edges),
        rpc_pairs=pairs,
        null_ids=null_ids,
        columns=[n for n in names if n not in CORE_COLUMNS],
        provenance=provenance,
    )
