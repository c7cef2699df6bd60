"""Path pattern shapes, their stable ids and latency statistics, shared by ground truth
and inference.

A nesting pattern is a tree of visits: each visit is ``(caller, node, children)`` with
children in call order. Children a visit calls at once (each called before the earlier
ones have all returned) form a *concurrent group*, unordered: whichever order the calls
left in, the shape is the same, its group's children sorted by their text. The
canonical text is ``caller>node(child,child|child,...)``: ``,`` between children called
one after the other, ``|`` within a concurrent group. The id is the first 16 hex digits
of the text's BLAKE2b digest, so the same shape gets the same id in a truth file and in
an inferred paths file. A linear path (convolution, one-way messages) is its node
sequence joined by ``>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Shape",
    "join_text",
    "latency_stats",
    "path_id",
    "pattern_id",
    "shape_text",
    "sibling_groups",
    "text_id",
    "tree_depths",
]


def tree_depths(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Depth of every row under its root (parent -1), the row its links settle on (its
    root), and whether that is no root (the row hangs under a loop of links), by
    pointer jumping: O(log depth) passes, and it ends whatever the links.

    Examples
    --------
    >>> [a.tolist() for a in tree_depths(np.array([-1, 0, 1, -1]))]
    [[0, 1, 2, 0], [0, 0, 0, 3], [False, False, False, False]]
    >>> tree_depths(np.array([-1, 0, 3, 2]))[2].tolist()  # 2 and 3 hold each other
    [False, False, True, True]
    """
    n = parent.size
    up = np.where(parent >= 0, parent, np.arange(n))
    depth = (parent >= 0).astype(np.int64)
    # Depth at most n - 1 needs at most bit_length(n) doublings; a loop never reaches
    # a root (it may settle on a call of the loop).
    for _ in range(max(n, 1).bit_length() + 1):
        nxt = up[up]
        moved = nxt != up
        if not moved.any():
            break
        depth = depth + np.where(moved, depth[up], 0)
        up = nxt
    return depth, up, parent[up] >= 0 if n else np.zeros(0, bool)


@dataclass(frozen=True)
class Shape:
    """One visit of a pattern: ``caller`` called ``node``, which called ``children`` in order.

    ``groups`` numbers each child's concurrent group (children called at once share a
    number, in canonical order within it); empty when every child was called on its own.
    ``Shape.grouped`` builds a shape from its groups in canonical form.

    Examples
    --------
    >>> s = Shape("client", "WS1", (Shape("WS1", "AP1", (Shape("AP1", "DB1"),)),))
    >>> shape_text(s)
    'client>WS1(WS1>AP1(AP1>DB1))'
    >>> g = Shape.grouped("c", "GW", [[Shape("GW", "RECS"), Shape("GW", "ADS")], [Shape("GW", "DB")]])
    >>> shape_text(g), g.groups
    ('c>GW(GW>ADS|GW>RECS,GW>DB)', (0, 0, 1))
    """

    caller: str
    node: str
    children: tuple[Shape, ...] = ()
    groups: tuple[int, ...] = ()

    @classmethod
    def grouped(cls, caller: str, node: str, groups: Sequence[Sequence[Shape]]) -> Shape:
        """The shape of a visit whose children come in ``groups`` (one after the other;
        the children of a group called at once), each group sorted by text."""
        kids: list[Shape] = []
        numbers: list[int] = []
        for k, group in enumerate(g for g in groups if g):
            kids += sorted(group, key=shape_text)
            numbers += [k] * len(group)
        concurrent = len(set(numbers)) < len(numbers)
        return cls(caller, node, tuple(kids), tuple(numbers) if concurrent else ())

    def child_groups(self) -> list[list[Shape]]:
        """The children as their groups, in order.

        Examples
        --------
        >>> kids = (Shape("b", "c"), Shape("b", "d"), Shape("b", "e"))
        >>> [[c.node for c in g] for g in Shape("a", "b", kids, (0, 0, 1)).child_groups()]
        [['c', 'd'], ['e']]
        >>> [[c.node for c in g] for g in Shape("a", "b", kids).child_groups()]
        [['c'], ['d'], ['e']]
        """
        if not self.groups:
            return [[c] for c in self.children]
        out: list[list[Shape]] = []
        for k, child in zip(self.groups, self.children, strict=True):
            if k >= len(out):
                out.append([])
            out[-1].append(child)
        return out


def shape_text(shape: Shape) -> str:
    """The canonical text of a shape (see the module docstring).

    Children before their parents, with a stack of its own: a call chain can be deeper
    than Python's recursion allows.
    """
    texts: dict[int, str] = {}
    stack = [(shape, False)]
    while stack:
        s, kids_done = stack.pop()
        if kids_done:
            texts[id(s)] = join_text(s.caller, s.node, [texts[id(c)] for c in s.children], s.groups)
        elif id(s) not in texts:
            stack.append((s, True))
            stack.extend((c, False) for c in s.children)
    return texts[id(shape)]


def join_text(caller: str, node: str, child_texts: Sequence[str], groups: Sequence[int] = ()) -> str:
    """The canonical text of a visit from its children's texts (for building many at once),
    ``groups`` numbering each child's concurrent group (empty: each child on its own).

    Examples
    --------
    >>> join_text("client", "WS1", ["WS1>AP1", "WS1>AUTH"])
    'client>WS1(WS1>AP1,WS1>AUTH)'
    >>> join_text("client", "GW", ["GW>A", "GW>B", "GW>C"], [0, 0, 1])
    'client>GW(GW>A|GW>B,GW>C)'
    """
    head = f"{caller}>{node}"
    if not child_texts:
        return head
    if not groups:
        return head + "(" + ",".join(child_texts) + ")"
    parts = [child_texts[0]]
    for k in range(1, len(child_texts)):
        parts.append(("|" if groups[k] == groups[k - 1] else ",") + child_texts[k])
    return head + "(" + "".join(parts) + ")"


def sibling_groups(
    kid_parent: np.ndarray, t_call: np.ndarray, t_return: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Concurrent groups of children sorted by (parent, call time): per child, whether it
    starts a new group and its group's number among its siblings' groups.

    A child joins the group of the siblings before it when it is called before all of
    them have returned (calls made at once); otherwise it starts a new group.

    Examples
    --------
    Parent 0 calls at 0 (returns 5) and at 1 (returns 3): one group; then at 5, alone.

    >>> new, number = sibling_groups(np.array([0, 0, 0]), np.array([0, 1, 5]), np.array([5, 3, 9]))
    >>> new.tolist(), number.tolist()
    ([True, False, True], [0, 0, 1])
    """
    m = kid_parent.size
    if m == 0:
        return np.zeros(0, bool), np.zeros(0, np.int64)
    first = np.concatenate([[True], kid_parent[1:] != kid_parent[:-1]])
    values, rank = np.unique(t_return, return_inverse=True)
    width = np.int64(values.size + 1)
    # Running maximum of the siblings' returns, restarted at every parent: the parent's
    # run number in the high part of the key keeps runs apart.
    run = np.cumsum(first) - 1
    latest = np.maximum.accumulate(run * width + rank.ravel())
    before = values[np.concatenate([[0], latest[:-1] % width])]
    new = first | (t_call >= before)
    count = np.cumsum(new)
    number = count - count[np.flatnonzero(first)][run]
    return new, number


def text_id(text: str) -> str:
    """The id of a pattern or path from its canonical text: 16 hex digits of BLAKE2b.

    Examples
    --------
    >>> text_id("client>WS1") == pattern_id(Shape("client", "WS1"))
    True
    """
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def pattern_id(shape: Shape) -> str:
    """Stable 16-hex-digit id of a nesting pattern's shape.

    Examples
    --------
    >>> pattern_id(Shape("client", "WS1")) == pattern_id(Shape("client", "WS1"))
    True
    >>> pattern_id(Shape("client", "WS1")) == pattern_id(Shape("client", "WS2"))
    False
    """
    return text_id(shape_text(shape))


def path_id(nodes: Sequence[str]) -> str:
    """Stable id of a linear path (a node sequence).

    Examples
    --------
    >>> len(path_id(["client", "relay1", "mx"]))
    16
    """
    return text_id(">".join(nodes))


def latency_stats(values: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99 and std in seconds (the paths-file form).

    Examples
    --------
    >>> latency_stats(np.array([0.001, 0.002, 0.003]))["mean"]
    0.002
    """
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "std": 0.0}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {
        "mean": float(v.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "std": float(v.std()),
    }
