"""Candidate parents of the nesting algorithm, enumerated in bounded memory, and the
scoreboard that scores them by delay.

A candidate parent of a child call B->C is a call into B that started no later than the
child's call and returned no earlier than its return (each within a clock-skew
tolerance). ``CandidateChunks`` enumerates the (child, parent) pairs in chunks of
parents, each parent with all its candidate children, kept in memory between passes
when they fit a budget. ``Scoreboard`` holds, per (caller of the parent, parent node,
child node), how often each parent-call-to-child-call delay occurs, on exponential bins
(``delay_bins``). ``BestSoFar`` keeps each child's best candidate over chunks.

These are the parts every stage of the nesting algorithm (``infer.nesting``) and the
chain rounds (``infer.chains``) share.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from infer.callpairs import CallPairs
from infer.params import NestingParams
from tracefmt import ParameterError
from tracefmt.units import offsets_ns, shifted_ns

__all__ = [
    "DENSE_TABLE",
    "NODE_BITS",
    "BestSoFar",
    "CandidateChunks",
    "CandidatePlan",
    "Chunk",
    "Offer",
    "Scoreboard",
    "Siblings",
    "all_candidates",
    "best_parents",
    "bin_widths",
    "candidates_by_parent",
    "cell_sums",
    "concat_ranges",
    "delay_bins",
    "keep_budget",
    "skew_tolerance",
]

#: Candidates kept between passes at least (beyond the budget they are enumerated again
#: for every pass): a quarter of the memory available when more (``keep_budget``).
_KEEP_BYTES = 640 << 20
DENSE_TABLE = 1 << 24  # key spaces up to this size get a direct lookup table
#: Candidate pairs per chunk of parents: bounds the memory of one chunk's scoring, and
#: is the unit of work a cluster's workers are dealt.
CHUNK_PAIRS = 1 << 18


def _time_key(node: np.ndarray, t: np.ndarray, t0: int, shift: int) -> np.ndarray:
    """One sortable int64 per (node, time at or after ``t0``): node in the high bits,
    time in the low."""
    return (node.astype(np.int64) << (63 - NODE_BITS)) + (offsets_ns(t, t0) >> np.uint64(shift)).astype(
        np.int64
    )


NODE_BITS = 20


def _time_frame(p: CallPairs, tol_ns: int) -> tuple[int, int]:
    """Origin and right shift that fit every call's time, and every return's widened by
    ``tol_ns``, beside a node code in one int64."""
    if len(p) == 0:
        return 0, 0
    t0 = int(p.t_call.min())
    span = int(shifted_ns(p.t_return.max(), tol_ns)) - t0  # Python ints: no wrap on any span
    return t0, max(0, span.bit_length() - (63 - NODE_BITS - 1))


def delay_bins(delay_ns: np.ndarray, params: NestingParams) -> np.ndarray:
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


def bin_widths(params: NestingParams) -> np.ndarray:
    """Width in seconds of every delay bin (bin 0 holds everything below ``bin_min_s``),
    for positive then negative delays."""
    k = np.arange(params.n_bins)
    lower = params.bin_min_s * params.bin_base ** np.maximum(k - 1, 0)
    width = lower * (params.bin_base - 1.0)
    width[0] = params.bin_min_s
    return np.concatenate([width, width])


class Siblings:
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


class Scoreboard:
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
        self._dense = np.zeros(cells) if cells <= DENSE_TABLE else None
        self.keys = np.zeros(0, np.int64)
        self.values = np.zeros(0)
        self._table: np.ndarray | None = None
        self._table_built = False
        self._head: np.ndarray | None = None

    def heads(self, pairs: CallPairs) -> np.ndarray:
        """(caller, node) of every pair as a parent, in a cell key: one gather per
        candidate in ``cell_keys``."""
        n = self.n_nodes
        return ((pairs.caller.astype(np.int64) * n + pairs.callee) * n).astype(np.int64)

    def cell_keys(
        self, pairs: CallPairs, c: np.ndarray, par: np.ndarray, head: np.ndarray | None = None
    ) -> np.ndarray:
        """The cells of candidates ``(c, par)``; ``head``: ``heads(pairs)``, made once here
        for the trace's pairs when not given (a window's task gives its own)."""
        if head is None:
            if self._head is None or self._head.size != len(pairs):
                self._head = self.heads(pairs)
            head = self._head
        triple = head[par] + pairs.callee[c]
        key = triple * self.n_bins + delay_bins(pairs.t_call[c] - pairs.t_call[par], self.params)
        if self.params.board == "joint":
            key = key * self.n_bins + delay_bins(pairs.t_return[par] - pairs.t_return[c], self.params)
        return key.astype(np.int32) if self.cells < 1 << 31 else key

    def add(self, cells: np.ndarray, weight: np.ndarray) -> None:
        """Add ``weight`` to the cells (from ``cell_keys``)."""
        if self._dense is not None:
            self._dense += np.bincount(cells, weights=weight, minlength=self._dense.size)
            return
        self.add_sums(*cell_sums(cells, weight))

    def add_sums(self, keys: np.ndarray, sums: np.ndarray) -> None:
        """Add one chunk's sums per cell (``cell_sums``, made where the chunk was, a
        cluster's worker): in chunk order, exactly what ``add`` of its cells adds."""
        if self._dense is not None:
            # Each cell's sum is the one bincount makes, and a cell the chunk has not
            # gets 0 added there: the same table to the last bit.
            self._dense[keys] += sums
            return
        self._parts.append((keys, sums))

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a cluster's workers once learnt: its cells and scores, not the pairs'
        # heads (the size of the trace), the sums it was learnt from or its lookup
        # table (up to 128 MB, made again there from the cells).
        gone = {"_head": None, "_parts": [], "_dense": None, "_table": None, "_table_built": False}
        return {**self.__dict__, **gone}

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
            # SciPy's filters only here: a run that smooths nothing does not load them.
            from scipy.ndimage import gaussian_filter1d

            for side in (slice(0, half), slice(half, nb)):  # positive and negative delays apart
                dense[:, side] = gaussian_filter1d(
                    dense[:, side], self.params.smooth_bins, axis=1, mode="constant"
                )
            values = dense[row.ravel(), self.keys % nb]
        if self.params.density:
            width = bin_widths(self.params)
            if self.params.board == "joint":
                values = values / (width[(self.keys // nb) % nb] * width[self.keys % nb])
            else:
                values = values / width[self.keys % nb]
        self.values = values
        self._build_table()

    def _build_table(self) -> None:
        # A small key space gets a direct table: one gather per lookup instead of a search.
        space = int(self.keys.max()) + 1 if self.keys.size else 0
        table = None
        if space <= DENSE_TABLE:
            table = np.zeros(space)
            table[self.keys] = self.values
        self._table, self._table_built = table, True

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """Scores of cells (from ``cell_keys``); 0 for a cell nothing was added to."""
        if not self._table_built:  # sent to a worker without it
            self._build_table()
        if self._table is not None:
            if keys.size == 0 or int(keys.max()) < self._table.size:
                return self._table[keys]
            inside = keys < self._table.size
            return np.where(inside, self._table[np.where(inside, keys, 0)], 0.0)
        if self.keys.size == 0:
            return np.zeros(keys.size)
        at = np.minimum(np.searchsorted(self.keys, keys), self.keys.size - 1)
        return np.where(self.keys[at] == keys, self.values[at], 0.0)


@dataclass(frozen=True)
class Offer:
    """One chunk's candidates reduced per child, for :meth:`BestSoFar.take`: each
    child's best candidate in the chunk (``kids``, ``parent``, ``score``) and what the
    chunk adds to its children's totals (``total_kids``, ``total``; empty when the
    board keeps no totals). Made where the chunk was scored (a cluster's worker) and
    folded where the answer is kept, in chunk order, it gives exactly what
    :meth:`BestSoFar.offer` gives in one process. Indices are 32-bit where the pairs
    allow: this is what crosses the network every round."""

    kids: np.ndarray
    parent: np.ndarray
    score: np.ndarray
    total_kids: np.ndarray
    total: np.ndarray

    @classmethod
    def of(
        cls,
        c: np.ndarray,
        par: np.ndarray,
        score: np.ndarray,
        t_call: np.ndarray,
        *,
        mass: np.ndarray | None = None,
        totals: bool = True,
    ) -> Offer:
        """The offer of candidates ``(c, par)`` scored ``score`` (``t_call``: every pair's
        call time; ``mass``, default ``score``, is what the totals sum).

        >>> o = Offer.of(np.array([1, 1]), np.array([0, 2]), np.array([0.5, 0.7]), np.array([0, 5, 9]))
        >>> o.kids.tolist(), o.parent.tolist(), o.total.tolist()
        ([1], [2], [1.2])
        """
        n = t_call.size
        index = np.int32 if n < 1 << 31 else np.int64
        none = np.zeros(0, index)
        if c.size == 0:
            return cls(none, none, np.zeros(0), none, np.zeros(0))
        kids_t, total = none, np.zeros(0)
        if totals:
            # The same sums, in the same order, as the whole-length bincount of ``offer``.
            full = np.bincount(c, weights=score if mass is None else mass, minlength=n)
            kids_t = np.flatnonzero(np.bincount(c, minlength=n)).astype(index)
            total = full[kids_t]
        pick = best_parents(c, par, score, t_call, n)
        return cls(c[pick].astype(index), par[pick].astype(index), score[pick], kids_t, total)

    def moved(self, lo: int) -> Offer:
        """The offer with its pair indices moved by ``lo`` (64-bit): from a window of the
        pairs starting at pair ``lo`` to the trace's.

        >>> Offer.of(np.array([1]), np.array([0]), np.array([0.5]), np.array([0, 5])).moved(10).kids.tolist()
        [11]
        """
        if lo == 0:
            return self
        return Offer(
            self.kids.astype(np.int64) + lo,
            self.parent.astype(np.int64) + lo,
            self.score,
            self.total_kids.astype(np.int64) + lo,
            self.total,
        )


class BestSoFar:
    """Each child's best candidate over chunks: highest score, then earliest parent call."""

    def __init__(self, n: int, *, totals: bool = True) -> None:
        self.score = np.full(n, -np.inf)
        self.t_parent = np.full(n, np.iinfo(np.int64).max)
        self.parent = np.full(n, -1, np.int64)
        self.total = np.zeros(n)  # per child, the sum of its candidates' scores (if ``totals``)
        self.totals = totals

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
        if self.totals:
            self.total += np.bincount(c, weights=score if mass is None else mass, minlength=self.total.size)
        pick = best_parents(c, par, score, t_call, self.total.size)
        self._keep_better(c[pick], score[pick], t_call[par[pick]], par[pick])

    def take(self, offer: Offer, t_call: np.ndarray) -> None:
        """Fold a chunk's :class:`Offer` in (as ``offer`` would its candidates;
        ``t_call``: every pair's call time)."""
        if self.totals:
            self.total[offer.total_kids] += offer.total
        self._keep_better(offer.kids, offer.score, t_call[offer.parent], offer.parent)

    def _keep_better(self, kids: np.ndarray, s: np.ndarray, t: np.ndarray, p: np.ndarray) -> None:
        better = (s > self.score[kids]) | ((s == self.score[kids]) & (t < self.t_parent[kids]))
        kids, s, t, p = kids[better], s[better], t[better], p[better]
        self.score[kids], self.t_parent[kids], self.parent[kids] = s, t, p

    def result(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Parents (-1 for roots) and confidences (the winner's share of all scores)."""
        confidence = np.ones(self.parent.size)
        won = self.parent >= 0
        share = self.score[won] / np.where(self.total[won] > 0, self.total[won], 1.0)
        confidence[won] = np.where(self.total[won] > 0, share, 1.0 / np.maximum(counts[won], 1))
        return self.parent, confidence


@dataclass(frozen=True)
class Chunk:
    """Candidates of a chunk of parents: children, parents, scoreboard cells, and the
    sibling index for overlap penalties (None without them)."""

    c: np.ndarray
    par: np.ndarray
    cells: np.ndarray
    siblings: Siblings | None

    @property
    def nbytes(self) -> int:
        extra = 0 if self.siblings is None else self.siblings.nbytes
        return self.c.nbytes + self.par.nbytes + self.cells.nbytes + extra


def keep_budget(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int:
    """Bytes of candidates one process keeps between passes: a quarter of the memory
    available now (``MemAvailable``, or what a container's memory limit leaves, if
    less: cgroup v2's ``memory.max`` less ``memory.current``), at least 640 MB (also
    where that is not known).
    With 640 MB at most, a 20,000,000-message trace (about 2 GB of candidates) was
    enumerated again for every pass: 404.9 s, against 350.1 s with all of it kept, at a
    lower peak (6.5 against 7.6 GB).

    >>> keep_budget("/nonexistent") == 640 << 20
    True
    """
    try:
        with open(meminfo, encoding="ascii") as f:
            free = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) << 10
    except (OSError, StopIteration, ValueError, IndexError):
        return _KEEP_BYTES
    try:
        limit = Path(cgroup, "memory.max").read_text(encoding="ascii").strip()
        if limit != "max":
            used = int(Path(cgroup, "memory.current").read_text(encoding="ascii"))
            free = min(free, max(int(limit) - used, 0))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit to heed
    return max(_KEEP_BYTES, free // 4)


class CandidateChunks:
    """The (child, parent) candidate pairs, in chunks of parents, with their scoreboard
    cells, for the several passes over them: kept from the first pass when they fit
    ``budget`` bytes (about 20 per pair; default ``keep_budget()``), else enumerated
    again for each pass, so memory stays bounded on any trace."""

    def __init__(
        self, pairs: CallPairs, tol_ns: int, board: Scoreboard, siblings: bool, budget: int | None = None
    ) -> None:
        budget = keep_budget() if budget is None else budget
        self.pairs, self.tol_ns, self.board, self.budget = pairs, tol_ns, board, budget
        self.siblings = siblings
        self.kept: list[Chunk] | None = None
        #: The chunks' parent ranges ``(start, end)``, in order, once enumerated: the
        #: items a cluster's workers enumerate them from (``CandidatePlan.pairs_of``).
        self.ranges: list[tuple[int, int]] | None = None

    def __iter__(self) -> Iterator[Chunk]:
        if self.kept is not None:
            yield from self.kept
            return
        kept: list[Chunk] | None = []
        size = 0
        p = self.pairs
        ranges = []
        for span, c, par in CandidatePlan(p, self.tol_ns).chunks():
            ranges.append(span)
            sib = Siblings(par, p.t_call[c], p.t_return[c]) if self.siblings else None
            chunk = Chunk(c, par, self.board.cell_keys(p, c, par), sib)
            if kept is not None:
                size += chunk.nbytes
                if size <= self.budget:
                    kept.append(chunk)
                else:
                    kept = None
            yield chunk
        self.ranges = ranges
        if kept is not None:
            self.kept = kept

    def spans(self) -> list[tuple[int, int]]:
        """The chunks' parent ranges, in order (``ranges``), without enumerating the
        candidates when they are not known yet: what a cluster's windows are cut from."""
        if self.ranges is None:
            plan = CandidatePlan(self.pairs, self.tol_ns)
            self.ranges = [(s, e) for s, e in plan.ranges if int(plan.sizes[s:e].sum())]
        return self.ranges


class CandidatePlan:
    """How the candidate pairs are enumerated: the children sorted by (caller, call
    time), each parent's range among them, and the cut of the parents into chunks of
    about ``max_pairs`` enumerated pairs (``ranges``, as ``(start, end)`` parent
    indices). A chunk's pairs come from :meth:`pairs_of`, so a worker holding the call
    pairs enumerates the chunks it is given exactly as one process would.
    """

    def __init__(self, p: CallPairs, tol_ns: int, max_pairs: int | None = None) -> None:
        max_pairs = max_pairs or CHUNK_PAIRS
        n = len(p)
        self.p, self.tol_ns, self.n = p, tol_ns, n
        self.ranges: list[tuple[int, int]] = []
        if n == 0:
            return
        t0, shift = _time_frame(p, tol_ns)
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
            ckey, _time_key(p.callee, np.maximum(shifted_ns(p.t_call, -tol_ns), t0), t0, shift)[porder]
        )
        hi[porder] = np.searchsorted(
            ckey, _time_key(p.callee, shifted_ns(p.t_return, tol_ns), t0, shift)[porder], side="right"
        )
        self.lo, self.sizes, self.corder = lo, hi - lo, corder
        # Children's fields in key order: a chunk reads them in runs, not scattered.
        self.c_call, self.c_return, self.c_caller = p.t_call[corder], p.t_return[corder], p.caller[corder]
        # Cut the parents into chunks of about max_pairs enumerated pairs.
        total = int(self.sizes.sum())
        bounds = np.searchsorted(np.cumsum(self.sizes), np.arange(max_pairs, total + max_pairs, max_pairs))
        start = 0
        for end in [*np.unique(np.minimum(bounds + 1, n)).tolist(), n]:
            if end > start:
                self.ranges.append((start, end))
                start = end

    def pairs_of(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """The (child, parent) candidate pairs of parents ``start`` to ``end - 1``."""
        p, tol_ns = self.p, self.tol_ns
        par_idx = np.arange(start, end)
        counts = self.sizes[start:end]
        rep = np.repeat(par_idx, counts)
        pos = concat_ranges(self.lo[par_idx], counts)
        c = self.corder[pos]
        ok = (
            (self.c_call[pos] >= np.repeat(shifted_ns(p.t_call[par_idx], -tol_ns), counts))
            & (self.c_return[pos] <= np.repeat(shifted_ns(p.t_return[par_idx], tol_ns), counts))
            & (c != rep)
            & (self.c_caller[pos] == np.repeat(p.callee[par_idx], counts))
        )
        if p.key is not None and p.strict is not None:
            from infer.keys import allowed

            ok &= allowed(p.key, p.strict, c, rep)
        # Half the memory for the kept candidates when pair indices fit 32 bits.
        index = np.int32 if self.n < 1 << 31 else np.int64
        return c[ok].astype(index), rep[ok].astype(index)

    def chunks(self) -> Iterator[tuple[tuple[int, int], np.ndarray, np.ndarray]]:
        """``((start, end), children, parents)`` of every chunk with enumerated pairs."""
        for start, end in self.ranges:
            if int(self.sizes[start:end].sum()):
                yield (start, end), *self.pairs_of(start, end)


def cell_sums(cells: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``cells`` and each one's sum of ``weight``, added in the cells' order.

    >>> k, s = cell_sums(np.array([3, 1, 3]), np.array([0.5, 1.0, 0.25]))
    >>> k.tolist(), s.tolist()
    ([1, 3], [1.0, 0.75])
    """
    keys, inv = np.unique(cells, return_inverse=True)
    return keys, np.bincount(inv.ravel(), weights=weight, minlength=keys.size)


def candidates_by_parent(
    p: CallPairs, tol_ns: int, max_pairs: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(child, parent) candidate pairs in chunks of parents, each parent with all its
    candidate children: children of its node that start and end within its interval
    (widened by the tolerance)."""
    for _, c, par in CandidatePlan(p, tol_ns, max_pairs).chunks():
        yield c, par


def concat_ranges(start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The indices ``start[i], ..., start[i] + length[i] - 1`` for each i, end to end:
    the positions of many runs of a sorted array at once.

    >>> concat_ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist()
    [5, 6, 9, 10, 11]
    """
    ends = np.cumsum(length)
    return np.repeat(start - (ends - length), length) + np.arange(int(ends[-1]) if ends.size else 0)


def all_candidates(p: CallPairs, tol_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (child, parent) candidate pair at once, in the chunks' order (pair indices
    in 32 bits where they fit): for passes that filter them all again and again.

    >>> p = CallPairs(np.array([0, 1]), np.array([1, 2]), np.array([0, 1]), np.array([9, 5]),
    ...     *(np.zeros(2, np.int64),) * 2, 0, 0, 0)
    >>> [a.tolist() for a in all_candidates(p, 0)]
    [[1], [0]]
    """
    parts = [(c, par) for _, c, par in CandidatePlan(p, tol_ns).chunks()]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate([c for c, _ in parts]), np.concatenate([par for _, par in parts])


def best_parents(
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


def skew_tolerance(
    pairs: CallPairs, *, share: float = 0.005, factor: float = 2.5, cap_s: float = 0.1
) -> tuple[float, float]:
    """A clock-skew tolerance estimated from the trace, and the share of stray calls it
    rests on: ``(tolerance in seconds, share)``.

    A call made by a node that receives calls should lie within one of the calls into
    that node. Where the capture stamps calls on different hosts' clocks (each at its
    caller, say, with one host's clock off), many do not. When more than ``share`` of
    such calls lie outside every call into their node, the tolerance is ``factor``
    times the 95th percentile of the widening they need to fit the nearest one (at most
    ``cap_s``); otherwise 0. Measured (docs/inference.md): on the hotel recording stamped
    at each caller (a host 1.3 ms off) 10% of the calls stray and the estimate, 1 ms,
    takes the requests fully right from 48% to over 99%; on synthetic traces with a host
    5 or 30 ms off it finds 7.5 and 31-49 ms, where 3 and 30 ms are needed.

    Examples
    --------
    Node 1 is called during [10, 20] and calls node 2 during [9, 12], 1 unit early:

    >>> p = CallPairs(np.array([0, 1]), np.array([1, 2]), np.array([10, 9]),
    ...     np.array([20, 12]), np.arange(2), np.arange(2), 0, 0, 0)
    >>> skew_tolerance(p)
    (2.5e-09, 1.0)
    """
    n = len(pairs)
    if n == 0:
        return 0.0, 0.0
    n_nodes = int(max(pairs.caller.max(), pairs.callee.max())) + 1
    called = np.zeros(n_nodes, bool)
    called[pairs.callee] = True
    kids = np.flatnonzero(called[pairs.caller])
    if kids.size == 0:
        return 0.0, 0.0
    stray = _stray_widenings(pairs, kids, n_nodes)
    stray = stray[np.isfinite(stray)]
    fraction = stray.size / kids.size
    if fraction <= share:
        return 0.0, fraction
    return min(factor * float(np.percentile(stray, 95)) / 1e9, cap_s), fraction


def _stray_widenings(pairs: CallPairs, kids: np.ndarray, n_nodes: int) -> np.ndarray:
    """For each of ``kids`` (calls made by nodes that are called) lying outside every
    call into its node, the widening in ns it needs to fit the nearest one (inf where
    there is none to fit)."""
    tc, tr = pairs.t_call, pairs.t_return
    into = np.lexsort((tc, pairs.callee))
    starts = np.searchsorted(pairs.callee[into], np.arange(n_nodes + 1))
    kids = kids[np.argsort(pairs.caller[kids], kind="stable")]
    kid_starts = np.searchsorted(pairs.caller[kids], np.arange(n_nodes + 1))
    need = []
    for node in np.unique(pairs.caller[kids]).tolist():
        q = into[starts[node] : starts[node + 1]]
        c = kids[kid_starts[node] : kid_starts[node + 1]]
        latest = np.maximum.accumulate(tr[q])  # the latest return among calls started so far
        before = np.searchsorted(tc[q], tc[c], side="right") - 1
        has = before >= 0
        inside = has & (latest[np.maximum(before, 0)] >= tr[c])
        c, before, has = c[~inside], before[~inside], has[~inside]
        # Widening to fit: the end of a call started before it, or all of the next one.
        late = np.where(has, tr[c] - latest[np.maximum(before, 0)], np.inf)
        nxt = np.minimum(before + 1, q.size - 1)
        follows = before + 1 < q.size
        early = np.where(follows, np.maximum(tc[q[nxt]] - tc[c], tr[c] - tr[q[nxt]]), np.inf)
        need.append(np.maximum(np.minimum(late, early), 0))
    return np.concatenate(need) if need else np.zeros(0)
