"""Compiled loops: ``numba.njit`` as every wirepath kernel uses it.

Imported only by the modules that hold compiled loops (``infer._chainjit``,
``trend._mdljit``): numba costs about a second to load, which a command that runs no
such loop does not pay. :func:`python_twin` loads such a module once more with its loops
left as Python, for inputs too small to repay loading numba at all.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from types import ModuleType

__all__ = ["compiled", "python_twin"]

#: True while :func:`python_twin` loads a module: its loops stay Python.
_PLAIN = False


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
        if _PLAIN:
            return fn
        from numba import njit

        try:
            return njit(cache=True, nogil=True, **options)(fn)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            return njit(nogil=True, **options)(fn)

    return compile_


@functools.cache
def python_twin(name: str) -> ModuleType:
    """The module ``name`` (one of compiled loops) loaded once more, apart from the
    imported one, with its loops as plain Python: the same answers without numba, at a
    Python loop's speed. numba is not imported for it.

    Examples
    --------
    >>> import sys
    >>> twin = python_twin("infer._chainjit")
    >>> callable(twin.run_move_gains) and not hasattr(twin.run_move_gains, "py_func")
    True
    """
    global _PLAIN
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module {name!r}")
    twin = importlib.util.module_from_spec(spec)
    _PLAIN = True
    try:
        spec.loader.exec_module(twin)
    finally:
        _PLAIN = False
    return twin
