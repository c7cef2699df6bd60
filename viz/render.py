"""Rendering DOT text with the real graphviz ``dot`` binary (SVG, PNG, PDF).

Generation (``viz.dot``) is pure; only this module runs a program. A missing binary is
one ``MissingToolError`` naming the package to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tracefmt import MissingToolError, ParameterError, WirepathError, write_atomic

__all__ = ["FORMATS", "dot_binary", "render_dot", "write_graph"]

FORMATS = ("svg", "png", "pdf", "dot")
_TIMEOUT_S = 120


def dot_binary() -> str:
    """Path of graphviz's ``dot``, or ``MissingToolError`` saying how to install it.

    ``WIREPATH_DOT`` names another binary (or a missing one, to test the error).

    Examples
    --------
    >>> import os
    >>> os.environ["WIREPATH_DOT"] = "no-such-dot"
    >>> dot_binary()
    Traceback (most recent call last):
    ...
    tracefmt.errors.MissingToolError: graphviz's 'no-such-dot' ... apt-get install graphviz ...
    >>> del os.environ["WIREPATH_DOT"]
    """
    name = os.environ.get("WIREPATH_DOT", "dot")
    found = shutil.which(name)
    if found is None:
        raise MissingToolError(
            f"graphviz's '{name}' program is not installed (needed to draw SVG, PNG or PDF): "
            "install graphviz: apt-get install graphviz (or write .dot files, which need nothing)"
        )
    return found


def render_dot(dot_text: str, fmt: str = "svg") -> bytes:
    """Run ``dot -T<fmt>`` on ``dot_text`` and return the picture's bytes.

    Parameters
    ----------
    dot_text : str
        A DOT graph (``viz.dot``).
    fmt : {"svg", "png", "pdf", "dot"}
        ``"dot"`` returns the text itself, encoded, without running anything.

    Raises
    ------
    MissingToolError
        ``dot`` is not installed.
    WirepathError
        ``dot`` rejected the graph (its message is included).

    Examples
    --------
    >>> render_dot('digraph { "a" -> "b"; }', "dot")
    b'digraph { "a" -> "b"; }'
    """
    if fmt not in FORMATS:
        raise ParameterError(f"unknown picture format {fmt!r} (must be one of {', '.join(FORMATS)})")
    if fmt == "dot":
        return dot_text.encode("utf-8")
    try:
        done = subprocess.run(
            [dot_binary(), f"-T{fmt}"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise WirepathError(f"dot took more than {_TIMEOUT_S} s; draw fewer patterns (--top)") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WirepathError(f"dot failed (exit {done.returncode}): {' '.join(message[:3])}")
    return done.stdout


def write_graph(dot_text: str, path: str | os.PathLike[str], fmt: str | None = None) -> Path:
    """Render ``dot_text`` into ``path``; the format comes from the file name unless given.

    The file is written atomically (a partial picture is never left behind).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = write_graph('digraph { "a" -> "b"; }', pathlib.Path(tempfile.mkdtemp()) / "g.dot")
    >>> out.read_text()
    'digraph { "a" -> "b"; }'
    """
    target = Path(path)
    if fmt is None:
        fmt = target.suffix.lstrip(".").lower() or "svg"
        if fmt == "gv":
            fmt = "dot"
        if fmt not in FORMATS:
            raise ParameterError(
                f"{target}: cannot tell the picture format from '.{fmt}' (use .svg, .png, .pdf or .dot)"
            )
    return write_atomic(target, render_dot(dot_text, fmt))
