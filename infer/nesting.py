"""The nesting algorithm (Aguilera et al., SOSP 2003) for RPC traces.

1. Call pairs: calls matched with returns (``infer.callpairs``).
2. Parent candidates: for a child call B->C, every call into B that started no later
   than the child's call and returned no earlier than the child's return, each within
   ``tolerance_s`` (clock skew).
3. Scoreboard: per (A, B, C), how often each parent-call-to-child-call delay occurs,
   each candidate counting 1/N; delays binned exponentially (``bin_base``, from
   ``bin_min_s``), optionally smoothed with a Gaussian of ``smooth_bins``.
4. Unique parent: score = scoreboard x penalties ``(1+overlap)^-x (1+samedest)^-y
   (1+children)^-z``, counted over the parent's candidate children; the earliest
   parent wins ties. Optional refinement rounds count the penalties over the children
   each parent was given (``rounds``), then score the gaps to the siblings a child
   would have (``siblings``), then move children to where their node's chains of
   events are most likely (``chains``, ``infer._chains``). Loops of parent links are
   cut at their earliest call.
5. Paths: unparented calls are roots; instances are their trees; instances of one
   shape form a pattern (``infer.patterns``).

Every phase is vectorized: sorting, searchsorted, bincount. Candidates are enumerated
in chunks of parents, once when all of them fit a memory budget (O(m p)), else once per
pass, so memory stays bounded on traces of any size.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy.ndimage import gaussian_filter1d

from infer.callpairs import CallPairs, match_calls, node_codes
from tracefmt import ParameterError, SchemaError, TraceFileError, sort_trace, validate_trace
from tracefmt._files import existing_file
from tracefmt.units import format_instant_ns

__all__ = ["NestingParams", "NestingResult", "infer_nesting"]

_KEEP_BYTES = 640 << 20  # candidates kept between passes, beyond which they are enumerated again
_DENSE_BOARD = 1 << 24  # scoreboard key spaces up to this size get a direct lookup table
BOARDS = ("joint", "delay")


@dataclass(frozen=True)
class NestingParams:
    """Every tuning parameter of ``infer_nesting`` (all recorded in the paths file)."""

    x: float = 2.0
    y: float = 0.0
    z: float = 0.0
    bin_base: float = 1.05
    bin_min_s: float = 1e-6
    bin_max_s: float = 7200.0
    smooth_bins: float = 0.0
    tolerance_s: float = 0.0
    use_ids: bool = True
    density: bool = False
    board: str = "delay"
    rounds: int = 0
    siblings: int = 0
    chains: int = 0

    def check(self) -> None:
        """Raise ``ParameterError`` naming the first bad parameter."""
        for name in ("x", "y", "z", "smooth_bins", "tolerance_s", "bin_base", "bin_min_s", "bin_max_s"):
            if not np.isfinite(getattr(self, name)):
                raise ParameterError(f"{name} must be a finite number, not {getattr(self, name)}")
        for name in ("x", "y", "z", "smooth_bins", "tolerance_s"):
            if getattr(self, name) < 0:
                raise ParameterError(f"{name} must be >= 0, not {getattr(self, name)}")
        if not self.bin_base > 1.0:
            raise ParameterError(f"bin_base must be > 1, not {self.bin_base}")
        if not 0 < self.bin_min_s < self.bin_max_s:
            raise ParameterError(f"need 0 < bin_min_s < bin_max_s, not {self.bin_min_s}, {self.bin_max_s}")
        if not (isinstance(self.rounds, int) and 0 <= self.rounds <= 20):
            raise ParameterError(f"rounds must be an integer from 0 to 20, not {self.rounds!r}")
        if not (isinstance(self.siblings, int) and 0 <= self.siblings <= 20):
            raise ParameterError(f"siblings must be an integer from 0 to 20, not {self.siblings!r}")
        if not (isinstance(self.chains, int) and 0 <= self.chains <= 100):
            raise ParameterError(f"chains must be an integer from 0 to 100, not {self.chains!r}")
        if self.board not in BOARDS:
            raise ParameterError(f"unknown scoreboard {self.board!r} (must be one of {', '.join(BOARDS)})")
        if self.board == "joint" and self.smooth_bins > 0:
            raise ParameterError(
                "smoothing applies to the delay scoreboard: use board='delay' with smooth_bins"
            )

    @property
    def n_bins(self) -> int:
        return int(np.ceil(np.log(self.bin_max_s / self.bin_min_s) / np.log(self.bin_base))) + 2


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
        The winning candidate's share of all candidates' scores (1 for roots).
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
        from infer.patterns import build_patterns

        width = round(window_s * 1e9)
        t0 = int(self.trace_info.get("start_ns", 0))
        slot = (self.pairs.t_call[self.instance] - t0) // width
        out = []
        for k in np.unique(slot):
            keep = np.flatnonzero(slot == k)
            new_index = np.full(self.parent.size, -1, np.int64)
            new_index[keep] = np.arange(keep.size)
            parent = np.where(self.parent[keep] >= 0, new_index[np.maximum(self.parent[keep], 0)], -1)
            patterns, _, _ = build_patterns(self.pairs.take(keep), parent, self.nodes, sort=self.sort)
            out.append((t0 + int(k) * width, t0 + (int(k) + 1) * width, patterns))
        return out

    def to_json(
        self, *, top: int | None = None, min_count: int = 1, window_s: float | None = None
    ) -> dict[str, Any]:
        """The paths file of ``results.md`` (patterns in the order they were sorted).

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
            "params": {**asdict(self.params), "top": top, "min_count": min_count},
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
                **(
                    {"chain_rounds_run": self.trace_info["chain_rounds_run"]}
                    if "chain_rounds_run" in self.trace_info
                    else {}
                ),
            },
            "patterns": [p.to_json() for p in chosen],
        }

    def write_instances(self, path: str | os.PathLike[str]) -> None:
        """Write ``instances_table()`` as Parquet (zstd), atomically."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.partial")
        pq.write_table(self.instances_table(), tmp, compression="zstd")
        os.replace(tmp, target)

    def instances_table(self) -> pa.Table:
        """Every call pair with its inferred parent, instance, pattern and confidence."""
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
            }
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


def _time_key(node: np.ndarray, t: np.ndarray, t0: int, shift: int) -> np.ndarray:
    """One sortable int64 per (node, time): node in the high bits, time in the low."""
    return (node.astype(np.int64) << (63 - _NODE_BITS)) + ((t - t0) >> shift)


_NODE_BITS = 20


def _time_frame(p: CallPairs) -> tuple[int, int]:
    """Origin and right shift that fit every call's time beside a node code in one int64."""
    if len(p) == 0:
        return 0, 0
    t0 = int(p.t_call.min())
    span = int(p.t_return.max() - t0)
    return t0, max(0, span.bit_length() - (63 - _NODE_BITS - 1))


def _bins(delay_ns: np.ndarray, params: NestingParams) -> np.ndarray:
    """Exponential delay bins, ``2 * n_bins`` of them: a delay's magnitude picks the bin
    (0 below ``bin_min_s``) and negative delays, possible within the skew tolerance,
    take the mirror bins ``n_bins ..`` so they never pile up with short positive ones."""
    nb = params.n_bins
    # The arithmetic of bin = floor(log(max(|d|, min) / min) / log(base)) + 1, done in
    # place: one buffer instead of one per step, for tens of millions of delays.
    mag = np.abs(delay_ns).astype(np.float64)
    np.divide(mag, 1e9, out=mag)
    below = mag < params.bin_min_s
    x = np.maximum(mag, params.bin_min_s, out=mag)
    np.divide(x, params.bin_min_s, out=x)
    np.log(x, out=x)
    np.divide(x, np.log(params.bin_base), out=x)
    np.floor(x, out=x)
    b = x.astype(np.int32 if nb < 1 << 30 else np.int64)
    b += 1
    np.minimum(b, nb - 1, out=b)
    b[below] = 0
    b[delay_ns < 0] += nb
    return b


def _bin_widths(params: NestingParams) -> np.ndarray:
    """Width in seconds of every delay bin (bin 0 holds everything below ``bin_min_s``),
    for positive then negative delays."""
    k = np.arange(params.n_bins)
    lower = params.bin_min_s * params.bin_base ** np.maximum(k - 1, 0)
    width = lower * (params.bin_base - 1.0)
    width[0] = params.bin_min_s
    return np.concatenate([width, width])


def _penalty(count: np.ndarray, weight: float) -> np.ndarray:
    """``(1 + count) ** -weight`` through a table: counts are small integers, and a
    gather costs a fraction of a power per candidate."""
    if count.size == 0:
        return np.ones(0)
    return ((1.0 + np.arange(int(count.max()) + 1)) ** -weight)[count]


class _Siblings:
    """Candidates grouped by parent and in call order within (as enumerated), indexed
    once so that overlap counts among any subset of each parent's candidates (all of
    them, or the children it was given in a round) cost a few linear passes."""

    def __init__(self, parent: np.ndarray, tc: np.ndarray, tr: np.ndarray) -> None:
        m = parent.size
        t0 = int(min(tc.min(), tr.min())) if m else 0
        span = (int(max(tc.max(), tr.max())) - t0 + 1) if m else 1
        if (int(parent.max(initial=0)) + 1).bit_length() + span.bit_length() <= 62:
            # Times themselves fit beside the parent index in one int64 key.
            rc, rr, width = tc - t0, tr - t0, span
        else:
            times, inv = np.unique(np.concatenate([tc, tr]), return_inverse=True)
            inv = inv.ravel()
            rc, rr, width = inv[:m], inv[m:], int(times.size) + 1
        base = parent.astype(np.int64) * width
        # Per candidate only its group and a few 32-bit fields: a chunk is kept between
        # passes, so bytes per candidate count.
        self.run = (
            np.flatnonzero(np.concatenate([[True], parent[1:] != parent[:-1]])) if m else np.zeros(0, int)
        )
        self.run_end = np.append(self.run[1:], m)
        self.group = (
            np.cumsum(np.concatenate([[False], parent[1:] != parent[:-1]])) if m else self.run
        ).astype(np.int32)
        # Position of the first sibling starting at or after each child's end.
        start = base + rc
        self.after_end = np.searchsorted(start, base + rr, side="left").astype(np.int32)
        self.nonempty = rc < rr
        # Zero-length children (rare): where the run of siblings starting at the same
        # instant ends, to tell a zero-length sibling at that instant, which ended by
        # the child's start without starting before its end, from one that overlaps.
        self.zero = np.flatnonzero(~self.nonempty).astype(np.int32)
        if self.zero.size:
            run_ends = np.append(np.flatnonzero(start[1:] != start[:-1]) + 1, m)
            self.zero_until = run_ends[np.searchsorted(run_ends, self.zero, side="right")].astype(np.int32)
        else:
            self.zero_until = self.zero

    @property
    def nbytes(self) -> int:
        return (
            self.group.nbytes
            + self.after_end.nbytes
            + self.nonempty.nbytes
            + self.zero.nbytes
            + self.zero_until.nbytes
            + 16 * self.run.size
        )

    def overlaps(self, member: np.ndarray | None) -> np.ndarray:
        """Per candidate, the members (all candidates if None) of its parent's group that
        overlap it in time, itself not counted."""
        m = self.group.size
        lo, hi = self.run[self.group], self.run_end[self.group]
        # Members before after_end started before this child ended ...
        if member is None:
            started = self.after_end - lo
            marked = self.after_end < hi
        else:
            prefix = np.concatenate([[0], np.cumsum(member)])
            started = prefix[self.after_end] - prefix[lo]
            marked = member & (self.after_end < hi)
        # ... less those that ended by its start: member j ended by the start of every
        # sibling from after_end[j] on, so a running count of those marks does it.
        marks = np.cumsum(np.bincount(self.after_end[marked], minlength=m + 1)[:m])
        ended = marks - np.where(lo > 0, marks[np.maximum(lo - 1, 0)], 0)
        # A member with a length counts itself among the started.
        own = self.nonempty if member is None else self.nonempty & member
        out = started - ended - own
        if self.zero.size:
            # A zero-length member at a zero-length child's instant (itself included)
            # ended by its start without starting before its end: it does not overlap.
            zl = ~self.nonempty if member is None else ~self.nonempty & member
            prefix = np.concatenate([[0], np.cumsum(zl)])
            out[self.zero] += prefix[self.zero_until] - prefix[self.after_end[self.zero]]
        return np.maximum(out, 0)


class _Chosen:
    """The children each parent got in the previous round, for the same-destination and
    children penalties counted over chosen rather than candidate children (refinement
    rounds; the overlap penalty is counted by ``_Siblings``).
    """

    def __init__(self, pairs: CallPairs, parent: np.ndarray) -> None:
        self.parent = parent
        self.n_nodes = np.int64(int(max(pairs.caller.max(), pairs.callee.max())) + 1)
        kid = np.flatnonzero(parent >= 0)
        self.by_dest = np.sort(parent[kid] * self.n_nodes + pairs.callee[kid])
        self.n_kids = np.bincount(parent[kid], minlength=len(pairs))

    def penalty(self, pairs: CallPairs, c: np.ndarray, par: np.ndarray, params: NestingParams) -> np.ndarray:
        """``(1+samedest)^-y (1+children)^-z`` over the other chosen children."""
        mine = self.parent[c] == par
        out = np.ones(c.size)
        if params.y:
            key = par.astype(np.int64) * self.n_nodes + pairs.callee[c]
            same = np.searchsorted(self.by_dest, key, side="right") - np.searchsorted(self.by_dest, key)
            out *= (1.0 + same - mine) ** -params.y
        if params.z:
            out *= (1.0 + self.n_kids[par] - mine) ** -params.z
        return out


class _Board:
    """The scoreboard in compact form: sorted int64 cell keys and their scores.

    A cell is (caller of the parent, parent node, child node, delay bin) — plus the
    return-gap bin for the joint board. Chunks add (key, weight) partial sums; after
    ``finish`` the scores include smoothing and the density division.
    """

    def __init__(self, params: NestingParams, n_nodes: int) -> None:
        self.params = params
        self.n_nodes = n_nodes
        self.n_bins = 2 * params.n_bins  # positive and negative delays
        cells = n_nodes**3 * self.n_bins * (self.n_bins if params.board == "joint" else 1)
        self.cells = cells
        if cells >= 1 << 62:
            raise ParameterError(f"{n_nodes} nodes are too many for the {params.board} scoreboard")
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        # A small key space is summed in place: one bincount per chunk, no sorting.
        self._dense = np.zeros(cells) if cells <= _DENSE_BOARD else None
        self.keys = np.zeros(0, np.int64)
        self.values = np.zeros(0)
        self._table: np.ndarray | None = None
        self._head: np.ndarray | None = None

    def cell_keys(self, pairs: CallPairs, c: np.ndarray, par: np.ndarray) -> np.ndarray:
        n = self.n_nodes
        if self._head is None or self._head.size != len(pairs):
            # (caller, node) of every pair as a parent, once: one gather per candidate.
            self._head = ((pairs.caller * n + pairs.callee) * n).astype(np.int64)
        triple = self._head[par] + pairs.callee[c]
        key = triple * self.n_bins + _bins(pairs.t_call[c] - pairs.t_call[par], self.params)
        if self.params.board == "joint":
            key = key * self.n_bins + _bins(pairs.t_return[par] - pairs.t_return[c], self.params)
        return key.astype(np.int32) if self.cells < 1 << 31 else key

    def add(self, cells: np.ndarray, weight: np.ndarray) -> None:
        """Add ``weight`` to the cells (from ``cell_keys``)."""
        if self._dense is not None:
            self._dense += np.bincount(cells, weights=weight, minlength=self._dense.size)
            return
        keys, inv = np.unique(cells, return_inverse=True)
        self._parts.append((keys, np.bincount(inv.ravel(), weights=weight, minlength=keys.size)))

    def finish(self) -> None:
        if self._dense is not None:
            nonzero = np.flatnonzero(self._dense)
            self._parts = [(nonzero, self._dense[nonzero])]
            self._dense = None
        keys = np.concatenate([k for k, _ in self._parts]) if self._parts else np.zeros(0, np.int64)
        weights = np.concatenate([w for _, w in self._parts]) if self._parts else np.zeros(0)
        self._parts = []
        self.keys, inv = np.unique(keys, return_inverse=True)
        values = np.bincount(inv.ravel(), weights=weights, minlength=self.keys.size)
        nb = self.n_bins
        if self.params.board == "delay" and self.params.smooth_bins > 0 and self.keys.size:
            rows, row = np.unique(self.keys // nb, return_inverse=True)
            dense = np.zeros((rows.size, nb))
            dense[row.ravel(), self.keys % nb] = values
            half = self.params.n_bins
            for side in (slice(0, half), slice(half, nb)):  # positive and negative delays apart
                dense[:, side] = gaussian_filter1d(
                    dense[:, side], self.params.smooth_bins, axis=1, mode="constant"
                )
            values = dense[row.ravel(), self.keys % nb]
        if self.params.density:
            width = _bin_widths(self.params)
            if self.params.board == "joint":
                values = values / (width[(self.keys // nb) % nb] * width[self.keys % nb])
            else:
                values = values / width[self.keys % nb]
        self.values = values
        # A small key space gets a direct table: one gather per lookup instead of a search.
        space = int(self.keys.max()) + 1 if self.keys.size else 0
        self._table = None
        if space <= _DENSE_BOARD:
            self._table = np.zeros(space)
            self._table[self.keys] = values

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Scores of cells (from ``cell_keys``); 0 for a cell nothing was added to."""
        if self._table is not None:
            if keys.size == 0 or int(keys.max()) < self._table.size:
                return self._table[keys]
            inside = keys < self._table.size
            return np.where(inside, self._table[np.where(inside, keys, 0)], 0.0)
        if self.keys.size == 0:
            return np.zeros(keys.size)
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return np.where(self.keys[at] == keys, self.values[at], 0.0)


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
        self.width = _bin_widths(params)
        if n_nodes**3 * (2 * self.half) ** 2 >= 1 << 62:
            raise ParameterError(f"{n_nodes} nodes are too many for siblings scoring")
        self.keys = np.zeros(0, np.int64)
        self.values = np.zeros(0)

    def cells(self, pairs: CallPairs, ch: _Chunk, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
        b1, b2 = _bins(before, self.params), _bins(after, self.params)
        n = self.n_nodes
        triple = (pairs.caller[par] * n + pairs.callee[par]) * n + pairs.callee[c]
        k = 2 * self.half
        key = (triple * k + b1 + has_prev * self.half) * k + b2 + has_next * self.half
        return key, self.width[b1] * self.width[b2]

    @classmethod
    def learn(
        cls,
        pairs: CallPairs,
        chunks: _CandidateChunks,
        parent: np.ndarray,
        params: NestingParams,
        n_nodes: int,
    ) -> tuple[_GapBoard, list[np.ndarray] | None]:
        """The board of the gaps around every child at the parent it was given, and every
        chunk's cells for scoring them (None when the chunks are not kept in memory)."""
        board = cls(params, n_nodes)
        keys, areas = [], []
        chunk_keys: list[np.ndarray] | None = [] if chunks.kept is not None else None
        for ch in chunks:
            member = parent[ch.c] == ch.par
            key, area = board.cells(pairs, ch, member)
            if chunk_keys is not None:
                chunk_keys.append(key)
            keys.append(key[member])
            areas.append(area[member])
        all_keys = np.concatenate(keys) if keys else np.zeros(0, np.int64)
        board.keys, inv, count = np.unique(all_keys, return_inverse=True, return_counts=True)
        area = np.ones(board.keys.size)
        if params.density and all_keys.size:
            area[inv.ravel()] = np.concatenate(areas)
        board.values = count / area
        return board, chunk_keys

    def lookup(self, key: np.ndarray) -> np.ndarray:
        """Scores of cells (from ``cells``); 0 for a cell no chosen child fell in."""
        if self.keys.size == 0:
            return np.zeros(key.size)
        at = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        return np.where(self.keys[at] == key, self.values[at], 0.0)


class _BestSoFar:
    """Each child's best candidate over chunks: highest score, then earliest parent call."""

    def __init__(self, n: int) -> None:
        self.score = np.full(n, -np.inf)
        self.t_parent = np.full(n, np.iinfo(np.int64).max)
        self.parent = np.full(n, -1, np.int64)
        self.total = np.zeros(n)

    def offer(
        self,
        c: np.ndarray,
        par: np.ndarray,
        score: np.ndarray,
        t_call: np.ndarray,
        mass: np.ndarray | None = None,
    ) -> None:
        """Offer candidates; ``mass`` (default ``score``) is what ``total`` sums per child
        (chain rounds, whose scores are logarithms, offer exp(score))."""
        if c.size == 0:
            return
        self.total += np.bincount(c, weights=score if mass is None else mass, minlength=self.total.size)
        pick = _best_parents(c, par, score, t_call, self.total.size)
        kids, s, t = c[pick], score[pick], t_call[par[pick]]
        better = (s > self.score[kids]) | ((s == self.score[kids]) & (t < self.t_parent[kids]))
        kids, s, t, p = kids[better], s[better], t[better], par[pick][better]
        self.score[kids], self.t_parent[kids], self.parent[kids] = s, t, p

    def result(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Parents (-1 for roots) and confidences (the winner's share of all scores)."""
        confidence = np.ones(self.parent.size)
        won = self.parent >= 0
        share = self.score[won] / np.where(self.total[won] > 0, self.total[won], 1.0)
        confidence[won] = np.where(self.total[won] > 0, share, 1.0 / np.maximum(counts[won], 1))
        return self.parent, confidence


@dataclass(frozen=True)
class _Chunk:
    """Candidates of a chunk of parents: children, parents, scoreboard cells, and the
    sibling index for overlap penalties (None without them)."""

    c: np.ndarray
    par: np.ndarray
    cells: np.ndarray
    siblings: _Siblings | None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.siblings is None else self.siblings.nbytes
        return self.c.nbytes + self.par.nbytes + self.cells.nbytes + extra


class _CandidateChunks:
    """The (child, parent) candidate pairs, in chunks of parents, with their scoreboard
    cells, for the several passes over them: kept from the first pass when they fit
    ``budget`` bytes (about 20 per pair), else enumerated again for each pass, so memory
    stays bounded on any trace."""

    def __init__(
        self, pairs: CallPairs, tol_ns: int, board: _Board, siblings: bool, budget: int = _KEEP_BYTES
    ) -> None:
        self.pairs, self.tol_ns, self.board, self.budget = pairs, tol_ns, board, budget
        self.siblings = siblings
        self.kept: list[_Chunk] | None = None

    def __iter__(self) -> Iterator[_Chunk]:
        if self.kept is not None:
            yield from self.kept
            return
        kept: list[_Chunk] | None = []
        size = 0
        p = self.pairs
        for c, par in _candidates_by_parent(p, self.tol_ns):
            sib = _Siblings(par, p.t_call[c], p.t_return[c]) if self.siblings else None
            chunk = _Chunk(c, par, self.board.cell_keys(p, c, par), sib)
            if kept is not None:
                size += chunk.nbytes
                if size <= self.budget:
                    kept.append(chunk)
                else:
                    kept = None
            yield chunk
        if kept is not None:
            self.kept = kept


def _candidates_by_parent(
    p: CallPairs, tol_ns: int, max_pairs: int = 1 << 18
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(child, parent) candidate pairs in chunks of parents, each parent with all its
    candidate children: children of its node that start and end within its interval
    (widened by the tolerance)."""
    n = len(p)
    if n == 0:
        return
    t0, shift = _time_frame(p)
    ckey = _time_key(p.caller, p.t_call, t0, shift)
    corder = np.argsort(ckey, kind="stable")
    ckey = ckey[corder]
    # Searches in key order walk the sorted keys forward: parents by (node, call time).
    # (A 16-bit copy of the node codes sorts by radix.)
    node = p.callee.astype(np.int16) if int(p.callee.max(initial=0)) < 1 << 15 else p.callee
    porder = np.argsort(node, kind="stable")
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    lo[porder] = np.searchsorted(
        ckey, _time_key(p.callee, np.maximum(p.t_call - tol_ns, t0), t0, shift)[porder]
    )
    hi[porder] = np.searchsorted(
        ckey, _time_key(p.callee, p.t_return + tol_ns, t0, shift)[porder], side="right"
    )
    sizes = hi - lo
    # Children's fields in key order: a chunk reads them in runs, not scattered.
    c_call, c_return, c_caller = p.t_call[corder], p.t_return[corder], p.caller[corder]
    # Cut the parents into chunks of about max_pairs enumerated pairs.
    bounds = np.searchsorted(np.cumsum(sizes), np.arange(max_pairs, int(sizes.sum()) + max_pairs, max_pairs))
    start = 0
    for end in [*np.unique(np.minimum(bounds + 1, n)).tolist(), n]:
        if end <= start:
            continue
        par_idx = np.arange(start, end)
        counts = sizes[start:end]
        total = int(counts.sum())
        start = end
        if total == 0:
            continue
        rep = np.repeat(par_idx, counts)
        pos = np.repeat(lo[par_idx] - np.cumsum(counts) + counts, counts) + np.arange(total)
        c = corder[pos]
        ok = (
            (c_call[pos] >= np.repeat(p.t_call[par_idx] - tol_ns, counts))
            & (c_return[pos] <= np.repeat(p.t_return[par_idx] + tol_ns, counts))
            & (c != rep)
            & (c_caller[pos] == np.repeat(p.callee[par_idx], counts))
        )
        # Half the memory for the kept candidates when pair indices fit 32 bits.
        index = np.int32 if n < 1 << 31 else np.int64
        yield c[ok].astype(index), rep[ok].astype(index)


def _break_cycles(parent: np.ndarray) -> np.ndarray:
    """``parent`` with every loop of parent links cut at its earliest (lowest) pair.

    Pointer doubling, no loop per call: after k steps each pair knows its 2^k-th
    ancestor and the lowest pair on the way; a pair still not at a root after more
    steps than there are pairs leads into a loop, whose lowest pair is found from the
    loop itself.

    Examples
    --------
    >>> _break_cycles(np.array([1, 0, 1, -1, 3])).tolist()
    [-1, 0, 1, -1, 3]
    """
    n = parent.size
    if n == 0:
        return parent
    sentinel = n  # a root's parent, pointing to itself
    up = np.append(np.where(parent >= 0, parent, sentinel), sentinel)
    low = np.arange(n + 1)
    for _ in range(max(n.bit_length(), 1) + 1):
        low = np.minimum(low, low[up])
        up = up[up]
    stuck = np.flatnonzero(up[:n] != sentinel)
    if stuck.size == 0:
        return parent
    # up[v] is on v's loop, and low there is the loop's lowest pair (the path walked
    # from it is longer than the loop).
    out = parent.copy()
    out[np.unique(low[up[stuck]])] = -1
    return out


def _without_loops(pairs: CallPairs, parent: np.ndarray) -> np.ndarray:
    """``parent`` with loops cut (``_break_cycles``). Calls that hold each other (equal
    times, or overlapping within the tolerance) can choose each other: a loop has no
    root. Without a parent calling no earlier than its child there is no loop to look for."""
    kid = np.flatnonzero(parent >= 0)
    if np.any(pairs.t_call[parent[kid]] >= pairs.t_call[kid]):
        return _break_cycles(parent)
    return parent


def _best_parents(
    all_c: np.ndarray, all_p: np.ndarray, score: np.ndarray, t_call: np.ndarray, n: int
) -> np.ndarray:
    """Index (into the candidate arrays) of each child's best candidate.

    The highest score wins, then the earliest parent call; should two tie on both, the
    first enumerated. Reductions per child by ``ufunc.at``: no sort of the candidates.
    """
    top = np.full(n, -np.inf)
    np.maximum.at(top, all_c, score)
    won = np.flatnonzero(score == top[all_c])
    t_par = t_call[all_p[won]]
    earliest = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(earliest, all_c[won], t_par)
    won = won[t_par == earliest[all_c[won]]]
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, all_c[won], won)
    return first[first < np.iinfo(np.int64).max]


def infer_nesting(
    trace: pa.Table,
    *,
    x: float = 2.0,
    y: float = 0.0,
    z: float = 0.0,
    bin_base: float = 1.05,
    bin_min_s: float = 1e-6,
    bin_max_s: float = 7200.0,
    smooth_bins: float = 0.0,
    tolerance_s: float = 0.0,
    use_ids: bool = True,
    density: bool = False,
    board: str = "delay",
    rounds: int = 0,
    siblings: int = 0,
    chains: int = 0,
    sort: str = "total",
) -> NestingResult:
    """Infer causal path patterns of an RPC trace with the nesting algorithm.

    Parameters
    ----------
    trace : pyarrow.Table
        A message trace (``tracefmt``); sorted here if it is not.
    x, y, z : float
        Penalty weights for overlapping children, children with the same destination,
        and children in general (the paper's most predictable setting: 2, 0, 0).
    bin_base, bin_min_s, bin_max_s : float
        Exponential delay bins: bin k covers ``bin_min_s * bin_base**(k-1)`` up to the
        next; defaults resolve microseconds up to two hours.
    smooth_bins : float
        Standard deviation, in bins, of a Gaussian smoothing of every scoreboard row
        (tolerates clock skew that spreads a peak); 0 is off.
    tolerance_s : float
        Clock-skew tolerance when testing whether a call can be a parent.
    use_ids : bool
        Match calls and returns by id where the trace has ids.
    density : bool
        Score a delay by its bin's count divided by the bin's width (a density)
        instead of the raw count (the paper's way, the default). Wrong candidates
        spread evenly over time and exponential bins grow with the delay, so raw
        counts favour long delays; densities do not.
    board : {"joint", "delay"}
        ``"delay"`` (default) is the paper's scoreboard: per (A, B, C), the histogram
        of the parent-call-to-child-call delay. ``"joint"`` also bins the child-return-to-
        parent-return gap and scores the pair of bins together: a parent answers a
        typical time after its last child returns, which wrong candidates do not.
    rounds : int
        Refinement rounds in which the penalties count the children each parent was
        given in the round before.
    siblings : int
        Then rounds scoring each candidate by the gaps to the siblings it would have.
    chains : int
        Then at most this many chain rounds (``infer._chains``): each child moves, or
        swaps with a call to the same node, to where it most raises the likelihood of
        its node's chains of events (a received call or a child's return leads to the
        next call or the return), learnt from the round before; rounds stop when
        nothing moves. The most accurate setting, and the slowest.
    sort : {"total", "count"}
        Pattern order: by total latency or by instance count.

    Returns
    -------
    NestingResult

    Raises
    ------
    SchemaError
        The trace has no RPC calls (use convolution for one-way messages).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> r = infer_nesting(t)
    >>> [(pat.count, pat.shape_text) for pat in r.patterns]
    [(1, 'c>w(w>d)')]
    """
    from infer.patterns import build_patterns

    params = NestingParams(
        x,
        y,
        z,
        bin_base,
        bin_min_s,
        bin_max_s,
        smooth_bins,
        tolerance_s,
        use_ids,
        density,
        board,
        rounds,
        siblings,
        chains,
    )
    params.check()
    if sort not in ("total", "count"):
        raise ParameterError(f"unknown sort {sort!r} (must be total or count)")
    trace = sort_trace(validate_trace(trace))
    nodes = node_codes(trace)
    if len(nodes.names) >= 1 << _NODE_BITS:
        raise ParameterError(f"{len(nodes.names)} nodes: nesting handles up to {1 << _NODE_BITS}")
    pairs = match_calls(trace, nodes, use_ids=use_ids)
    if len(pairs) == 0:
        raise SchemaError(
            "no RPC call/return pairs in this trace (nesting needs call and return messages; "
            "for one-way messages use: wirepath infer convolution)"
        )
    n = len(pairs)
    tol_ns = round(tolerance_s * 1e9)
    n_nodes = len(nodes.names)
    board_ = _Board(params, n_nodes)
    chunks = _CandidateChunks(pairs, tol_ns, board_, siblings=x > 0 or siblings > 0 or chains > 0)

    # Pass 1: each child's candidates share one unit of weight on the scoreboard.
    counts = np.zeros(n, np.int64)
    for ch in chunks:
        counts += np.bincount(ch.c, minlength=n)
    for ch in chunks:
        board_.add(ch.cells, 1.0 / counts[ch.c])
    board_.finish()

    # Pass 2, by chunks of parents: every parent meets all its candidate children at
    # once, so the penalties are exact; each child keeps its best parent so far.
    best = _BestSoFar(n)
    for ch in chunks:
        c, par = ch.c, ch.par
        score = board_.lookup(ch.cells)
        if x:
            score = score * _penalty(ch.siblings.overlaps(None), x)
        if y:
            dest = par.astype(np.int64) * n_nodes + pairs.callee[c]
            _, inv, cnt = np.unique(dest, return_inverse=True, return_counts=True)
            score = score * cnt[inv.ravel()].astype(float) ** -y  # 1 + others to that destination
        if z:
            _, inv, cnt = np.unique(par, return_inverse=True, return_counts=True)
            score = score * cnt[inv.ravel()].astype(float) ** -z
        best.offer(c, par, score, pairs.t_call)
    # Refinement rounds: the penalties count the children each parent actually got in
    # the round before, not every child it could have had.
    plain = rounds if (x or y or z) else 0
    if plain or siblings:
        for k in range(plain + siblings):
            chosen = _Chosen(pairs, best.parent) if (y or z) else None
            previous = best.parent
            gaps, gap_keys = (
                _GapBoard.learn(pairs, chunks, previous, params, n_nodes) if k >= plain else (None, None)
            )
            best = _BestSoFar(n)
            for i, ch in enumerate(chunks):
                member = previous[ch.c] == ch.par
                if gaps is None:
                    score = board_.lookup(ch.cells)
                else:
                    score = gaps.lookup(
                        gap_keys[i] if gap_keys is not None else gaps.cells(pairs, ch, member)[0]
                    )
                if x:
                    score = score * _penalty(ch.siblings.overlaps(member), x)
                if chosen is not None:
                    score = score * chosen.penalty(pairs, ch.c, ch.par, params)
                best.offer(ch.c, ch.par, score, pairs.t_call)
    parent, confidence = best.result(counts)
    parent = _without_loops(pairs, parent)
    info: dict[str, Any] = {}
    if chains:
        from infer._chains import chain_rounds

        parent, confidence, info["chain_rounds_run"] = chain_rounds(
            pairs, chunks, parent, params, n_nodes, chains
        )
        parent = _without_loops(pairs, parent)
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    info.update(messages=trace.num_rows, start_ns=int(ts[0]), end_ns=int(ts[-1]))
    patterns, instance, pattern_index = build_patterns(pairs, parent, nodes.names, sort=sort)
    return NestingResult(
        nodes=nodes.names,
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
    )
