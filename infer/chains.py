"""Chain rounds of the nesting algorithm: parents chosen by the likelihood of every
node's chains of events.

A node that serves calls one at a time turns each event it receives into exactly one
event it sends: a call it receives starts its first child call (or, with no children,
its return); each child's return starts the next child call (or, after the last one,
its own return). So a parent assignment splits every node's events into chains
``P called -> C1 called, C1 returned -> C2 called, ..., Ck returned -> P returns``,
and each link of a chain is an *edge*: an input event, an output event and the delay
between them. Every edge is scored by ``P(output kind and peer, delay | input kind
and peer)`` at its node, learnt from the previous assignment (hard EM); the
assignment's log-likelihood is the sum over its edges.

Calls a node makes at once (fan-out: a call made before every earlier sibling has
returned) form a *concurrent group*. Within a group each call follows the one sent
before it (``C1 sent -> C2 called``, the spread of the group), and the group is left
from its *latest* return (the node waits for all of them): ``P called -> C1 called,
C1 sent -> C2 called, max(C1, C2) returned -> C3 called, ...``. Whether a node sends
another call while one is out is itself learnt, per node and peer, and charged: a
node never seen to fan out pays for grouping calls.

A round scores each candidate parent of each child by the change in the likelihood of
its parent's whole chain should the child sit there (for the parent it has: the
chain with it less the chain without it); a swap of two calls to one node, each
taking the other's place (its *occupant*), by the change of both chains. A child moves
to a better parent, or two children swap. A move or swap is applied only when no
better one touches either of its parents, so the moves of a round never interact:
each raises the likelihood by exactly its gain. Rounds stop when nothing moves or
the gain is below ``chain_min_gain``.

Why: the per-child scoreboards let a parent keep no children at all while another
collects them (an application server answering a web server without the database
query it always makes, and a neighbour with three). The chain likelihood charges the
first for a childless visit its node never makes and the second for a gap its node
never leaves.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from infer.callpairs import CallPairs
from infer.candidates import (
    DENSE_TABLE,
    BestSoFar,
    CandidateChunks,
    Chunk,
    Offer,
    bin_widths,
    delay_bins,
)
from infer.params import NestingParams
from infer.windows import Homes, Window, Windows
from tracefmt import ParameterError
from tracefmt.cluster import Runner, side_by_side
from tracefmt.compiled import python_twin
from tracefmt.patterns import sibling_groups
from tracefmt.units import shifted_ns

__all__ = [
    "ChainModel",
    "answer_log_odds",
    "chain_edges",
    "chain_log_likelihood",
    "chain_rounds",
    "chain_stages",
    "neighbourhood_log_odds",
]

# An edge no chain of the previous round had scores this far (in log units) below the
# least likely learnt edge: finite, so that two unseen alternatives still compare on
# the rest.
_UNSEEN_BELOW = np.log(1e6)
#: Keys spanning at most this many cells, or ``_FLAT_PER_PAIR`` per call pair (and
#: never over ``DENSE_TABLE``), get a table of every cell (one gather per lookup,
#: rebuilt with each round's model); more get rows of the learnt heads only (two
#: gathers). Measured (``benchmarks/nesting.py --before``): rows took the default on a
#: gateway trace of 8,000 messages from 1.10 to 0.35 s (keys over 8.6 M cells, 4,000
#: pairs); on multitier at 200,000 messages (2.5 M cells, 100,000 pairs) they looked
#: 0.87x in one run and were within noise in controlled reruns: the table stays there.
_FLAT_CELLS = 1 << 20
_FLAT_PER_PAIR = 32
#: ``relearn`` counts the whole assignment again once more than 1 in this many calls moved.
_RELEARN_MOVED = 4
# Event kinds: a call received (at its callee), a return received (at its caller), and a
# call sent (at its caller), which the next of a group of calls made at once follows.
_CALL, _RETURN, _SENT = 0, 1, 2
# The model is learnt from the assignment it then judges; spreading each learnt cell
# over a bin either side keeps it from fitting that assignment's noise (measured on
# multitier at parallelism 42: 89% of links right, against 88% unsmoothed and 87% at
# two bins).
_SMOOTH_BINS = 1.0


def chain_edges(pairs: CallPairs, parent: np.ndarray) -> tuple[np.ndarray, ...]:
    """The edges of the chains that ``parent`` implies, as four arrays
    ``(in_kind, in_pair, out_kind, out_pair)``: kind 0 is a call received (the pair's
    call, at its callee), 1 a return received (at its caller), 2 a call sent (at its
    caller). Children of one parent follow each other in call order.

    Examples
    --------
    A call (0) with two children (1, 2), one after the other, the second a leaf:

    >>> from infer.callpairs import CallPairs
    >>> p = CallPairs(np.array([0, 1, 1]), np.array([1, 2, 3]), np.array([0, 1, 4]),
    ...     np.array([9, 3, 6]), np.arange(3), np.arange(3), 0, 0, 0)
    >>> sorted(zip(*(a.tolist() for a in chain_edges(p, np.array([-1, 0, 0])))))
    [(0, 0, 0, 1), (0, 1, 1, 1), (0, 2, 1, 2), (1, 1, 0, 2), (1, 2, 1, 0)]

    Called at once instead (2 leaves while 1 is out, and returns first): 2 follows
    1's call, and 0 returns after the latest return, 1's.

    >>> p = CallPairs(np.array([0, 1, 1]), np.array([1, 2, 3]), np.array([0, 1, 2]),
    ...     np.array([9, 6, 4]), np.arange(3), np.arange(3), 0, 0, 0)
    >>> sorted(zip(*(a.tolist() for a in chain_edges(p, np.array([-1, 0, 0])))))
    [(0, 0, 0, 1), (0, 1, 1, 1), (0, 2, 1, 2), (1, 1, 1, 0), (2, 1, 0, 2)]
    """
    n = len(pairs)
    kid = np.flatnonzero(parent >= 0)
    order = kid[np.lexsort((pairs.t_call[kid], parent[kid]))]
    return _sequence_edges(pairs, np.arange(n), order, parent[order])[:4]


def _sequence_edges(
    pairs: CallPairs, owner: np.ndarray, kids: np.ndarray, seq: np.ndarray
) -> tuple[np.ndarray, ...]:
    """The edges of the chains of calls ``owner[s]`` whose children are ``kids[seq == s]``
    (``seq`` non-decreasing, children in call order within), as ``(in_kind, in_pair,
    out_kind, out_pair, sequence)``; a sequence without children is the edge from its
    owner's call to its return."""
    tc, tr = pairs.t_call, pairs.t_return
    k = kids.size
    n_seq = owner.size
    first = np.ones(k, bool)
    first[1:] = seq[1:] != seq[:-1]
    last = np.ones(k, bool)
    last[:-1] = seq[1:] != seq[:-1]
    new = sibling_groups(seq, tc[kids], tr[kids])[0]
    gstart = np.flatnonzero(new)
    gend = np.append(gstart[1:], k)
    # The group's latest return (the earliest such child on a tie) leads on.
    t_ret = tr[kids]
    group = np.cumsum(new) - 1
    gmax = np.maximum.reduceat(t_ret, gstart) if k else t_ret
    latest = np.minimum.reduceat(np.where(t_ret == gmax[group], np.arange(k), k), gstart) if k else gstart
    g_first = first[gstart]
    g_last = last[gend - 1] if k else g_first
    inner = np.flatnonzero(~new)
    empty = np.ones(n_seq, bool)
    empty[seq] = False
    lone = np.flatnonzero(empty)
    # Group entries, links within groups, exits, childless owners.
    entry_from = np.where(g_first, 0, np.concatenate([[0], latest[:-1]]))
    in_kind = np.concatenate(
        [
            np.where(g_first, _CALL, _RETURN),
            np.full(inner.size, _SENT),
            np.full(int(g_last.sum()), _RETURN),
            np.full(lone.size, _CALL),
        ]
    )
    in_pair = np.concatenate(
        [
            np.where(g_first, owner[seq[gstart]], kids[entry_from]),
            kids[inner - 1],
            kids[latest[g_last]],
            owner[lone],
        ]
    )
    out_kind = np.concatenate(
        [
            np.full(gstart.size + inner.size, _CALL),
            np.full(int(g_last.sum()) + lone.size, _RETURN),
        ]
    )
    out_pair = np.concatenate([kids[gstart], kids[inner], owner[seq[gstart[g_last]]], owner[lone]])
    sequence = np.concatenate([seq[gstart], seq[inner], seq[gstart[g_last]], lone])
    return in_kind, in_pair, out_kind, out_pair, sequence


def _smooth(keys: np.ndarray, prob: np.ndarray, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's probability spread over its neighbouring delay bins by a Gaussian of
    ``_SMOOTH_BINS`` (positive and negative delays kept apart), sparsely: a few
    neighbours per learnt cell, never a dense row per head."""
    reach = int(np.ceil(3 * _SMOOTH_BINS))
    offsets = np.arange(-reach, reach + 1)
    weights = np.exp(-0.5 * (offsets / _SMOOTH_BINS) ** 2)
    weights /= weights.sum()
    half = nb // 2
    moved = (keys % nb % half)[:, None] + offsets
    inside = (moved >= 0) & (moved < half)
    spread, inv = np.unique((keys[:, None] + offsets)[inside], return_inverse=True)
    return spread, np.bincount(inv.ravel(), weights=(prob[:, None] * weights)[inside], minlength=spread.size)


#: Below this many call pairs the chain rounds' loops run as plain Python
#: (``tracefmt.compiled.python_twin``): loading numba, about a second, costs more than
#: they take there (docs/nesting-reference.md, "Small traces").
PLAIN_BELOW = 1_500


def _kernels(n_pairs: int) -> ModuleType:
    """The chain rounds' loops (``infer._chainjit``) for a trace of ``n_pairs`` call pairs:
    compiled, or below ``PLAIN_BELOW`` as Python."""
    if n_pairs < PLAIN_BELOW:
        return python_twin("infer._chainjit")
    import infer._chainjit as kernels  # numba is imported when chain rounds run

    return kernels


@functools.lru_cache(maxsize=8)
def _bin_edges(params: NestingParams) -> np.ndarray:
    """The delay bins' lower edges (``infer._chainjit.bin_edges``, a plain function),
    once per setting."""
    return python_twin("infer._chainjit").bin_edges(lambda d: delay_bins(d, params), params.n_bins)


def _fan_out_choice(heads: np.ndarray, count: np.ndarray, n_nodes: int) -> np.ndarray:
    """Log-probabilities, per (node, peer), that a call the node made to the peer is
    followed by the next call while it is out, or only after it returned; learnt from
    the edges' input heads and their counts, with one pseudo-count each way (Laplace),
    so that a node never seen to fan out is charged for doing so.

    Without this charge a fan-out link would cost nothing: its head (a call sent) is
    always followed by a call, so its probability given the head is 1, and wrong
    assignments could group any overlapping calls for free.
    """
    seen = np.zeros(n_nodes * n_nodes * 3)
    seen[heads] = count
    per_pair = seen.reshape(-1, 3)
    returned, sent = per_pair[:, _RETURN] + 1.0, per_pair[:, _SENT] + 1.0
    out = np.zeros_like(per_pair)
    out[:, _RETURN] = np.log(returned / (returned + sent))
    out[:, _SENT] = np.log(sent / (returned + sent))
    return out.ravel()


@dataclass
class ChainModel:
    """Log-densities of edges per cell: (node, input kind and peer, output kind and peer,
    delay bin), normalised per (node, input kind and peer) and by the bin's width."""

    params: NestingParams
    n_nodes: int
    keys: np.ndarray
    values: np.ndarray
    #: Every cell's log-density by key (``unseen`` for cells not learnt) where the keys
    #: span few cells for the pairs (``_FLAT_CELLS``, ``_FLAT_PER_PAIR``); else the learnt
    #: cells as rows of delay bins, one row per output head (a key less its bin) that has
    #: any, and ``slot`` gives each head's row (-1: never learnt). None where the heads or
    #: the rows' cells are too many (``DENSE_TABLE``): then a lookup searches ``keys``.
    table: np.ndarray | None
    unseen: float = -_UNSEEN_BELOW
    slot: np.ndarray | None = None
    #: Whether ``table`` and ``slot`` were built (a worker rebuilds them once).
    tables_built: bool = False
    #: Per input head (node, peer, kind): the log-probability of the choice a call's
    #: link makes at its caller, the next call leaving while it is out (fan-out) or
    #: after it returned; 0 for received calls, which make no such choice.
    choice: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: The delay bins' lower edges in ns, for the compiled loop (``infer._chainjit``).
    edges: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: ``table`` with every cell's fan-out choice added, for the compiled loop.
    kernel_table: np.ndarray | None = None
    #: The log-likelihood of the assignment the model was learnt from, under it.
    own_log_likelihood: float = 0.0
    #: The call pairs it was learnt from: what sizes its tables, on a worker too, where
    #: a task holds only a window of them.
    n_pairs: int = 0
    #: The cells counted in the assignment it was learnt from, and their counts
    #: (``relearn`` starts from them).
    counted: tuple[np.ndarray, np.ndarray] | None = None

    def cells(
        self,
        pairs: CallPairs,
        in_kind: np.ndarray,
        in_pair: np.ndarray,
        out_kind: np.ndarray,
        out_pair: np.ndarray,
    ) -> np.ndarray:
        n = np.int64(self.n_nodes)  # keys in 64 bits whatever the codes' type
        node = np.where(in_kind == _CALL, pairs.callee[in_pair], pairs.caller[in_pair])
        in_peer = np.where(in_kind == _CALL, pairs.caller[in_pair], pairs.callee[in_pair])
        out_peer = np.where(out_kind == _CALL, pairs.callee[out_pair], pairs.caller[out_pair])
        t_in = np.where(in_kind == _RETURN, pairs.t_return[in_pair], pairs.t_call[in_pair])
        t_out = np.where(out_kind == _CALL, pairs.t_call[out_pair], pairs.t_return[out_pair])
        head = (((node * n + in_peer) * 3 + in_kind) * n + out_peer) * 2 + out_kind
        return head * (2 * self.params.n_bins) + delay_bins(t_out - t_in, self.params)

    @classmethod
    def learn(cls, pairs: CallPairs, parent: np.ndarray, params: NestingParams, n_nodes: int) -> ChainModel:
        model = cls(params, n_nodes, np.zeros(0, np.int64), np.zeros(0), None)
        keys, count = np.unique(model.cells(pairs, *chain_edges(pairs, parent)), return_counts=True)
        return cls._of_counts(keys, count, params, n_nodes, len(pairs))

    def relearn(self, pairs: CallPairs, before: np.ndarray, after: np.ndarray) -> ChainModel:
        """The model :meth:`learn` gives for ``after``, from this one, learnt from
        ``before``: only the chains of the calls whose children changed are counted
        again (a chain depends on nothing else), their old edges taken off and their new
        ones added. Counts are integers, so the model is the same to the last bit;
        after the first rounds few calls move, and this costs a fraction of a learn.

        >>> from infer.callpairs import CallPairs
        >>> p = CallPairs(np.array([0, 1, 1]), np.array([1, 2, 2]), np.array([0, 1, 4]),
        ...     np.array([9, 3, 6]), np.arange(3), np.arange(3), 0, 0, 0)
        >>> a, b = np.array([-1, 0, 0]), np.array([-1, 0, -1])
        >>> m = ChainModel.learn(p, a, NestingParams(), 3).relearn(p, a, b)
        >>> bool(np.array_equal(m.values, ChainModel.learn(p, b, NestingParams(), 3).values))
        True
        """
        changed = np.flatnonzero(before != after)
        # A model sent to a worker keeps no counts; and where many calls moved, counting
        # their chains twice (taken off, added back) costs more than counting all once
        # (an eighth moved: 0.26 s against 0.85 s on a million call pairs; half: 0.05 s
        # against 0.03 s on 100,000).
        if self.counted is None or changed.size > len(pairs) // _RELEARN_MOVED:
            return ChainModel.learn(pairs, after, self.params, self.n_nodes)
        owners = np.unique(np.concatenate([before[changed], after[changed]]))
        owners = owners[owners >= 0]
        if owners.size == 0:
            return self
        taken, added = self._chain_cells(pairs, owners, before), self._chain_cells(pairs, owners, after)
        keys, inverse = np.unique(np.concatenate([self.counted[0], taken, added]), return_inverse=True)
        weights = np.concatenate([self.counted[1], -np.ones(taken.size), np.ones(added.size)])
        count = np.rint(np.bincount(inverse.ravel(), weights=weights)).astype(np.int64)
        kept = count > 0
        return ChainModel._of_counts(keys[kept], count[kept], self.params, self.n_nodes, self.n_pairs)

    def _chain_cells(self, pairs: CallPairs, owners: np.ndarray, parent: np.ndarray) -> np.ndarray:
        """The cells of the chains of the calls ``owners`` (sorted) under ``parent``."""
        mine = np.zeros(len(pairs), bool)
        mine[owners] = True
        kid = np.flatnonzero((parent >= 0) & mine[np.maximum(parent, 0)])
        kid = kid[np.lexsort((pairs.t_call[kid], parent[kid]))]
        seq = np.searchsorted(owners, parent[kid])
        return self.cells(pairs, *_sequence_edges(pairs, owners, kid, seq)[:4])

    @classmethod
    def _of_counts(
        cls, keys: np.ndarray, count: np.ndarray, params: NestingParams, n_nodes: int, n_pairs: int
    ) -> ChainModel:
        """The model of the edges counted per cell (``keys`` sorted and distinct) of an
        assignment of ``n_pairs`` call pairs."""
        model = cls(params, n_nodes, np.zeros(0, np.int64), np.zeros(0), None)
        model.counted = (keys, count)
        learnt_keys, learnt_count = keys, count
        nb = 2 * params.n_bins
        # (node, input kind and peer) is the key's head less the output's part.
        heads, inv = np.unique(keys // nb // (2 * n_nodes), return_inverse=True)
        total = np.bincount(inv.ravel(), weights=count, minlength=heads.size)
        keys, prob = _smooth(keys, count / total[inv.ravel()], nb)
        model.keys = keys
        model.values = np.log(prob / bin_widths(params)[keys % nb])
        if model.values.size:
            model.unseen = float(model.values.min()) - _UNSEEN_BELOW
        model.n_pairs = n_pairs
        model._build_table(model.n_pairs)
        model.choice = _fan_out_choice(heads, total, n_nodes)
        # The assignment's own log-likelihood, from its edges' cells counted above.
        model.own_log_likelihood = float((learnt_count * model.lookup(learnt_keys)).sum())
        return model

    def _head_space(self) -> int | None:
        """Output heads (node, input kind and peer, output kind and peer) a key can
        have, or None when there are too many for a row index per head."""
        space = 6 * self.n_nodes**3
        return space if self.keys.size and space <= DENSE_TABLE else None

    def _build_table(self, n_pairs: int) -> None:
        """``table`` (and ``slot``): one or two gathers per lookup instead of a search.
        Where the keys span many cells for the pairs only the learnt heads get a row: a
        table of every cell up to the largest key (up to 16 M, 128 MB, rebuilt with each
        round's model) cost more than the lookups it served, 3.5 of 4.1 s on an
        8,000-message trace."""
        space = self._head_space()
        self.table = self.slot = None
        self.tables_built = True
        if space is None:
            return
        flat = int(self.keys.max()) + 1
        if flat <= min(DENSE_TABLE, max(_FLAT_CELLS, _FLAT_PER_PAIR * n_pairs)):
            self.table = np.full(flat, self.unseen)
            self.table[self.keys] = self.values
            return
        nb = 2 * self.params.n_bins
        heads, row = np.unique(self.keys // nb, return_inverse=True)
        if heads.size * nb > DENSE_TABLE:  # fine bins over many heads: search
            return
        self.slot = np.full(space, -1, np.int64)
        self.slot[heads] = np.arange(heads.size)
        self.table = np.full(heads.size * nb, self.unseen)
        self.table[row.ravel() * nb + self.keys % nb] = self.values

    def __getstate__(self) -> dict[str, Any]:
        # Sent to a cluster's workers every round: the tables are rebuilt there, where
        # ``kernel_arguments`` needs them (a lookup without them searches the learnt
        # cells, with the same values).
        return {
            **self.__dict__,
            **dict.fromkeys(("table", "slot", "kernel_table", "counted")),
            "tables_built": False,
        }

    def spliced_likelihood(
        self,
        pairs: CallPairs,
        owner: np.ndarray,
        group: np.ndarray,
        c: np.ndarray,
        members: _Members,
        insert: np.ndarray | None = None,
        insert_rank: np.ndarray | None = None,
        remove_rank: np.ndarray | None = None,
    ) -> np.ndarray:
        """``chain_likelihood`` of the chains ``members.spliced`` describes (the members
        of each ``group`` less one, with one candidate put in), by the compiled loop."""
        spliced_likelihood = _kernels(self.n_pairs).spliced_likelihood
        s = owner.size
        none = np.full(s, -1, np.int64)
        i64 = np.int64
        per_entry = (
            owner.astype(i64, copy=False),
            group.astype(i64, copy=False),
            none if insert is None else insert.astype(i64, copy=False),
            none if insert_rank is None else insert_rank.astype(i64, copy=False),
            none if remove_rank is None else remove_rank.astype(i64, copy=False),
        )
        return side_by_side(
            spliced_likelihood,
            per_entry,
            c.astype(i64, copy=False),
            members.pos.astype(i64, copy=False),
            members.start.astype(i64, copy=False),
            members.count.astype(i64, copy=False),
            *self.kernel_arguments(pairs),
        )

    def tuples_likelihood(
        self, pairs: CallPairs, owner: np.ndarray, kids: np.ndarray, start: np.ndarray
    ) -> np.ndarray:
        """``chain_likelihood`` of each call ``owner[s]`` with the children
        ``kids[start[s]:start[s + 1]]`` (in call order), by the compiled loop."""
        tuples_likelihood = _kernels(self.n_pairs).tuples_likelihood
        i64 = np.int64
        return tuples_likelihood(
            owner.astype(i64, copy=False),
            kids.astype(i64, copy=False),
            start.astype(i64, copy=False),
            *self.kernel_arguments(pairs),
        )

    def kernel_arguments(self, pairs: CallPairs) -> tuple:
        """The pairs' fields and the model's tables, as the compiled loops take them
        (made here, on first use: a model learnt only for a likelihood needs none)."""
        if self.edges.size == 0:
            self.edges = _bin_edges(self.params)
        if not self.tables_built:
            self._build_table(self.n_pairs or len(pairs))
        if self.table is not None and self.kernel_table is None:
            # Every cell with its input head's fan-out choice added (``lookup``'s sum).
            nb = 2 * self.params.n_bins
            if self.slot is None:  # flat: an input head's cells are one block of the keys
                block = nb * 2 * self.n_nodes
                reached = -(-self.table.size // block)  # input heads up to the largest key
                self.kernel_table = np.repeat(self.choice[:reached], block)[: self.table.size] + self.table
            else:
                heads = np.flatnonzero(self.slot >= 0)  # in row order
                rows = self.table.reshape(-1, nb)
                self.kernel_table = (rows + self.choice[heads // (2 * self.n_nodes)][:, None]).ravel()
        i64 = np.int64
        return (
            pairs.t_call,
            pairs.t_return,
            pairs.caller.astype(i64, copy=False),
            pairs.callee.astype(i64, copy=False),
            i64(self.n_nodes),
            self.edges,
            i64(self.params.n_bins),
            np.zeros(0) if self.kernel_table is None else self.kernel_table,
            np.zeros(0, i64) if self.slot is None else self.slot,
            self.keys.astype(i64, copy=False),
            self.values,
            float(self.unseen),
            self.choice,
        )

    def lookup(self, cells: np.ndarray) -> np.ndarray:
        choice = self.choice[cells // (2 * self.params.n_bins) // (2 * self.n_nodes)]
        if self.table is not None and self.slot is None:
            inside = cells < self.table.size
            return choice + np.where(inside, self.table[np.where(inside, cells, 0)], self.unseen)
        if self.table is not None:
            nb = 2 * self.params.n_bins
            row = self.slot[cells // nb]
            return choice + np.where(row >= 0, self.table[np.maximum(row, 0) * nb + cells % nb], self.unseen)
        if self.keys.size == 0:
            return choice + self.unseen
        at = np.minimum(np.searchsorted(self.keys, cells), self.keys.size - 1)
        return choice + np.where(self.keys[at] == cells, self.values[at], self.unseen)

    def chain_likelihood(
        self, pairs: CallPairs, owner: np.ndarray, kids: np.ndarray, seq: np.ndarray
    ) -> np.ndarray:
        """Log-likelihood of the chain of each call ``owner[s]`` with the children
        ``kids[seq == s]`` (in call order within each sequence)."""
        in_kind, in_pair, out_kind, out_pair, sequence = _sequence_edges(pairs, owner, kids, seq)
        score = self.lookup(self.cells(pairs, in_kind, in_pair, out_kind, out_pair))
        return np.bincount(sequence, weights=score, minlength=owner.size)


@dataclass
class _Proposals:
    """Moves of one round: ``child`` goes to ``dest`` from ``source`` (its parent, -1
    for none) and, for a swap, ``other`` (-1 for none) goes from ``dest`` to ``source``;
    a run move takes ``child`` and the ``count - 1`` siblings called after it at once;
    ``gain`` is the rise in log-likelihood, ``score`` and ``other_score`` the moved
    children's scores at their new parents (a run's: its gain)."""

    gain: np.ndarray
    source: np.ndarray
    dest: np.ndarray
    child: np.ndarray
    other: np.ndarray
    score: np.ndarray
    other_score: np.ndarray
    #: Children moved: ``child`` and the siblings called after it, together (1: alone).
    count: np.ndarray

    @staticmethod
    def join(parts: list[_Proposals]) -> _Proposals:
        return _Proposals(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in _Proposals.__dataclass_fields__)
        )

    def independent(self, n: int) -> _Proposals:
        """The proposals that no better one shares a parent with (ties: the first)."""
        g = np.flatnonzero(self.gain > 0)
        rank = np.empty(g.size, np.int64)
        rank[np.lexsort((g, -self.gain[g]))] = np.arange(g.size)
        src, dst = self.source[g], self.dest[g]
        first = np.full(n + 1, g.size)  # index n: no parent
        np.minimum.at(first, dst, rank)
        np.minimum.at(first, np.where(src >= 0, src, n), np.where(src >= 0, rank, g.size))
        keep = g[(first[dst] == rank) & ((src < 0) | (first[np.maximum(src, 0)] == rank))]
        return _Proposals(*(getattr(self, f)[keep] for f in _Proposals.__dataclass_fields__))


def _round(
    pairs: CallPairs,
    chunks: CandidateChunks,
    parent: np.ndarray,
    model: ChainModel,
    runner: Runner | None = None,
    windows: Windows | None = None,
) -> tuple[_Proposals, np.ndarray, np.ndarray]:
    """Score every candidate; propose each child's best move, the swaps of two calls to
    one node that sit in each other's place and the moves of runs of calls made at once
    (every swap and run, whatever its gain). Also returns each child's score at its
    parent and the sum of exp(score) over its other candidates (for confidences).

    With a ``runner`` of more than one worker, the chunks are scored by its tasks, a
    window of the pairs each (``windows``, made once per inference)."""
    tally = _scored(pairs, chunks, parent, model, runner, windows)
    parts = [_best_moves(tally, parent)]
    if tally.swaps:
        parts.append(_swap_moves(tally, parent))
    parts.append(_run_moves(pairs, parent, model, tally.away.parent, chunks.tol_ns))
    return _Proposals.join(parts), tally.here, tally.away.total


def _scored(
    pairs: CallPairs,
    chunks: CandidateChunks,
    parent: np.ndarray,
    model: ChainModel,
    runner: Runner | None,
    windows: Windows | None,
) -> _Tally:
    """Every chunk's candidates scored and tallied, here or by ``runner``'s tasks."""
    tally = _Tally(len(pairs))
    homes = Homes.of(pairs, parent)
    if runner is None or runner.width <= 1:
        for ch in chunks:
            _score_chunk(pairs, ch, homes, model, chunks.tol_ns, tally)
        return tally
    # The chunks' scoring on the cluster's workers, folded here in chunk order: the
    # same sums in the same order as above, so the same answer to the last bit.
    items = (windows or Windows(pairs, chunks.spans(), chunks.tol_ns, runner.width)).items(homes)
    scored = runner.map(_score_window, items, model=model, tol_ns=chunks.tol_ns)
    for w, tallies in zip(items, scored, strict=True):
        for chunk_tally in tallies:
            chunk_tally.fold_into(tally, pairs.t_call, w.lo)
    return tally


def _best_moves(tally: _Tally, parent: np.ndarray) -> _Proposals:
    """Each child's move to its best parent, where that is not the one it has."""
    best, here = tally.best, tally.here
    # Roots stay roots: the only ones with candidates are calls cut out of a loop.
    kid = np.flatnonzero((parent >= 0) & (best.parent >= 0) & (best.parent != parent))
    return _Proposals(
        best.score[kid] - here[kid],
        parent[kid],
        best.parent[kid],
        kid,
        np.full(kid.size, -1),
        best.score[kid],
        np.zeros(kid.size),
        np.ones(kid.size, np.int64),
    )


def _swap_moves(tally: _Tally, parent: np.ndarray) -> _Proposals:
    """The swaps of two calls to one node that sit in each other's place, each once
    (from its lower child), whatever its gain."""
    n, here = parent.size, tally.here
    child, dest, other, score = (np.concatenate(a) for a in zip(*tally.swaps, strict=True))
    key = child * n + dest
    order = np.argsort(key, kind="stable")
    key = key[order]
    # The same swap seen from the other side: ``other`` into the child's parent,
    # with the child as its occupant.
    want = other * n + parent[child]
    at = np.minimum(np.searchsorted(key, want), max(key.size - 1, 0))
    back = order[at]
    ok = (key[at] == want) & (other[back] == child) & (parent[child] >= 0) & (child < other)
    gain = (score - here[other]) + (score[back] - here[child])
    i = np.flatnonzero(ok)
    return _Proposals(
        gain[i],
        parent[child[i]],
        dest[i],
        child[i],
        other[i],
        score[i],
        score[back[i]],
        np.ones(i.size, np.int64),
    )


#: The longest run of calls made at once that moves as one.
_LONGEST_RUN = 4


def _run_moves(
    pairs: CallPairs, parent: np.ndarray, model: ChainModel, away: np.ndarray, tol_ns: int
) -> _Proposals:
    """Proposals to move a run of siblings called at once (2 to ``_LONGEST_RUN`` calls
    in a row of one concurrent group) to the best other parent of its first call
    (``away``), where that parent's time span holds them all, with their exact gains.

    The calls a visit fans out belong together: a wrong parent that took another
    visit's fan-out cannot give it back one call at a time, since every single move
    breaks the group it leaves and the one it joins.
    """
    tc, tr = pairs.t_call, pairs.t_return
    order, start, count = _children_index(pairs, parent)
    none = _Proposals(*(np.zeros(0, np.int64),) * 8)
    if order.size < 2:
        return none
    new_group = sibling_groups(parent[order], tc[order], tr[order])[0]
    groups_so_far = np.cumsum(new_group)
    q = away[order]
    props = []
    ret = tr[order]
    latest = ret
    for length in range(2, _LONGEST_RUN + 1):
        end = np.minimum(np.arange(order.size) + length - 1, order.size - 1)
        shifted = np.zeros_like(ret)  # the return of the run's last call
        shifted[: max(ret.size - length + 1, 0)] = ret[length - 1 :]
        latest = np.maximum(latest, shifted)
        qq = np.maximum(q, 0)
        ok = (np.arange(order.size) + length - 1 < order.size) & (groups_so_far[end] == groups_so_far)
        ok &= (q >= 0) & (tc[order] >= shifted_ns(tc[qq], -tol_ns)) & (latest <= shifted_ns(tr[qq], tol_ns))
        i = np.flatnonzero(ok)
        if i.size:
            props.append((parent[order[i]], q[i], i, np.full(i.size, length)))
    if not props:
        return none
    run_move_gains = _kernels(model.n_pairs).run_move_gains
    src, dst, first, length = (np.concatenate(a) for a in zip(*props, strict=True))
    i64 = np.int64
    gain = side_by_side(
        run_move_gains,
        (src.astype(i64), dst.astype(i64), first.astype(i64), length.astype(i64)),
        order.astype(i64),
        start.astype(i64),
        count.astype(i64),
        *model.kernel_arguments(pairs),
    )
    return _Proposals(gain, src, dst, order[first], np.full(gain.size, -1), gain, np.zeros(gain.size), length)


class _Tally:
    """What a round's chunk scoring adds up: each child's best parent, its score at the
    parent it has (``here``), its best other parent with the sum of exp(score) over
    the others (``away``), and the swap entries."""

    def __init__(self, n: int) -> None:
        self.best = BestSoFar(n, totals=False)
        self.away = BestSoFar(n)
        self.here = np.full(n, -np.inf)
        self.swaps: list[tuple[np.ndarray, ...]] = []

    def offer(self, c: np.ndarray, par: np.ndarray, score: np.ndarray, t_call: np.ndarray) -> None:
        self.best.offer(c, par, score, t_call)

    def offer_away(
        self, c: np.ndarray, par: np.ndarray, score: np.ndarray, t_call: np.ndarray, mass: np.ndarray
    ) -> None:
        self.away.offer(c, par, score, t_call, mass=mass)

    def set_here(self, kids: np.ndarray, score: np.ndarray) -> None:
        self.here[kids] = score

    def add_swaps(self, swaps: tuple[np.ndarray, ...]) -> None:
        self.swaps.append(swaps)


class _ChunkTally:
    """One chunk's part of a :class:`_Tally`, made on a worker: the same calls kept as
    offers (``Offer``), folded into the round's tally in chunk order by ``fold_into``."""

    def __init__(self) -> None:
        self.best: Offer | None = None
        self.away: Offer | None = None
        self.here: tuple[np.ndarray, np.ndarray] | None = None
        self.swaps: tuple[np.ndarray, ...] | None = None

    def offer(self, c: np.ndarray, par: np.ndarray, score: np.ndarray, t_call: np.ndarray) -> None:
        self.best = Offer.of(c, par, score, t_call, totals=False)

    def offer_away(
        self, c: np.ndarray, par: np.ndarray, score: np.ndarray, t_call: np.ndarray, mass: np.ndarray
    ) -> None:
        self.away = Offer.of(c, par, score, t_call, mass=mass)

    def set_here(self, kids: np.ndarray, score: np.ndarray) -> None:
        self.here = (_narrow(kids), score)

    def add_swaps(self, swaps: tuple[np.ndarray, ...]) -> None:
        child, par, other, score = swaps
        self.swaps = (_narrow(child), _narrow(par), _narrow(other), score)

    def fold_into(self, tally: _Tally, t_call: np.ndarray, lo: int = 0) -> None:
        """Add this chunk's part to ``tally``, its pair indices (from a window starting
        at pair ``lo``) made the trace's."""
        # In the order _score_chunk makes its calls.
        if self.here is not None:
            kids, score = self.here
            tally.set_here(kids.astype(np.int64) + lo, score)
        if self.best is not None:
            tally.best.take(self.best.moved(lo), t_call)
        if self.away is not None:
            tally.away.take(self.away.moved(lo), t_call)
        if self.swaps is not None:
            # Back to 64 bits: the swap keys are products of pair indices.
            moved = (a if a.dtype == np.float64 else lo + a.astype(np.int64) for a in self.swaps)
            tally.add_swaps(tuple(moved))


def _narrow(index: np.ndarray) -> np.ndarray:
    """Pair indices in 32 bits where they fit: half the bytes back from a worker."""
    return index.astype(np.int32) if index.size == 0 or int(index.max()) < 1 << 31 else index


def _score_window(w: Window, *, model: ChainModel, tol_ns: int) -> list[_ChunkTally]:
    """A cluster task: score the chunks of window ``w`` (indices into the window)."""
    pairs = w.pairs()
    homes = w.homes(pairs)
    out = []
    for ch in w.chunks(pairs, tol_ns):
        tally = _ChunkTally()
        _score_chunk(pairs, ch, homes, model, tol_ns, tally)
        out.append(tally)
    return out


def _score_chunk(
    pairs: CallPairs,
    ch: Chunk,
    homes: Homes,
    model: ChainModel,
    tol_ns: int,
    tally: _Tally | _ChunkTally,
) -> None:
    """Score one chunk's candidates into ``tally``: the best parents, the scores
    ``here``, the best ``away`` (non-members only; its totals: exp(score)) and the
    chunk's swap entries (child, parent, occupant, score in the occupant's place).

    A candidate's score is its parent's chain likelihood with it less without it: each
    parent's chain is rebuilt with the candidate added (or, for a member, removed), in
    call order, so calls made at once are grouped exactly as ``chain_edges`` groups them.
    """
    tc, tr = pairs.t_call, pairs.t_return
    if ch.c.size == 0:
        return
    c, par, group, members = _Members.of_chunk(ch, homes.parent)
    member, rank, sib = members.member, members.rank, ch.siblings
    base = model.spliced_likelihood(pairs, par[sib.run], np.arange(sib.run.size), c, members)
    # With each candidate put in (a non-member) or taken out (a member).
    changed = model.spliced_likelihood(pairs, par, group, c, members, *members.toggled())
    score = np.where(member, base[group] - changed, changed - base[group])
    tally.set_here(c[member], score[member])
    tally.offer(c, par, score, tc)
    out = ~member
    tally.offer_away(c[out], par[out], score[out], tc, np.exp(np.clip(score[out], -600, 600)))
    # A non-member could take the place of its occupant: the member calling the same
    # node that it overlaps, the nearest in call time. In a chain of calls made one at
    # a time that is the one member it overlaps; among calls made at once (fan-out) it
    # overlaps them all, and the occupant is its counterpart.
    occupants = _kernels(model.n_pairs).occupants
    k, o = occupants(
        c,
        member,
        group,
        members.pos,
        members.start,
        members.count,
        tc,
        tr,
        pairs.callee.astype(np.int64, copy=False),
    )
    # The occupant must fit in the child's own parent to take its place there.
    kid, other = c[k], c[o]
    fits = homes.parent[kid] != -1
    fits &= (tc[other] >= shifted_ns(homes.call[kid], -tol_ns)) & (
        tr[other] <= shifted_ns(homes.ret[kid], tol_ns)
    )
    k, o, other = k[fits], o[fits], other[fits]
    if k.size == 0:
        return
    # In the occupant's place: the chain without the occupant, with the child.
    shift = (rank[o] < rank[k]).astype(np.int64)
    swapped = model.spliced_likelihood(pairs, par[k], group[k], c, members, k, rank[k] - shift, rank[o])
    without = changed[o]  # the occupant's parent's chain without it
    tally.add_swaps((c[k], par[k], other, swapped - without))


class _Members:
    """The members (current children) of each parent group of a chunk, in call order,
    to splice chains from: each group's members with one candidate put in or taken out."""

    def __init__(self, member: np.ndarray, group: np.ndarray, run: np.ndarray) -> None:
        self.pos = np.flatnonzero(member)  # grouped by parent, in call order
        self.count = np.bincount(group[self.pos], minlength=run.size)
        self.start = np.concatenate([[0], np.cumsum(self.count)[:-1]])
        before = np.cumsum(member) - member
        #: Per candidate: members of its group called before it (``run``: each group's first).
        self.rank = before - before[run[group]] if group.size else before
        self.member = member

    @classmethod
    def of_chunk(cls, ch: Chunk, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, _Members]:
        """A chunk's candidates ``(c, par, group)`` as 64-bit arrays, and the members of
        each of its parents under the assignment ``parent``."""
        c, par = ch.c.astype(np.int64), ch.par.astype(np.int64)
        group = ch.siblings.group.astype(np.int64)
        return c, par, group, cls(parent[c] == par, group, ch.siblings.run)

    def toggled(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(insert, insert_rank, remove_rank)`` that splice each candidate's parent's
        chain with the candidate put in (a non-member) or taken out (a member)."""
        pos = np.arange(self.member.size)
        return np.where(self.member, -1, pos), self.rank, np.where(self.member, self.rank, -1)

    def spliced(
        self,
        c: np.ndarray,
        group: np.ndarray,
        insert: np.ndarray | None = None,
        insert_rank: np.ndarray | None = None,
        remove_rank: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Children (pair indices) and sequence numbers of one sequence per entry of
        ``group``: that group's members less the one at ``remove_rank`` (-1: none), with
        the candidate at position ``insert`` (-1: none) put in at ``insert_rank`` among
        the rest."""
        s = group.size
        removes = np.zeros(s, bool) if remove_rank is None else remove_rank >= 0
        inserts = np.zeros(s, bool) if insert is None else insert >= 0
        length = self.count[group] - removes + inserts
        seq = np.repeat(np.arange(s), length)
        j = np.arange(seq.size) - np.repeat(np.cumsum(length) - length, length)
        if insert is not None:
            at = inserts[seq] & (j == insert_rank[seq])
            j = j - (inserts[seq] & (j > insert_rank[seq]))
        else:
            at = np.zeros(seq.size, bool)
        if remove_rank is not None:
            j = j + (removes[seq] & (j >= remove_rank[seq]))
        from_members = self.pos[np.minimum(self.start[group][seq] + j, max(self.pos.size - 1, 0))]
        src = np.where(at, insert[seq] if insert is not None else 0, from_members)
        return c[src], seq


def chain_log_likelihood(
    pairs: CallPairs, parent: np.ndarray, params: NestingParams, n_nodes: int, model: ChainModel | None = None
) -> float:
    """Mean log-likelihood per call pair of the chains ``parent`` implies, under ``model``
    (by default the model learnt from ``parent`` itself).

    Examples
    --------
    >>> p = CallPairs(np.array([0, 1]), np.array([1, 2]), np.array([0, 1]),
    ...     np.array([9, 3]), np.arange(2), np.arange(2), 0, 0, 0)
    >>> ll = chain_log_likelihood(p, np.array([-1, 0]), NestingParams(), 3)
    >>> bool(np.isfinite(ll))
    True
    """
    n = len(pairs)
    if n == 0:
        return 0.0
    if model is None:
        return ChainModel.learn(pairs, parent, params, n_nodes).own_log_likelihood / n
    return float(model.lookup(model.cells(pairs, *chain_edges(pairs, parent))).sum() / n)


def chain_stages(
    pairs: CallPairs,
    chunks: CandidateChunks,
    parent: np.ndarray,
    params: NestingParams,
    n_nodes: int,
    model_from: np.ndarray | None = None,
    *,
    first_model: ChainModel | None = None,
    runner: Runner | None = None,
    windows: Windows | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, int, float]]:
    """Chain rounds from ``parent``, one ``(parent, log_odds, moved, gain)`` per round.

    At most ``params.chains`` rounds; they stop when nothing moves or a round's gain
    in log-likelihood falls below ``params.chain_min_gain`` per call pair (that round
    is still yielded). ``gain`` is the exact rise of the log-likelihood under the
    model learnt from the round before; ``log_odds`` are the model's odds of each
    child's parent against the neighbourhood of alternatives
    (``neighbourhood_log_odds``), scored on the round's own answer for the last round
    and, for the others, on the assignment the round started from (inf for roots).
    ``model_from``, for diagnosis only, fixes the assignment the model is learnt from
    (say the true parents of a synthetic trace) instead of the current one.
    ``first_model``, the model already learnt from ``parent``, saves learning it again
    for the first round. ``runner`` scores the candidates by tasks of its workers
    (``tracefmt.cluster``), with the same answer; ``windows``, the inference's windows
    of the pairs (``infer.windows``) when its earlier stages ran there too.
    """
    if 6 * n_nodes**3 * 2 * params.n_bins >= 1 << 62:
        raise ParameterError(f"{n_nodes} nodes are too many for chain rounds (use chains=0)")
    parent = parent.copy()
    n = len(pairs)
    fixed = None if model_from is None else ChainModel.learn(pairs, model_from, params, n_nodes)
    if windows is None and runner is not None and runner.width > 1:
        windows = Windows(pairs, chunks.spans(), chunks.tol_ns, runner.width)
    # The model of each round is the last one's, counted again where calls moved.
    model, learnt_from = first_model, parent.copy()

    def learn() -> ChainModel:
        nonlocal learnt_from
        if fixed is not None:
            return fixed
        before, learnt_from = learnt_from, parent.copy()
        if model is None or model.counted is None:
            return ChainModel.learn(pairs, parent, params, n_nodes)
        return model.relearn(pairs, before, parent)

    for r in range(params.chains):
        model = learn()
        proposals, here, others = _round(pairs, chunks, parent, model, runner, windows)
        log_odds = neighbourhood_log_odds(pairs, parent, proposals, here, others)
        moves = proposals.independent(n)
        runs = moves.count > 1
        in_runs = _apply_runs(pairs, parent, moves.child[runs], moves.count[runs], moves.dest[runs])
        single = ~runs
        parent[moves.child[single]] = moves.dest[single]
        swap = moves.other >= 0
        parent[moves.other[swap]] = moves.source[swap]
        gain = float(moves.gain.sum())
        moved = int(single.sum() + swap.sum() + in_runs.size)
        last = moved == 0 or gain < params.chain_min_gain * n or r == params.chains - 1
        if last and moved:
            # The answer's confidence comes from scoring the answer itself, under the
            # model it implies, not the assignment the round started from.
            log_odds = answer_log_odds(pairs, chunks, parent, learn(), runner, windows)
        yield parent.copy(), log_odds, moved, gain
        if last:
            return


def answer_log_odds(
    pairs: CallPairs,
    chunks: CandidateChunks,
    parent: np.ndarray,
    model: ChainModel,
    runner: Runner | None = None,
    windows: Windows | None = None,
) -> np.ndarray:
    """Per call, the log-odds of ``parent`` against its neighbours under ``model``
    (``neighbourhood_log_odds`` of a chain round's scoring of every candidate)."""
    proposals, here, others = _round(pairs, chunks, parent, model, runner, windows)
    return neighbourhood_log_odds(pairs, parent, proposals, here, others)


def neighbourhood_log_odds(
    pairs: CallPairs, parent: np.ndarray, proposals: _Proposals, here: np.ndarray, others: np.ndarray
) -> np.ndarray:
    """Per call, the log-odds of the assignment against its neighbours that change that
    call's parent: every other candidate parent (``here``, its score at its own, and
    ``others``, the sum of exp(score) over the rest), every swap with the call that sits
    in its place at another parent, every move of a run of calls made at once that it
    is in; each neighbour weighs exp(its gain). +inf for roots and for calls with no
    alternative at all.

    Scored one call at a time, each as if the rest were fixed, a call whose true parent
    has been taken by its counterpart looks sure: the single move into that parent
    would leave it with two such calls; the swap does not.
    """
    n = len(pairs)
    alt = np.zeros(n)
    kid = np.flatnonzero((parent >= 0) & (others > 0))
    alt[kid] = np.exp(np.clip(np.log(others[kid]) - here[kid], -600, 600))
    swap = proposals.other >= 0
    w = np.exp(np.clip(proposals.gain, -600, 600))
    alt += np.bincount(proposals.child[swap], weights=w[swap], minlength=n)
    alt += np.bincount(proposals.other[swap], weights=w[swap], minlength=n)
    runs = proposals.count > 1
    if runs.any():
        members = _apply_runs(
            pairs, parent.copy(), proposals.child[runs], proposals.count[runs], proposals.dest[runs]
        )
        alt += np.bincount(members, weights=np.repeat(w[runs], proposals.count[runs]), minlength=n)
    alt[parent < 0] = 0.0
    with np.errstate(divide="ignore"):
        return -np.log(alt)


def _children_index(pairs: CallPairs, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Children grouped by parent, in call order (ties by pair index, as in
    ``chain_edges``), with each pair's first position among them and its count."""
    kid = np.flatnonzero(parent >= 0)
    order = kid[np.lexsort((pairs.t_call[kid], parent[kid]))]
    count = np.bincount(parent[order], minlength=len(pairs))
    return order, np.cumsum(count) - count, count


def _apply_runs(
    pairs: CallPairs, parent: np.ndarray, first: np.ndarray, count: np.ndarray, dest: np.ndarray
) -> np.ndarray:
    """Move each run (``first`` and the ``count - 1`` siblings called after it) to its
    ``dest``, in place; returns the children moved."""
    if first.size == 0:
        return np.zeros(0, np.int64)
    order, _, _ = _children_index(pairs, parent)
    at = np.full(len(pairs), -1)
    at[order] = np.arange(order.size)
    seq = np.repeat(np.arange(first.size), count)
    j = np.arange(seq.size) - np.repeat(np.cumsum(count) - count, count)
    kids = order[at[first][seq] + j]
    parent[kids] = dest[seq]
    return kids


def chain_rounds(
    pairs: CallPairs,
    chunks: CandidateChunks,
    parent: np.ndarray,
    params: NestingParams,
    n_nodes: int,
    rounds: int,
    model_from: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Up to ``rounds`` chain rounds from ``parent`` (``chain_stages`` run to its end).

    Returns the new parents, each child's log-odds (``chain_stages``) and the rounds run.
    """
    out, log_odds, done = parent, np.full(len(pairs), np.inf), 0
    run = params.with_overrides(chains=rounds)
    for out, log_odds, _, _ in chain_stages(pairs, chunks, parent, run, n_nodes, model_from):  # noqa: B007
        done += 1
    return out, log_odds, done
