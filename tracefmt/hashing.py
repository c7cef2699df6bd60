"""One 64-bit mixing function for every hash of the package (flow keys, node keys,
pattern shapes, exported span ids): splitmix64's finalizer, vectorized."""

from __future__ import annotations

import numpy as np

__all__ = ["mix64"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer of each element: a well-spread 64-bit hash (a bijection of
    uint64, so distinct inputs stay distinct).

    Examples
    --------
    >>> mix64(np.array([0, 1], np.uint64)).tolist()
    [0, 6238072747940578789]
    """
    x = np.asarray(x, np.uint64)
    with np.errstate(over="ignore"):  # the multiplications wrap, as they should
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))
