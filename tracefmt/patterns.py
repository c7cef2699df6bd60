"""Path pattern shapes, their stable ids and latency statistics, shared by ground truth
and inference.

A nesting pattern is a tree of visits: each visit is ``(caller, node, children)`` with
children in call order. Its canonical text is ``caller>node(child,child,...)``; the id
is the first 16 hex digits of its BLAKE2b digest, so the same shape gets the same id
in a truth file and in an inferred paths file. A linear path (convolution, one-way
messages) is its node sequence joined by ``>``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Shape", "join_text", "latency_stats", "path_id", "pattern_id", "shape_text", "text_id"]


@dataclass(frozen=True)
class Shape:
    """One visit of a pattern: ``caller`` called ``node``, which called ``children`` in order.

    Examples
    --------
    >>> s = Shape("client", "WS1", (Shape("WS1", "AP1", (Shape("AP1", "DB1"),)),))
    >>> shape_text(s)
    'client>WS1(WS1>AP1(AP1>DB1))'
    """

    caller: str
    node: str
    children: tuple[Shape, ...] = ()


def shape_text(shape: Shape) -> str:
    """The canonical text of a shape (see the module docstring)."""
    return join_text(shape.caller, shape.node, [shape_text(c) for c in shape.children])


def join_text(caller: str, node: str, child_texts: Sequence[str]) -> str:
    """The canonical text of a visit from its children's texts (for building many at once).

    Examples
    --------
    >>> join_text("client", "WS1", ["WS1>AP1", "WS1>AUTH"])
    'client>WS1(WS1>AP1,WS1>AUTH)'
    """
    head = f"{caller}>{node}"
    return head + "(" + ",".join(child_texts) + ")" if child_texts else head


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
