"""Windows of the call pairs: a cluster task's share of a nesting inference.

Every stage of the nesting algorithm scores the candidates of chunks of parents
(``candidates.CandidatePlan``'s ranges). A parent's candidates start and end within its
call, widened by the clock-skew tolerance, so a run of parents ``s`` to ``e - 1`` needs
only the pairs called from the first one's call less the tolerance up to the latest
return plus it: a task gets that *window* of the pairs (their callers, callees and
times), the assignment it scores as indices into the window, and sends back its chunks'
results in window indices, which the driver moves to the trace's and folds in chunk
order. The overlap between windows is exact, not guessed, and the sums are the same, in
the same order, as in one process: the same answer to the last bit.

A worker keeps the chunks it enumerated (``KeptChunks``) for the next stage of the same
inference, up to a budget: its memory stays bounded whatever the trace's length.
"""

from __future__ import annotations

import collections
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from infer.callpairs import CallPairs
from infer.candidates import CandidatePlan, Chunk, Siblings
from tracefmt.cluster import split_evenly
from tracefmt.units import shifted_ns

__all__ = ["Homes", "KeptChunks", "Window", "Windows"]

#: Chunks of parents (each about ``CHUNK_PAIRS`` candidates) in one cluster task: tasks
#: of a bounded size keep a worker's memory flat whatever the trace's length.
TASK_CHUNKS = 8

#: What a worker keeps of its chunks. Less than one process keeps (``keep_budget()``): a
#: worker holds only its share, and a chunk not kept costs its enumeration again (about
#: a fifth of its scoring) in tasks that are a small part of a cluster run (the driver's
#: part is most of it: 41 of 282 s in maps on 20 M messages), while memory that does
#: not grow with the trace is what lets a worker take any share.
WORKER_KEEP_BYTES = 128 << 20

#: Pairs of a window whose parent lies outside it, and that parent's call and return times.
Far = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Homes:
    """The assignment a stage scores: each pair's parent (-1: a root) and that parent's
    call and return times, so that a window of the pairs is scored without the pairs
    its calls' parents lie in (in a window, -2: a parent outside it)."""

    parent: np.ndarray
    call: np.ndarray
    ret: np.ndarray

    @classmethod
    def of(cls, pairs: CallPairs, parent: np.ndarray, far: Far | None = None) -> Homes:
        """``far``: the pairs whose parent is not among ``pairs`` (-2), with that
        parent's call and return times."""
        h = np.maximum(parent, 0)
        call, ret = pairs.t_call[h], pairs.t_return[h]
        if far is not None:
            at, far_call, far_ret = far
            call[at], ret[at] = far_call, far_ret
        return cls(parent, call, ret)

    def window(self, lo: int, hi: int) -> tuple[np.ndarray, Far]:
        """Pairs ``lo`` to ``hi - 1``: their parents as indices into that window, and
        ``far`` (``of``) for those whose parent lies outside it. Four bytes a pair and
        twenty for each of the few outside, with the window's fields (24 bytes a pair):
        what crosses to a worker every stage."""
        p = self.parent[lo:hi]
        local = np.where((p >= lo) & (p < hi), p - lo, np.where(p < 0, -1, -2))
        index = np.int32 if hi - lo < 1 << 31 else np.int64
        far = np.flatnonzero(local == -2)
        return local.astype(index), (far.astype(index), self.call[lo:hi][far], self.ret[lo:hi][far])


@dataclass(frozen=True)
class Window:
    """A cluster task's share of a stage: consecutive chunks of parents (``spans``, pair
    indices) and the call pairs from ``lo`` on that their candidates lie in (``fields``:
    caller, callee, call and return times), with the assignment scored (``parent`` and
    ``far``, ``Homes.window``; None for a stage that scores none) and per-pair arrays of
    the stage's own (``data``, sliced to the window). ``token`` names the inference, for
    the chunks a worker keeps between stages."""

    token: int
    lo: int
    spans: tuple[tuple[int, int], ...]
    fields: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    parent: np.ndarray | None = None
    far: Far | None = None
    data: tuple[np.ndarray, ...] = ()
    #: The pairs' request keys and strictness (``CallPairs.key``, ``strict``), cut to
    #: the window; None without keys.
    keys: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def hi(self) -> int:
        """One past the window's last pair (a trace index)."""
        return self.lo + self.fields[0].size

    def pairs(self) -> CallPairs:
        """The window's call pairs, their node codes back in 64 bits (as one process has
        them: keys made from them must not wrap round, which NumPy 1's arithmetic on
        32-bit arrays would let them)."""
        none = np.zeros(0, np.int64)
        caller, callee, tc, tr = self.fields
        key, strict = self.keys if self.keys is not None else (None, None)
        codes = caller.astype(np.int64), callee.astype(np.int64)
        return CallPairs(*codes, tc, tr, none, none, 0, 0, 0, key, strict)

    def homes(self, pairs: CallPairs) -> Homes:
        return Homes.of(pairs, self.parents(), self.far)

    def parents(self) -> np.ndarray:
        """The assignment scored, as window indices in 64 bits (-1: a root, -2: a parent
        outside the window)."""
        assert self.parent is not None
        return self.parent.astype(np.int64)

    def chunks(self, pairs: CallPairs, tol_ns: int) -> Iterator[Chunk]:
        """The window's chunks (window indices, without scoreboard cells), as this
        worker kept them or enumerated again: each exactly as one process has it."""
        plan: CandidatePlan | None = None
        for span in self.spans:
            key = (self.token, span)
            ch = WORKER_CHUNKS.get(key)
            if ch is None:
                plan = plan or CandidatePlan(pairs, tol_ns)
                c, par = plan.pairs_of(span[0] - self.lo, span[1] - self.lo)
                ch = Chunk(c, par, np.zeros(0, np.int32), Siblings(par, pairs.t_call[c], pairs.t_return[c]))
                WORKER_CHUNKS.put(key, ch)
            yield ch


class Windows:
    """The windows of one inference on a cluster: its chunks of parents (``ranges``, in
    order) in groups of at most ``TASK_CHUNKS`` (and at least four per worker thread), each with
    the pairs its candidates lie in (``tol_ns``: the tolerance the candidates were found
    with). One set serves every stage, so a worker's kept chunks serve them all."""

    def __init__(self, pairs: CallPairs, ranges: list[tuple[int, int]], tol_ns: int, width: int) -> None:
        self.token = secrets.randbits(62)
        tc, tr = pairs.t_call, pairs.t_return
        self.windows: list[Window] = []
        for a, b in split_evenly(len(ranges), max(4 * width, -(-len(ranges) // TASK_CHUNKS))):
            if a == b:
                continue
            s, e = ranges[a][0], ranges[b - 1][1]
            lo = int(np.searchsorted(tc, shifted_ns(tc[s], -tol_ns), "left"))
            hi = max(int(np.searchsorted(tc, shifted_ns(tr[s:e].max(), tol_ns), "right")), e)
            # Node codes in 32 bits: a task's fields cross to a worker every stage.
            codes = pairs.caller[lo:hi].astype(np.int32), pairs.callee[lo:hi].astype(np.int32)
            fields = (*codes, tc[lo:hi], tr[lo:hi])
            keys = None
            if pairs.key is not None and pairs.strict is not None:
                keys = (pairs.key[lo:hi], pairs.strict[lo:hi])
            self.windows.append(Window(self.token, lo, tuple(ranges[a:b]), fields, keys=keys))

    def items(self, homes: Homes | None = None, data: tuple[np.ndarray, ...] = ()) -> list[Window]:
        """A stage's tasks: each window with the assignment scored (``homes``) and the
        per-pair arrays ``data``, both cut to the window."""
        out = []
        for w in self.windows:
            parent, far = homes.window(w.lo, w.hi) if homes is not None else (None, None)
            cut = tuple(a[w.lo : w.hi] for a in data)
            out.append(Window(w.token, w.lo, w.spans, w.fields, parent, far, cut, w.keys))
        return out


class KeptChunks:
    """A worker's enumerated chunks, kept between stages up to ``budget`` bytes: a
    worker's memory stays bounded whatever the trace's length. Once full, the chunks of
    other inferences (finished ones, or another client's) are let go, oldest first, and
    then new chunks are not kept but enumerated again each time: stages ask for a
    worker's chunks in the same order every time, and letting the oldest go would let
    go the very one asked for next (no chunk would ever be found)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.nbytes = 0
        self.dropped = 0  # chunks let go or not kept, to stay within the budget
        self._kept: collections.OrderedDict[tuple[int, tuple[int, int]], Chunk] = collections.OrderedDict()
        self._lock = threading.Lock()  # a worker may run tasks in several threads

    def get(self, key: tuple[int, tuple[int, int]]) -> Chunk | None:
        with self._lock:
            return self._kept.get(key)

    def put(self, key: tuple[int, tuple[int, int]], chunk: Chunk) -> None:
        with self._lock:
            if key in self._kept:
                return
            others = [k for k in self._kept if k[0] != key[0]]
            while others and self.nbytes + chunk.nbytes > self.budget:
                self.nbytes -= self._kept.pop(others.pop(0)).nbytes
                self.dropped += 1
            if self.nbytes + chunk.nbytes > self.budget:
                self.dropped += 1
                return
            self._kept[key] = chunk
            self.nbytes += chunk.nbytes


WORKER_CHUNKS = KeptChunks(WORKER_KEEP_BYTES)
