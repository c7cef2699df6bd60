"""Compiled loops: ``numba.njit`` as every wirepath kernel uses it.

Imported only by the modules that hold compiled loops (``infer._chainjit``,
``trend._mdljit``): numba costs about a second to load, which a command that runs no
such loop does not pay.
"""

from __future__ import annotations

from collections.abc import Callable

from numba import njit

__all__ = ["compiled"]


def compiled(**options: object) -> Callable[[Callable], Callable]:
    """``numba.njit(nogil=True, **options)`` with its machine code cached beside the
    module, or, where no cache can be written (a read-only install, another user),
    compiled afresh each run.

    Examples
    --------
    >>> @compiled()
    ... def twice(x):
    ...     return 2 * x
    >>> twice(21)
    42
    """

    def compile_(fn: Callable) -> Callable:
        try:
            return njit(cache=True, nogil=True, **options)(fn)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return njit(nogil=True, **options)(fn)

    return compile_
