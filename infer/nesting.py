"""The nesting algorithm (Aguilera et al., SOSP 2003) for RPC traces.

1. Call pairs: calls matched with returns (``infer.callpairs``).
2. Parent candidates: for a child call B->C, every call into B that started no later
   than the child's call and returned no earlier than the child's return, each within
   ``tolerance_s`` (clock skew) (``infer.candidates``).
3. Scoreboard: per (A, B, C), how often each parent-call-to-child-call delay occurs,
   each candidate counting 1/N; delays binned exponentially (``bin_base``, from
   ``bin_min_s``), optionally smoothed with a Gaussian of ``smooth_bins``.
4. Unique parent, in stages, each a complete parent assignment (``nesting_stages``):
   the *first pass* scores every candidate by scoreboard x penalties ``(1+overlap)^-x
   (1+samedest)^-y (1+children)^-z`` over the parent's candidate children, the
   earliest parent winning ties; *penalty rounds* count the penalties over the children
   each parent was given (``rounds``); *sibling rounds* score the gaps to the siblings
   a child would have (``siblings``); *chain rounds* move children to where their
   node's chains of events are most likely (``chains``, ``infer.chains``). Loops of
   parent links are cut at their earliest call.
5. Paths: unparented calls are roots; instances are their trees; instances of one
   shape form a pattern (``infer.patterns``).

Every setting lives in ``NestingParams`` (``infer.params``), whose defaults are the
most accurate setting measured; ``NestingParams.paper()`` is the paper's.

Every phase is vectorized: sorting, searchsorted, bincount. Candidates are enumerated
in chunks of parents, once when all of them fit a memory budget (O(m p)), else once per
pass, so memory stays bounded on traces of any size.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from infer.calibration import OPTIMISM, Calibration, sigmoid, twin_calibration
from infer.callers import attribute_callers
from infer.callpairs import CallPairs, NodeCodes, match_calls, node_codes
from infer.candidates import (
    NODE_BITS,
    BestSoFar,
    CandidateChunks,
    Chunk,
    Offer,
    Scoreboard,
    bin_widths,
    cell_sums,
    delay_bins,
    skew_tolerance,
)
from infer.chains import ChainModel, answer_log_odds, chain_log_likelihood, chain_stages
from infer.keys import KeyEvidence, agree_keys, call_keys, close_keys, held_out_check, with_keys
from infer.operations import operation_codes, value_codes
from infer.params import BOARDS, PRESETS, NestingParams
from infer.patterns import log_confidence_by
from infer.windows import Homes, Window, Windows
from tracefmt import (
    ParameterError,
    SchemaError,
    TraceFileError,
    atomic_output,
    check_sort,
    existing_file,
    sort_trace,
    validate_trace,
)
from tracefmt.cluster import Runner
from tracefmt.units import format_instant_ns

__all__ = ["BOARDS", "PRESETS", "NestingParams", "NestingResult", "Stage", "infer_nesting", "nesting_stages"]


@dataclass(frozen=True)
class NestingResult:
    """Call pairs with their inferred parents, instances and patterns.

    Attributes
    ----------
    nodes : list of str
        Node names; the arrays hold codes into this list.
    pairs : CallPairs
        Matched calls, sorted by call time.
    parent : ndarray of int64
        Index of each pair's parent pair, -1 for roots.
    confidence : ndarray of float64
        The probability that each pair's parent is right (1 for roots): calibrated on a
        synthetic twin of the trace (``infer.calibration``) unless ``params.calibrate``
        is off.
    candidates : ndarray of int64
        Number of candidate parents per pair.
    patterns : list
        ``infer.patterns.Pattern`` objects, sorted as asked.
    instance, pattern_index : ndarray of int64
        Per pair: its instance (the root pair's index) and its pattern (index into
        ``patterns``).
    params : NestingParams
    trace_info : dict
        Messages and time span of the input.
    calibration : Calibration
        The map from the last stage's odds to ``confidence``.
    """

    nodes: list[str]
    pairs: CallPairs
    parent: np.ndarray
    confidence: np.ndarray
    candidates: np.ndarray
    patterns: list[Any]
    instance: np.ndarray
    pattern_index: np.ndarray
    params: NestingParams
    trace_info: dict[str, Any] = field(default_factory=dict)
    sort: str = "total"
    calibration: Calibration = field(default_factory=Calibration.identity)
    #: Per pair, its call's operation code, and the operations (None: no labels).
    operations: tuple[np.ndarray, list[str]] | None = None
    #: Per pair, its return's status code, and the statuses (None: none in the trace).
    statuses: tuple[np.ndarray, list[str]] | None = None
    #: Patterns told apart by operation too (``infer_nesting(by_label=True)``).
    by_label: bool = False
    #: Per pair, what finds its two messages in the trace without row positions
    #: (:func:`message_keys`): ``call_id``, ``return_id`` and, where the trace has them,
    #: ``flow`` and ``stream``. None for a result built without them.
    message_keys: pa.Table | None = None

    @property
    def mean_parallelism(self) -> float:
        """Mean number of candidate parents per child call."""
        kids = self.candidates[self.candidates > 0]
        return float(kids.mean()) if kids.size else 0.0

    def windows(self, window_s: float) -> list[tuple[int, int, list[Any]]]:
        """Patterns per time window: ``(start_ns, end_ns, patterns)`` for each window.

        An instance belongs to the window its root call falls in, so a pattern frequent
        only for a while is not buried under the whole trace's counts.
        """
        if not window_s > 0 or not np.isfinite(window_s):
            raise ParameterError(f"window must be a positive duration, not {window_s} s")
        width = round(window_s * 1e9)
        t0 = int(self.trace_info.get("start_ns", 0))
        slot = (self.pairs.t_call[self.instance] - t0) // width
        return [
            (t0 + int(k) * width, t0 + (int(k) + 1) * width, self._subset(np.flatnonzero(slot == k)).patterns)
            for k in np.unique(slot)
        ]

    def instance_confidence(self) -> np.ndarray:
        """Per pair, the probability that its instance is exactly right (the same for
        every pair of an instance; ``calibration.apply_instances``)."""
        log_product = log_confidence_by(self.instance, self.confidence, self.parent.size)
        return self.calibration.apply_instances(log_product)[self.instance]

    def confident(self, min_confidence: float) -> tuple[NestingResult, int, int]:
        """The result without the instances holding a link (a call given a parent) whose
        confidence is below ``min_confidence``; also returns the instances and the links
        left out.

        Examples
        --------
        >>> import pyarrow as pa
        >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
        ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
        ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
        >>> kept, instances, links = infer_nesting(t).confident(0.5)
        >>> len(kept.patterns), instances, links
        (1, 0, 0)
        """
        keep, instances, links = _confident(self.parent >= 0, self.confidence, self.instance, min_confidence)
        keep = np.flatnonzero(keep)
        kept = self._subset(keep)
        left_out = {
            "min": min_confidence,
            "instances_left_out": instances,
            "call_pairs_left_out": int(self.parent.size - keep.size),
            "links_below": links,
        }
        kept = replace(kept, trace_info={**self.trace_info, "min_confidence": left_out})
        return kept, left_out["instances_left_out"], left_out["links_below"]

    def _subset(self, keep: np.ndarray) -> NestingResult:
        """The result for the pairs ``keep`` (whole instances), patterns rebuilt."""
        from infer.patterns import build_patterns

        new_index = np.full(self.parent.size, -1, np.int64)
        new_index[keep] = np.arange(keep.size)
        parent = np.where(self.parent[keep] >= 0, new_index[np.maximum(self.parent[keep], 0)], -1)
        pairs, confidence = self.pairs.take(keep), self.confidence[keep]
        operations = None if self.operations is None else (self.operations[0][keep], self.operations[1])
        statuses = None if self.statuses is None else (self.statuses[0][keep], self.statuses[1])
        keys = None if self.message_keys is None else self.message_keys.take(pa.array(keep))
        patterns, instance, pattern_index = build_patterns(
            pairs,
            parent,
            self.nodes,
            sort=self.sort,
            confidence=confidence,
            instance_map=self.calibration.apply_instances,
            operations=operations,
            statuses=statuses,
            by_operation=self.by_label,
        )
        return replace(
            self,
            pairs=pairs,
            parent=parent,
            confidence=confidence,
            candidates=self.candidates[keep],
            patterns=patterns,
            instance=instance,
            pattern_index=pattern_index,
            operations=operations,
            statuses=statuses,
            message_keys=keys,
        )

    def to_json(
        self, *, top: int | None = None, min_count: int = 1, window_s: float | None = None
    ) -> dict[str, Any]:
        """The paths file (``docs/files.md``) (patterns in the order they were sorted).

        With ``window_s``, a ``windows`` list adds each window's patterns.
        """
        chosen = [p for p in self.patterns if p.count >= min_count][:top]
        doc = self._document(chosen, top, min_count)
        if window_s is not None:
            doc["params"]["window_s"] = window_s
            doc["windows"] = [
                {
                    "start": format_instant_ns(lo),
                    "end": format_instant_ns(hi),
                    "instances": sum(p.count for p in pats),
                    "patterns": [p.to_json() for p in pats if p.count >= min_count][:top],
                }
                for lo, hi, pats in self.windows(window_s)
            ]
        return doc

    def _document(self, chosen: list[Any], top: int | None, min_count: int) -> dict[str, Any]:
        return {
            "format": "wirepath.paths/1",
            "algorithm": "nesting",
            "params": {**self.params.to_json(), "top": top, "min_count": min_count, "sort": self.sort},
            "trace": {
                "messages": self.trace_info.get("messages", 0),
                "start": format_instant_ns(self.trace_info.get("start_ns")),
                "end": format_instant_ns(self.trace_info.get("end_ns")),
            },
            "stats": {
                "call_pairs": len(self.pairs),
                "unmatched_calls": self.pairs.unmatched_calls,
                "unmatched_returns": self.pairs.unmatched_returns,
                "sends_ignored": self.pairs.sends,
                "mean_parallelism": self.mean_parallelism,
                "instances": int((self.parent < 0).sum()),
                "patterns": len(self.patterns),
                **{
                    k: self.trace_info[k]
                    for k in (
                        "tolerance_s",
                        "chain_rounds_run",
                        "request_rounds_run",
                        "stages",
                        "min_confidence",
                        "callers",
                        "keys",
                    )
                    if k in self.trace_info
                },
                "confidence": self.calibration.to_json(),
            },
            "patterns": [p.to_json() for p in chosen],
        }

    def write_instances(self, path: str | os.PathLike[str]) -> None:
        """Write ``instances_table()`` as Parquet (zstd), atomically."""
        table = self.instances_table()
        with atomic_output(path) as tmp:
            pq.write_table(table, tmp, compression="zstd")

    def instances_table(self) -> pa.Table:
        """Every call pair with its inferred parent, instance, pattern and confidence, and,
        where the trace has them, its call's operation (``op``) and its return's status."""
        p = self.pairs
        names = pa.array(self.nodes, pa.string())
        ids = pa.array([pat.id for pat in self.patterns], pa.string())
        return pa.table(
            {
                "pair": pa.array(np.arange(len(p)), pa.int64()),
                "caller": pa.DictionaryArray.from_arrays(pa.array(p.caller.astype(np.int32)), names),
                "callee": pa.DictionaryArray.from_arrays(pa.array(p.callee.astype(np.int32)), names),
                "t_call": pa.array(p.t_call, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "t_return": pa.array(p.t_return, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "call_row": pa.array(p.call_row, pa.int64()),
                "return_row": pa.array(p.return_row, pa.int64()),
                "parent": pa.array(self.parent, pa.int64(), mask=self.parent < 0),
                "instance": pa.array(self.instance, pa.int64()),
                "pattern": pa.DictionaryArray.from_arrays(pa.array(self.pattern_index.astype(np.int32)), ids),
                "candidates": pa.array(self.candidates, pa.int64()),
                "confidence": pa.array(self.confidence, pa.float64()),
                "instance_confidence": pa.array(self.instance_confidence(), pa.float64()),
                "pattern_confidence": pa.array(
                    np.array([np.nan if pat.confidence is None else pat.confidence for pat in self.patterns])[
                        self.pattern_index
                    ]
                    if self.patterns
                    else np.zeros(0),
                    pa.float64(),
                ),
                **{
                    column: _coded(*values)
                    for column, values in (("op", self.operations), ("status", self.statuses))
                    if values is not None
                },
                **({} if self.message_keys is None else dict(zip(
                    self.message_keys.column_names, self.message_keys.columns, strict=True
                ))),
            }
        )  # fmt: skip


def _coded(codes: np.ndarray, names: list[str]) -> pa.DictionaryArray:
    """Codes into ``names`` (-1: none) as a dictionary column."""
    return pa.DictionaryArray.from_arrays(
        pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(names, pa.string())
    )


def read_instances(path: str | os.PathLike[str]) -> pa.Table:
    """Read an instances table written by ``NestingResult.write_instances``."""
    p = existing_file(path, "an instances table (Parquet)")
    try:
        table = pq.read_table(p)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(f"{p}: not a readable Parquet file ({exc})") from None
    need = {"call_row", "return_row", "parent", "instance"}
    if not need <= set(table.column_names):
        raise SchemaError(f"{p}: not an instances table (needs columns {', '.join(sorted(need))})")
    return table


def confident_instances(table: pa.Table, min_confidence: float) -> tuple[pa.Table, int, int]:
    """An instances table (``NestingResult.instances_table``) without the instances
    holding a link whose confidence is below ``min_confidence``; also returns the
    instances and the links left out.

    Examples
    --------
    >>> t = pa.table({"parent": pa.array([None, 0, None, 2], pa.int64()), "instance": [0, 0, 2, 2],
    ...     "confidence": [1.0, 0.95, 1.0, 0.6]})
    >>> kept, instances, links = confident_instances(t, 0.9)
    >>> kept["instance"].to_pylist(), instances, links
    ([0, 0], 1, 1)
    """
    if "confidence" not in table.column_names:
        raise SchemaError("this instances table has no confidence column (written by an older wirepath)")
    linked = table["parent"].is_valid().to_numpy(zero_copy_only=False)
    instance = table["instance"].to_numpy()
    keep, instances, links = _confident(linked, table["confidence"].to_numpy(), instance, min_confidence)
    return table.filter(pa.array(keep)), instances, links


def _confident(
    linked: np.ndarray, confidence: np.ndarray, instance: np.ndarray, min_confidence: float
) -> tuple[np.ndarray, int, int]:
    """Which calls belong to instances whose every link (a call given a parent) is at
    least ``min_confidence``; the instances and links below it."""
    if not 0.0 <= min_confidence <= 1.0:
        raise ParameterError(f"min_confidence must be between 0 and 1, not {min_confidence}")
    low = linked & (confidence < min_confidence)
    doubtful = np.unique(instance[low])
    return ~np.isin(instance, doubtful), int(doubtful.size), int(low.sum())


def _penalty(count: np.ndarray, weight: float) -> np.ndarray:
    """``(1 + count) ** -weight`` through a table: counts are small integers, and a
    gather costs a fraction of a power per candidate."""
    if count.size == 0:
        return np.ones(0)
    return ((1.0 + np.arange(int(count.max()) + 1)) ** -weight)[count]


class _Chosen:
    """The children each parent got in the previous round, for the same-destination and
    children penalties counted over chosen rather than candidate children (refinement
    rounds; the overlap penalty is counted by ``Siblings``).
    """

    def __init__(self, pairs: CallPairs, parent: np.ndarray) -> None:
        self.parent = parent
        self.n_nodes = np.int64(int(max(pairs.caller.max(), pairs.callee.max())) + 1)
        kid = np.flatnonzero(parent >= 0)
        self.by_dest = np.sort(parent[kid].astype(np.int64) * self.n_nodes + pairs.callee[kid])
        self.n_kids = np.bincount(parent[kid], minlength=len(pairs))

    def penalty(self, pairs: CallPairs, c: np.ndarray, par: np.ndarray, params: NestingParams) -> np.ndarray:
        """``(1+samedest)^-y (1+children)^-z`` over the other chosen children."""
        mine = self.parent[c] == par
        out = np.ones(c.size)
        if params.same_node_penalty:
            key = par.astype(np.int64) * self.n_nodes + pairs.callee[c]
            same = np.searchsorted(self.by_dest, key, side="right") - np.searchsorted(self.by_dest, key)
            out *= (1.0 + same - mine) ** -params.same_node_penalty
        if params.children_penalty:
            out *= (1.0 + self.n_kids[par] - mine) ** -params.children_penalty
        return out


class _GapBoard:
    """The siblings scoreboard: per (A, B, C), how often each pair of gaps around a child
    occurs among the children its parent was given (see ``infer_nesting``'s siblings).

    A gap is "after the previous sibling's return" or "after the parent's call" (and
    "before the next sibling's call" or "before the parent's return"); which one is
    part of the cell, with the gap's exponential bin.
    """

    def __init__(self, params: NestingParams, n_nodes: int) -> None:
        self.params, self.n_nodes = params, n_nodes
        self.half = 2 * params.n_bins  # bins of one gap kind, positive and negative
        self.width = bin_widths(params)
        if n_nodes**3 * (2 * self.half) ** 2 >= 1 << 62:
            raise ParameterError(f"{n_nodes} nodes are too many for siblings scoring")
        self.keys = np.zeros(0, np.int64)
        self.values = np.zeros(0)

    def cells(self, pairs: CallPairs, ch: Chunk, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cell keys of a chunk's candidates given each parent's members, and the cells'
        areas (products of the two bins' widths)."""
        c, par = ch.c.astype(np.int64), ch.par.astype(np.int64)
        m = c.size
        sib = ch.siblings
        lo, hi = sib.run[sib.group], sib.run_end[sib.group]
        pos = np.arange(m)
        # The nearest members before and after each candidate in its parent's group
        # (candidates are in call order within the group), itself excluded.
        last = np.maximum.accumulate(np.where(member, pos, -1))
        prev = np.concatenate([[-1], last[:-1]]) if m else last
        has_prev = prev >= lo
        first = np.minimum.accumulate(np.where(member, pos, m)[::-1])[::-1]
        nxt = np.concatenate([first[1:], [m]]) if m else first
        has_next = nxt < hi
        tc, tr = pairs.t_call, pairs.t_return
        before = np.where(has_prev, tc[c] - tr[c[np.where(has_prev, prev, 0)]], tc[c] - tc[par])
        after = np.where(has_next, tc[c[np.where(has_next, nxt, 0)]] - tr[c], tr[par] - tr[c])
        b1, b2 = delay_bins(before, self.params), delay_bins(after, self.params)
        n = np.int64(self.n_nodes)  # keys in 64 bits whatever the codes' type
        triple = (pairs.caller[par].astype(np.int64) * n + pairs.callee[par]) * n + pairs.callee[c]
        k = 2 * self.half
        key = (triple * k + b1 + has_prev * self.half) * k + b2 + has_next * self.half
        return key, self.width[b1] * self.width[b2]

    @classmethod
    def learn(
        cls,
        pairs: CallPairs,
        chunks: CandidateChunks,
        parent: np.ndarray,
        params: NestingParams,
        n_nodes: int,
    ) -> tuple[_GapBoard, list[np.ndarray] | None]:
        """The board of the gaps around every child at the parent it was given, and every
        chunk's cells for scoring them (None when the chunks are not kept in memory)."""
        empty = cls(params, n_nodes)
        parts = []
        chunk_keys: list[np.ndarray] | None = [] if chunks.kept is not None else None
        for ch in chunks:
            key, part = empty.counted(pairs, ch, parent[ch.c] == ch.par)
            if chunk_keys is not None:
                chunk_keys.append(key)
            parts.append(part)
        return cls.of_counts(params, n_nodes, parts), chunk_keys

    def counted(
        self, pairs: CallPairs, ch: Chunk, member: np.ndarray
    ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """A chunk's cell keys (``cells``), and its part of the board: the distinct
        cells of the children its parents were given (``member``), their counts and
        areas (``of_counts`` sums the parts)."""
        key, area = self.cells(pairs, ch, member)
        keys, first, count = np.unique(key[member], return_index=True, return_counts=True)
        return key, (keys, count, area[member][first])

    @classmethod
    def of_counts(
        cls, params: NestingParams, n_nodes: int, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    ) -> _GapBoard:
        """The board of the chunks' parts (``counted``: each chunk's distinct member
        cells, their counts and areas, made here or by a cluster's tasks): counts are
        integers, so the sum is exact in any order."""
        board = cls(params, n_nodes)
        keys, counts, areas = (np.concatenate(a) for a in zip(*parts, strict=True)) if parts else ((),) * 3
        board.keys, inv = np.unique(np.asarray(keys, np.int64), return_inverse=True)
        count = np.bincount(inv.ravel(), weights=np.asarray(counts, float), minlength=board.keys.size)
        area = np.ones(board.keys.size)
        if params.density and board.keys.size:
            area[inv.ravel()] = areas
        board.values = count / area
        return board

    def lookup(self, key: np.ndarray) -> np.ndarray:
        """Scores of cells (from ``cells``); 0 for a cell no chosen child fell in."""
        if self.keys.size == 0:
            return np.zeros(key.size)
        at = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where(self.keys[at] == key, self.values[at], 0.0)


def _break_cycles(parent: np.ndarray) -> np.ndarray:
    """``parent`` with every loop of parent links cut at its earliest (lowest) pair.

    Examples
    --------
    >>> _break_cycles(np.array([1, 0, 1, -1, 3])).tolist()
    [-1, 0, 1, -1, 3]
    """
    out = parent.copy()
    out[_loop_lows(parent, np.arange(parent.size))] = -1
    return out


#: ``_without_loops`` follows the back links alone while they are at most 1 in this many.
_FEW_BACK_LINKS = 8


def _loop_lows(up: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The lowest ``low`` of each loop of the links ``up`` (-1: none), one per loop.

    Pointer doubling, no loop per element: after k steps each element knows its 2^k-th
    successor and the lowest ``low`` on the way; one still not at the end after more
    steps than there are elements leads into a loop, whose lowest is found from the
    loop itself.

    >>> _loop_lows(np.array([1, 2, 0, -1]), np.array([7, 3, 5, 0])).tolist()
    [3]
    """
    n = up.size
    if n == 0:
        return np.zeros(0, low.dtype)
    sentinel = n  # the end of a path, pointing to itself
    nxt = np.append(np.where(up >= 0, up, sentinel), sentinel)
    least = np.append(low, np.iinfo(np.int64).max)
    for _ in range(max(n.bit_length(), 1) + 1):
        least = np.minimum(least, least[nxt])
        nxt = nxt[nxt]
    stuck = np.flatnonzero(nxt[:n] != sentinel)
    # nxt[v] is on v's loop, and least there is the loop's lowest (the path walked from
    # it is longer than the loop).
    return np.unique(least[nxt[stuck]])


def _without_loops(pairs: CallPairs, parent: np.ndarray) -> np.ndarray:
    """``parent`` with every loop cut at its lowest pair, as ``_break_cycles`` cuts them.

    Calls that hold each other (equal times, or overlapping within the tolerance) can
    choose each other: a loop has no root. Going up a loop the call times cannot fall
    at every step, so every loop holds a *back* link, from a call to a parent called no
    earlier; there are usually few (calls that stray within the tolerance). Only they
    are followed: from each, up the ordinary links (to a parent called earlier) to the
    next back link (or a root), noting the lowest pair passed; the loops of those few
    steps are the loops of the whole, with the same lowest pairs (0.1 s a stage of 2.5 M
    call pairs searched as a whole, a few ms this way). Where back links are many (a
    coarse clock stamps calls and their children alike) the whole is searched: 60% of
    2 M took 0.72 s this way against 0.26 s.
    """
    n = parent.size
    kid = np.flatnonzero(parent >= 0)
    back = kid[pairs.t_call[parent[kid]] >= pairs.t_call[kid]]
    if back.size == 0:
        return parent
    if back.size > n // _FEW_BACK_LINKS:
        return _break_cycles(parent)
    slot = np.full(n, -1, np.int64)  # each back link's place among them
    slot[back] = np.arange(back.size)
    # Up from each back link's parent over ordinary links (to a parent called earlier,
    # which make no loop): at most the tree's depth of steps.
    at, low = parent[back].copy(), back.copy()
    going = np.flatnonzero((at >= 0) & (slot[np.maximum(at, 0)] < 0))
    while going.size:
        low[going] = np.minimum(low[going], at[going])
        at[going] = parent[at[going]]
        going = going[(at[going] >= 0) & (slot[np.maximum(at[going], 0)] < 0)]
    up = np.where(at >= 0, slot[np.maximum(at, 0)], -1)
    out = parent.copy()
    out[_loop_lows(up, low)] = -1
    return out


@dataclass(frozen=True)
class Stage:
    """One stage of the nesting algorithm and the parent assignment it ends with.

    Attributes
    ----------
    name : {"first pass", "penalty round", "sibling round", "chain round", "request round", "given"}
    round : int
        The round's number among the rounds of its name, from 1.
    parent : ndarray of int64
        Each call pair's parent pair, -1 for roots (loops already cut).
    confidence : ndarray of float64
        Per pair, the stage's own probability that its parent is right, from
        ``log_odds`` (1 for roots); uncalibrated (``infer_nesting`` calibrates the
        last stage's, ``infer.calibration``).
    moved : int
        Calls whose parent differs from the stage before.
    log_likelihood : float
        Mean log-likelihood per call pair of the assignment's chains of events
        (``infer.chains``): for the stages before chain rounds, under the model learnt
        from the assignment itself; for a chain round, the stage before's plus the
        round's gain, which is exact under the model learnt from the stage before (the
        model the round judged by). It rises as the stages converge.
    tolerance_s : float
        The clock-skew tolerance the candidates were found with (``tolerance_s``, or the
        estimate of ``auto_tolerance`` when larger).
    """

    name: str
    round: int
    parent: np.ndarray
    confidence: np.ndarray
    moved: int
    log_likelihood: float
    tolerance_s: float = 0.0
    #: Per pair, the stage's own log-odds that its parent is right (inf for roots): for
    #: the scoreboard stages the winner's share of the scores against the rest, for a
    #: chain round the chain model's odds against the neighbourhood of alternatives
    #: (``infer.chains.neighbourhood_log_odds``). Uncalibrated.
    log_odds: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        """The stage as the paths file's ``stats.stages`` lists it."""
        return {
            "stage": self.name,
            "round": self.round,
            "moved": self.moved,
            "log_likelihood": round(self.log_likelihood, 6),
        }


#: Call pairs from which a cluster runs the scoreboard stages too, not the chain rounds
#: alone: below, sending the windows for 14 more maps costs more than the stages take
#: (the 400,000-message fan-out trace, 200,000 pairs: 2 workers 21.1 and 24.5 s with
#: them, 19.8 and 19.9 s without, one process 18.4-21.6 s); at 2.5 M pairs they took
#: the cluster from 1.13x to 1.27x of one process.
_MAPPED_BOARD_PAIRS = 1_000_000


@dataclass(frozen=True)
class _Scoring:
    """What every stage scores with: the call pairs, their candidates in chunks, the
    scoreboard of the first pass, each pair's number of candidates (``counts``) and the
    clock-skew tolerance the candidates were found with; on a cluster (``runner`` of
    more than one worker) the windows of the pairs its tasks score (``infer.windows``)
    and the scoreboard as the workers have it."""

    pairs: CallPairs
    n_nodes: int
    params: NestingParams
    chunks: CandidateChunks
    board: Scoreboard
    counts: np.ndarray
    tolerance_s: float
    runner: Runner | None = None
    windows: Windows | None = None
    shared_board: Any = None

    @classmethod
    def learn(
        cls,
        pairs: CallPairs,
        n_nodes: int,
        params: NestingParams,
        counts: np.ndarray | None,
        runner: Runner | None = None,
    ) -> _Scoring:
        """The candidates and the scoreboard of pass 1, where each child's candidates
        share one unit of weight (``counts`` filled in place when given)."""
        n = len(pairs)
        tolerance_s = candidate_tolerance_s(pairs, params)
        tol_ns = round(tolerance_s * 1e9)
        board = Scoreboard(params, n_nodes)
        chunks = CandidateChunks(
            pairs,
            tol_ns,
            board,
            siblings=params.overlap_penalty > 0 or params.siblings > 0 or params.chains > 0,
        )
        if counts is None:
            counts = np.zeros(n, np.int64)
        counts[:] = 0
        if runner is None or runner.width <= 1 or n < _MAPPED_BOARD_PAIRS:
            for ch in chunks:
                counts += np.bincount(ch.c, minlength=n)
            for ch in chunks:
                board.add(ch.cells, 1.0 / counts[ch.c])
            board.finish()
            return cls(pairs, n_nodes, params, chunks, board, counts, tolerance_s)
        # The tasks count their chunks' candidates, then sum each chunk's weights per
        # cell; the sums are added here in chunk order, as ``add`` adds them above.
        windows = Windows(pairs, chunks.spans(), tol_ns, runner.width)
        items = windows.items()
        for w, part in zip(items, runner.map(_window_counts, items, tol_ns=tol_ns), strict=True):
            counts[w.lo : w.hi] += part
        items = windows.items(data=(counts.astype(np.int32) if n < 1 << 31 else counts,))
        for sums in runner.map(_window_cell_sums, items, board=board, tol_ns=tol_ns):
            for keys, weight in sums:
                board.add_sums(keys, weight)
        board.finish()
        shared = runner.share(board)
        return cls(pairs, n_nodes, params, chunks, board, counts, tolerance_s, runner, windows, shared)

    def first_pass(self) -> BestSoFar:
        """Pass 1: every child's best parent by the scoreboard and the penalties over
        all candidates."""
        if self.windows is None:
            return _first_pass(self.pairs, self.chunks, self.board, self.params, self.n_nodes)
        return self._folded(self.windows.items(), board=self.shared_board, gaps=None)

    def refine(self, previous: np.ndarray, sibling: bool) -> BestSoFar:
        """One penalty round, or with ``sibling`` one sibling round, from ``previous``."""
        if self.windows is None:
            return _refine(self.pairs, self.chunks, self.board, self.params, self.n_nodes, previous, sibling)
        assert self.runner is not None
        items = self.windows.items(Homes.of(self.pairs, previous))
        gaps = None
        if sibling:
            empty = _GapBoard(self.params, self.n_nodes)
            parts = self.runner.map(_window_gap_counts, items, gaps=empty, tol_ns=self.chunks.tol_ns)
            gaps = _GapBoard.of_counts(self.params, self.n_nodes, [p for ps in parts for p in ps])
        return self._folded(items, board=None if sibling else self.shared_board, gaps=gaps)

    def _folded(self, items: list[Window], **common: Any) -> BestSoFar:
        """The offers of every window's chunks (``_window_offers``) folded here in chunk
        order: what the one-process pass gives, to the last bit."""
        assert self.runner is not None
        best = BestSoFar(len(self.pairs))
        tol_ns = self.chunks.tol_ns
        scored = self.runner.map(
            _window_offers, items, params=self.params, n_nodes=self.n_nodes, tol_ns=tol_ns, **common
        )
        for w, offers in zip(items, scored, strict=True):
            for offer in offers:
                best.take(offer.moved(w.lo), self.pairs.t_call)
        return best

    def stage(
        self, name: str, k: int, best: BestSoFar, before: tuple[np.ndarray, ChainModel] | None
    ) -> tuple[Stage, ChainModel]:
        """The stage a scoreboard round ends with (loops cut), and the chain model learnt
        from its assignment (what the first chain round judges by); ``before``: the
        stage before's parents and model, which this one's is counted again from."""
        n = len(self.pairs)
        parent, share = best.result(self.counts)
        parent = _without_loops(self.pairs, parent)
        if before is None:
            moved = n
            model = ChainModel.learn(self.pairs, parent, self.params, self.n_nodes)
        else:
            moved = int(np.count_nonzero(parent != before[0]))
            model = before[1].relearn(self.pairs, before[0], parent)
        ll = model.own_log_likelihood / max(n, 1)
        with np.errstate(divide="ignore"):
            log_odds = np.where(parent >= 0, np.log(share) - np.log1p(-share), np.inf)
        return Stage(name, k, parent, sigmoid(log_odds), moved, ll, self.tolerance_s, log_odds), model


def candidate_tolerance_s(pairs: CallPairs, params: NestingParams) -> float:
    """The clock-skew tolerance candidates are found with: the params', or the trace's
    own estimate when ``auto_tolerance`` and it is larger (``skew_tolerance``)."""
    if params.auto_tolerance:
        return max(params.tolerance_s, skew_tolerance(pairs)[0])
    return params.tolerance_s


def nesting_stages(
    pairs: CallPairs,
    n_nodes: int,
    params: NestingParams | None = None,
    *,
    counts: np.ndarray | None = None,
    runner: Runner | None = None,
    labels: np.ndarray | None = None,
    start: np.ndarray | None = None,
) -> Iterator[Stage]:
    """The stages of the nesting algorithm on matched call pairs, one ``Stage`` each.

    Like the levels of a Louvain clustering, each stage is a complete answer and the
    next refines it; stop iterating whenever the answer is good enough. The stages run
    are those ``params`` asks for: the first pass, then ``rounds`` penalty rounds (with
    a penalty), ``siblings`` sibling rounds, up to ``chains`` chain rounds (which
    stop when nothing moves or the gain falls below ``chain_min_gain``) and up to
    ``request_rounds`` request rounds (``infer.request_model``; they stop when nothing
    moves).

    Parameters
    ----------
    pairs : CallPairs
        Matched calls (``infer.callpairs.match_calls``).
    n_nodes : int
        Number of node codes the pairs use.
    params : NestingParams, optional
        Default ``NestingParams()``.
    counts : ndarray of int64, optional
        Filled in place with each pair's number of candidate parents.
    runner : Runner, optional
        Where the scoring of the candidates runs (``tracefmt.cluster``: a Dask
        cluster's workers, windows of chunks of parents as tasks, ``infer.windows``):
        the chain rounds', and from a million call pairs every stage's; the answer is
        the same.
    labels : ndarray of int64, optional
        Per pair, a code of its call's label (URL, gRPC method; -1 for none): request
        rounds tell visits and calls of different labels apart.
    start : ndarray of int64, optional
        Parents to start the chain and request rounds from instead of the scoreboard
        stages' answer (a diagnosis: the truth of a synthetic trace, to see whether the
        search keeps it); the first stage yielded is then this assignment, named
        ``"given"``.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from infer.callpairs import match_calls, node_codes
    >>> from tracefmt import validate_trace
    >>> t = validate_trace(pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())}))
    >>> nodes = node_codes(t)
    >>> [(s.name, s.parent.tolist()) for s in nesting_stages(match_calls(t, nodes), len(nodes.names),
    ...     NestingParams.paper())]
    [('first pass', [-1, 0])]
    """
    params = params or NestingParams()
    params.check()
    scoring = _Scoring.learn(pairs, n_nodes, params, counts, runner)
    if start is not None:
        model = ChainModel.learn(pairs, start, params, n_nodes)
        ll = model.own_log_likelihood / max(len(pairs), 1)
        sure = np.full(start.size, np.inf)
        given = Stage("given", 1, start.copy(), np.ones(start.size), 0, ll, scoring.tolerance_s, sure)
        yield given
        yield from _later_rounds(scoring, given, model, runner, labels)
        return
    # No name holds the first pass's choices: they go once the stage is made.
    last, model = scoring.stage("first pass", 1, scoring.first_pass(), None)
    yield last
    # Refinement rounds: the penalties count the children each parent actually got in
    # the round before, not every child it could have had.
    plain = params.rounds if params.penalized else 0
    for k in range(plain + params.siblings):
        sibling = k >= plain
        best = scoring.refine(last.parent, sibling)
        name, number = ("sibling round", k - plain + 1) if sibling else ("penalty round", k + 1)
        last, model = scoring.stage(name, number, best, (last.parent, model))
        yield last
    rounds = _later_rounds(scoring, last, model, runner, labels)
    del last, model  # each stage holds arrays the size of the trace: only the newest is kept
    yield from rounds


def _later_rounds(
    scoring: _Scoring, last: Stage, model: ChainModel, runner: Runner | None, labels: np.ndarray | None
) -> Iterator[Stage]:
    """The chain rounds and then the request rounds the params ask for, after ``last``
    (whose chain model is ``model``)."""
    if scoring.params.chains:
        # Each stage holds arrays the size of the trace: only the newest is kept.
        for stage in _chain_rounds(scoring, last, model, runner):
            last = stage
            yield stage
    if scoring.params.request_rounds:
        yield from _request_rounds(scoring, last, labels)


def _request_rounds(scoring: _Scoring, last: Stage, labels: np.ndarray | None) -> Iterator[Stage]:
    """The request rounds after stage ``last`` (``infer.request_model``); each one's
    confidence is the chain model's odds of its answer against the neighbours a chain
    round weighs, under the model learnt from that answer."""
    pairs, params = scoring.pairs, scoring.params
    n = len(pairs)
    # Every candidate pair with its first-pass scoreboard score, which orders a visit's
    # candidates before whole tuples are scored.
    kept = [(ch.c, ch.par, scoring.board.lookup(ch.cells)) for ch in scoring.chunks]
    if not kept:  # no call has a candidate parent: nothing to choose
        return
    cand_c, cand_p, cand_s = (np.concatenate(part) for part in zip(*kept, strict=True))
    del kept
    before = last.parent
    from infer.request_model import request_rounds  # SciPy's solver only where asked for

    rounds = request_rounds(
        pairs,
        cand_c,
        cand_p,
        cand_s,
        before,
        params,
        scoring.n_nodes,
        labels,
        cut_loops=lambda parent: _without_loops(pairs, parent),
    )
    for k, (step, model) in enumerate(rounds, 1):
        parent = step.parent
        log_odds = answer_log_odds(pairs, scoring.chunks, parent, model, scoring.runner, scoring.windows)
        log_odds = np.where(parent >= 0, log_odds, np.inf)
        moved = int(np.count_nonzero(parent != before))
        before = parent
        yield Stage(
            "request round",
            k,
            parent,
            sigmoid(log_odds),
            moved,
            model.own_log_likelihood / max(n, 1),
            scoring.tolerance_s,
            log_odds,
        )


def _chain_rounds(
    scoring: _Scoring, last: Stage, model: ChainModel, runner: Runner | None
) -> Iterator[Stage]:
    """The chain rounds after the scoreboard stage ``last``, whose chain model is ``model``."""
    n = len(scoring.pairs)
    rounds = chain_stages(
        scoring.pairs,
        scoring.chunks,
        last.parent,
        scoring.params,
        scoring.n_nodes,
        first_model=model,
        runner=runner,
        windows=scoring.windows,
    )
    for k, (parent, log_odds, moved, gain) in enumerate(rounds, 1):
        # A round's moves raise the likelihood under the model learnt from the stage
        # before by exactly their gains (``infer.chains``).
        parent = _without_loops(scoring.pairs, parent)
        log_odds = np.where(parent >= 0, log_odds, np.inf)
        last = Stage(
            "chain round",
            k,
            parent,
            sigmoid(log_odds),
            moved,
            last.log_likelihood + gain / max(n, 1),
            scoring.tolerance_s,
            log_odds,
        )
        yield last


def _first_pass(
    pairs: CallPairs, chunks: CandidateChunks, board: Scoreboard, params: NestingParams, n_nodes: int
) -> BestSoFar:
    """By chunks of parents: every parent meets all its candidate children at once, so
    the penalties are exact; each child keeps its best parent so far."""
    best = BestSoFar(len(pairs))
    for ch in chunks:
        score = _first_scores(pairs, ch, board.lookup(ch.cells), params, n_nodes)
        best.offer(ch.c, ch.par, score, pairs.t_call)
    return best


def _first_scores(
    pairs: CallPairs, ch: Chunk, score: np.ndarray, params: NestingParams, n_nodes: int
) -> np.ndarray:
    """A chunk's scoreboard scores (``score``) with the first pass's penalties, counted
    over every candidate of each parent."""
    c, par = ch.c, ch.par
    if params.overlap_penalty:
        score = score * _penalty(ch.siblings.overlaps(None), params.overlap_penalty)
    if params.same_node_penalty:
        dest = par.astype(np.int64) * n_nodes + pairs.callee[c]
        _, inv, cnt = np.unique(dest, return_inverse=True, return_counts=True)
        # 1 + the other candidates to that destination
        score = score * cnt[inv.ravel()].astype(float) ** -params.same_node_penalty
    if params.children_penalty:
        _, inv, cnt = np.unique(par, return_inverse=True, return_counts=True)
        score = score * cnt[inv.ravel()].astype(float) ** -params.children_penalty
    return score


def _refine(
    pairs: CallPairs,
    chunks: CandidateChunks,
    board: Scoreboard,
    params: NestingParams,
    n_nodes: int,
    previous: np.ndarray,
    sibling: bool,
) -> BestSoFar:
    """One penalty round, or with ``sibling`` one sibling round, from ``previous``."""
    chosen = _Chosen(pairs, previous) if (params.same_node_penalty or params.children_penalty) else None
    gaps, gap_keys = _GapBoard.learn(pairs, chunks, previous, params, n_nodes) if sibling else (None, None)
    best = BestSoFar(len(pairs))
    for i, ch in enumerate(chunks):
        member = previous[ch.c] == ch.par
        if gaps is None:
            score = board.lookup(ch.cells)
        else:
            score = gaps.lookup(gap_keys[i] if gap_keys is not None else gaps.cells(pairs, ch, member)[0])
        best.offer(ch.c, ch.par, _refined_scores(pairs, ch, score, member, chosen, params), pairs.t_call)
    return best


def _refined_scores(
    pairs: CallPairs,
    ch: Chunk,
    score: np.ndarray,
    member: np.ndarray,
    chosen: _Chosen | None,
    params: NestingParams,
) -> np.ndarray:
    """A chunk's board scores (``score``) with a refinement round's penalties, counted
    over the children each parent was given (``member``, ``chosen``)."""
    if params.overlap_penalty:
        score = score * _penalty(ch.siblings.overlaps(member), params.overlap_penalty)
    if chosen is not None:
        score = score * chosen.penalty(pairs, ch.c, ch.par, params)
    return score


# The scoreboard stages' cluster tasks (``_Scoring``): each gets a window of the pairs
# (``infer.windows``) and answers per chunk, in window indices.


def _window_counts(w: Window, *, tol_ns: int) -> np.ndarray:
    """A task: each of the window's pairs' candidate parents among its chunks."""
    pairs = w.pairs()
    counts = np.zeros(len(pairs), np.int64)
    for ch in w.chunks(pairs, tol_ns):
        counts += np.bincount(ch.c, minlength=len(pairs))
    return counts


def _window_cell_sums(w: Window, *, board: Scoreboard, tol_ns: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A task: per chunk, its candidates' scoreboard cells and the sum per cell of one
    unit of weight shared among each child's candidates (``w.data``: the counts)."""
    pairs = w.pairs()
    head = board.heads(pairs)
    (counts,) = w.data
    chunks = w.chunks(pairs, tol_ns)
    return [cell_sums(board.cell_keys(pairs, ch.c, ch.par, head), 1.0 / counts[ch.c]) for ch in chunks]


def _window_gap_counts(
    w: Window, *, gaps: _GapBoard, tol_ns: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A task: per chunk, the distinct gap cells of the children each parent was given,
    their counts and areas (``_GapBoard.of_counts``)."""
    pairs = w.pairs()
    parent = w.parents()
    return [gaps.counted(pairs, ch, parent[ch.c] == ch.par)[1] for ch in w.chunks(pairs, tol_ns)]


def _window_offers(
    w: Window,
    *,
    board: Scoreboard | None,
    gaps: _GapBoard | None,
    params: NestingParams,
    n_nodes: int,
    tol_ns: int,
) -> list[Offer]:
    """A task: each chunk's offer (``Offer``) for the first pass (no ``w.parent``) or a
    refinement round from ``w.parent``, scored by ``board`` or the sibling round's
    ``gaps``."""
    pairs = w.pairs()
    head = board.heads(pairs) if board is not None else None
    previous = w.parents() if w.parent is not None else None
    chosen = None
    if previous is not None and (params.same_node_penalty or params.children_penalty):
        chosen = _Chosen(pairs, previous)
    out = []
    for ch in w.chunks(pairs, tol_ns):
        member = previous[ch.c] == ch.par if previous is not None else None
        if gaps is not None:
            assert member is not None
            score = gaps.lookup(gaps.cells(pairs, ch, member)[0])
        else:
            assert board is not None
            score = board.lookup(board.cell_keys(pairs, ch.c, ch.par, head))
        if member is None:
            score = _first_scores(pairs, ch, score, params, n_nodes)
        else:
            score = _refined_scores(pairs, ch, score, member, chosen, params)
        out.append(Offer.of(ch.c, ch.par, score, pairs.t_call))
    return out


def infer_nesting(
    trace: pa.Table,
    params: NestingParams | str | None = None,
    *,
    sort: str = "total",
    runner: Runner | None = None,
    on_stage: Callable[[str], None] | None = None,
    by_label: bool = False,
    **overrides: Any,
) -> NestingResult:
    """Infer causal path patterns of an RPC trace with the nesting algorithm.

    Parameters
    ----------
    trace : pyarrow.Table
        A message trace (``tracefmt``); sorted here if it is not.
    params : NestingParams or str, optional
        The settings, or a preset's name (``"accurate"``, the default; ``"fast"``;
        ``"paper"``, the 2003 scoreboard). ``NestingParams`` documents every field.
    sort : {"total", "count"}
        Pattern order: by total latency or by instance count.
    by_label : bool
        Tell patterns apart by their visits' operations too (``infer.operations``): each
        endpoint's requests get patterns of their own (the trace needs labels).
    runner : Runner, optional
        Run the costly part, every stage's scoring of the candidates (the chain rounds'
        alone below a million call pairs), as tasks of a Dask cluster
        (``tracefmt.cluster.open_runner``); the result is identical to the in-process one.
    on_stage : callable, optional
        Called with a few words each time a step of the work is done (the call pairs,
        each stage, each calibration twin, the patterns): for progress on long runs.
    **overrides
        Single fields of ``NestingParams`` replacing the preset's (``chains=0``, say).
        A setting that does nothing in the combination asked for is warned about
        (``UserWarning``).

    Returns
    -------
    NestingResult

    Raises
    ------
    SchemaError
        The trace has no RPC calls (use convolution for one-way messages).
    ParameterError
        An unknown preset or parameter, or a bad value.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> r = infer_nesting(t)
    >>> [(pat.count, pat.shape_text) for pat in r.patterns]
    [(1, 'c>w(w>d)')]
    >>> infer_nesting(t, "paper", overlap_penalty=1.0).params.overlap_penalty
    1.0
    """
    params = _resolved(params, overrides)
    for note in params.ineffective():
        warnings.warn(note, UserWarning, stacklevel=2)
    check_sort(sort)
    say = on_stage or (lambda _: None)
    trace = sort_trace(validate_trace(trace))
    # A service's calls leave from its bare address (an ephemeral port): given back to it.
    trace, callers = attribute_callers(trace)
    nodes, pairs, info = _call_pairs(trace, params)
    if callers.renamed or callers.kept:
        info["callers"] = callers.to_json()
    pairs, evidence = _keyed(trace, pairs, params, info)
    operations = call_operations(trace, pairs)
    statuses = return_statuses(trace, pairs)
    keys = message_keys(trace, pairs)
    labels = operations[0] if operations is not None and params.request_rounds else None
    say(f"{len(pairs):,} call pairs")
    # The trace is not needed past its call pairs: its columns are freed (when the caller
    # holds no reference) before the candidates take their memory.
    del trace
    counts = np.zeros(len(pairs), np.int64)
    final = _last_stage(pairs, len(nodes.names), params, counts, runner, info, say, labels)
    if pairs.key is not None:
        final = _agreeing(pairs, final, info)
    calibration = Calibration.identity()
    if params.calibrate:
        # Twins are inferred as the trace was, with the tolerance it was given.
        same = params.with_overrides(tolerance_s=final.tolerance_s, auto_tolerance=False)
        answer = _answer(len(nodes.names), same, runner)
        held = None
        if evidence is not None:
            # The trace's own keys, hidden a fold at a time: how right the run is where
            # the user's system says what is right.
            held = held_out_check(pairs, evidence, answer, round(final.tolerance_s * 1e9))
            info["keys"].update(held.to_json() if held is not None else {})
            say("calibration: keys held out")
        twins = iter(("calibration: the twin", "calibration: the twin's twin"))

        def answer_twin(twin: CallPairs) -> tuple[np.ndarray, np.ndarray, float]:
            if twin.key is not None:
                twin = with_keys(twin, close_keys(twin, twin.key, round(final.tolerance_s * 1e9)))
            got = answer(twin)
            say(next(twins, "calibration"))
            return got

        if held is not None and params.calibrate_from == "keys":
            calibration = held.calibration()
        else:
            calibration = twin_calibration(
                pairs,
                final.parent,
                answer_twin,
                log_likelihood=final.log_likelihood,
                optimism=OPTIMISM.get(params.preset_name or ""),
                likelihood_of=lambda p, parent: chain_log_likelihood(p, parent, same, len(nodes.names)),
                keys=None if evidence is None else evidence.given,
            )
    assert final.log_odds is not None
    confidence = np.where(final.parent >= 0, calibration.apply(final.log_odds), 1.0)
    if evidence is not None and evidence.known is not None:
        # A parent the keys decided is no estimate.
        confidence[(evidence.known >= 0) & (evidence.known == final.parent)] = 1.0
    result = _result(
        nodes.names,
        pairs,
        final.parent,
        confidence,
        counts,
        params,
        info,
        sort,
        calibration,
        operations,
        statuses,
        by_label=by_label,
    )
    result = replace(result, message_keys=keys)
    say(f"{len(result.patterns):,} patterns")
    return result


def _resolved(params: NestingParams | str | None, overrides: dict[str, Any]) -> NestingParams:
    """The settings ``infer_nesting`` is given (a preset's name, params or None, then
    single fields), checked."""
    if params is None or isinstance(params, str):
        params = NestingParams.preset(params or PRESETS[0], **overrides)
    elif isinstance(params, NestingParams):
        params = params.with_overrides(**overrides)
    else:
        raise ParameterError(f"params must be a NestingParams or a preset name, not {type(params).__name__}")
    params.check()
    return params


def _call_pairs(trace: pa.Table, params: NestingParams) -> tuple[NodeCodes, CallPairs, dict[str, Any]]:
    """The nodes of a sorted, valid trace, its call pairs, and its messages and time span."""
    nodes = node_codes(trace)
    if len(nodes.names) >= 1 << NODE_BITS:
        raise ParameterError(f"{len(nodes.names)} nodes: nesting handles up to {1 << NODE_BITS}")
    pairs = match_calls(trace, nodes, use_ids=params.use_ids)
    if len(pairs) == 0:
        raise SchemaError(
            "no RPC call/return pairs in this trace (nesting needs call and return messages; "
            "for one-way messages use: wirepath infer convolution)"
        )
    ts = trace["timestamp"].cast(pa.int64())
    return nodes, pairs, {"messages": trace.num_rows, "start_ns": ts[0].as_py(), "end_ns": ts[-1].as_py()}


def _keyed(
    trace: pa.Table, pairs: CallPairs, params: NestingParams, info: dict[str, Any]
) -> tuple[CallPairs, KeyEvidence | None]:
    """``pairs`` with the candidates the trace's request keys leave (``infer.keys``) and
    the evidence, with what it decided in ``info["keys"]``; as they are and None without
    keys or ``use_keys``."""
    if not params.use_keys:
        return pairs, None
    found = call_keys(trace, pairs)
    if found is None:
        return pairs, None
    tol_ns = round(candidate_tolerance_s(pairs, params) * 1e9)
    evidence = close_keys(pairs, found[0], tol_ns, found[1])
    info["keys"] = evidence.to_json()
    return with_keys(pairs, evidence), evidence


def _agreeing(pairs: CallPairs, final: Stage, info: dict[str, Any]) -> Stage:
    """The last stage with no request holding two keys (``infer.keys.agree_keys``); a
    call moved for it gets even odds, and ``info["keys"]`` the count moved."""
    parent, moved = agree_keys(pairs, final.parent, round(final.tolerance_s * 1e9))
    parent = _without_loops(pairs, parent)  # a call moved under a call that stays within it
    info["keys"]["moved_to_agree"] = moved
    if not moved:
        return final
    changed = parent != final.parent
    assert final.log_odds is not None
    log_odds = np.where(changed, np.where(parent >= 0, 0.0, np.inf), final.log_odds)
    return replace(final, parent=parent, confidence=sigmoid(log_odds), log_odds=log_odds)


#: The trace's columns copied into the instances table beside each pair's two messages'
#: times, so that a pair finds its messages without row positions (``message_keys``).
MESSAGE_KEY_COLUMNS: tuple[str, ...] = ("flow", "stream")


def message_keys(trace: pa.Table, pairs: CallPairs) -> pa.Table:
    """Per call pair, what finds its two messages in the trace (with ``t_call`` and
    ``t_return``, which the instances table holds): the call's and the return's ``id``
    (``call_id``, ``return_id``), and the call's ``flow`` and ``stream`` where the trace has
    them (a call and its return travel on one connection).

    >>> t = pa.table({"id": pa.array([7, 7], pa.uint64()), "stream": pa.array([3, 3], pa.uint32())})
    >>> p = CallPairs(*(np.zeros(1, np.int64),) * 4, np.array([0]), np.array([1]), 0, 0, 0)
    >>> message_keys(t, p).to_pylist()
    [{'call_id': 7, 'return_id': 7, 'stream': 3}]
    """
    call, ret = pa.array(pairs.call_row, pa.int64()), pa.array(pairs.return_row, pa.int64())
    cols = {"call_id": trace["id"].take(call), "return_id": trace["id"].take(ret)}
    cols.update({c: trace[c].take(call) for c in MESSAGE_KEY_COLUMNS if c in trace.column_names})
    return pa.table(cols)


def call_operations(trace: pa.Table, pairs: CallPairs) -> tuple[np.ndarray, list[str]] | None:
    """Per call pair, a code of its call's operation (its label with ids folded,
    ``infer.operations``; -1 where it has none) and the operations; None when the trace
    has no labels.

    >>> t = pa.table({"label": pa.array(["GET /a/1", None, "GET /b", "GET /a/2"]).dictionary_encode()})
    >>> p = CallPairs(*(np.zeros(2, np.int64),) * 4, np.array([3, 1]), np.array([0, 0]), 0, 0, 0)
    >>> codes, names = call_operations(t, p)
    >>> codes.tolist(), names
    ([0, -1], ['GET /a/:id'])
    """
    return _codes_at(trace, "label", pairs.call_row, operation_codes)


def return_statuses(trace: pa.Table, pairs: CallPairs) -> tuple[np.ndarray, list[str]] | None:
    """Per call pair, a code of its return's status (``"200"``, ``"503"``; -1 where it
    has none) and the statuses; None when the trace has none."""
    return _codes_at(trace, "status", pairs.return_row, value_codes)


def _codes_at(
    trace: pa.Table,
    column: str,
    rows: np.ndarray,
    codes_of: Callable[[pa.Array | pa.ChunkedArray], tuple[np.ndarray, list[str]]],
) -> tuple[np.ndarray, list[str]] | None:
    if column not in trace.column_names:
        return None
    col = trace[column].take(pa.array(rows))
    if col.null_count == len(col):
        return None
    return codes_of(col)


def _last_stage(
    pairs: CallPairs,
    n_nodes: int,
    params: NestingParams,
    counts: np.ndarray,
    runner: Runner | None,
    info: dict[str, Any],
    say: Callable[[str], None],
    labels: np.ndarray | None = None,
) -> Stage:
    """The last stage of ``nesting_stages``; ``info`` gets every stage's summary, the
    tolerance used and the chain and request rounds run; ``say`` each stage's name as
    it ends."""
    # Only the last stage's assignment is kept: each holds arrays the size of the trace.
    stats, final = [], None
    for final in nesting_stages(pairs, n_nodes, params, counts=counts, runner=runner, labels=labels):
        stats.append(final.to_json())
        say(f"stage {len(stats)}: {final.name}")
    assert final is not None
    info["stages"] = stats
    info["tolerance_s"] = final.tolerance_s
    if params.chains:
        info["chain_rounds_run"] = sum(s["stage"] == "chain round" for s in stats)
    if params.request_rounds:
        info["request_rounds_run"] = sum(s["stage"] == "request round" for s in stats)
    return final


def _result(
    names: list[str],
    pairs: CallPairs,
    parent: np.ndarray,
    confidence: np.ndarray,
    counts: np.ndarray,
    params: NestingParams,
    info: dict[str, Any],
    sort: str,
    calibration: Calibration,
    operations: tuple[np.ndarray, list[str]] | None = None,
    statuses: tuple[np.ndarray, list[str]] | None = None,
    by_label: bool = False,
) -> NestingResult:
    """The result of a parent assignment: its instances and patterns built."""
    from infer.patterns import build_patterns

    patterns, instance, pattern_index = build_patterns(
        pairs,
        parent,
        names,
        sort=sort,
        confidence=confidence,
        instance_map=calibration.apply_instances,
        operations=operations,
        statuses=statuses,
        by_operation=by_label,
    )
    return NestingResult(
        nodes=names,
        pairs=pairs,
        parent=parent,
        confidence=confidence,
        candidates=counts,
        patterns=patterns,
        instance=instance,
        pattern_index=pattern_index,
        params=params,
        trace_info=info,
        sort=sort,
        calibration=calibration,
        operations=operations,
        statuses=statuses,
        by_label=by_label,
    )


def _answer(
    n_nodes: int, params: NestingParams, runner: Runner | None = None
) -> Callable[[CallPairs], tuple[np.ndarray, np.ndarray, float]]:
    """The inference ``params`` ask for, as a function of call pairs returning the last
    stage's parents, log-odds and mean log-likelihood per call (what a twin is inferred
    with)."""

    def run(pairs: CallPairs) -> tuple[np.ndarray, np.ndarray, float]:
        *_, final = nesting_stages(pairs, n_nodes, params, runner=runner)
        return final.parent, final.log_odds, final.log_likelihood

    return run
