"""Packages that import a module only when one of its names is first used.

Every command line imports every package to build its parser, but one run uses one or
two of them; a package whose ``__init__`` imported all its modules would make each run
pay for the others (SciPy's statistics, plotly, the HTML report) before it starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_package(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose public names live in the
    modules that ``exports`` maps to them (module -> names).

    A public name imports its module on first use and is then an ordinary attribute; any
    other name that is a submodule of the package (``viz.render``) is imported as such.

    Examples
    --------
    >>> getattr_, dir_ = lazy_package("tracefmt", {"tracefmt.units": ["parse_duration_ns"]})
    >>> getattr_("parse_duration_ns").__name__
    'parse_duration_ns'
    >>> "parse_duration_ns" in dir_()
    True
    """
    home = {name: module for module, names in exports.items() for name in names}

    def attribute(name: str) -> Any:
        module = home.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
        elif not name.startswith("__") and importlib.util.find_spec(f"{package}.{name}") is not None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return attribute, names
