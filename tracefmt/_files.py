"""Checks shared by every reader of an input file and every writer of outputs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tracefmt.errors import ParameterError, TraceFileError


def existing_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a Path if it is a regular file, else a ``TraceFileError`` saying why.

    ``what`` names the expected content, e.g. "a Parquet trace file".
    """
    p = Path(path)
    if not p.exists():
        raise TraceFileError(f"{p}: no such file")
    if p.is_dir():
        raise TraceFileError(f"{p}: is a directory (expected {what})")
    return p


def partial_path(target: str | os.PathLike[str]) -> Path:
    """The temporary file an output is written to before it replaces ``target`` whole.

    >>> partial_path("out/t.parquet").as_posix()
    'out/.t.parquet.partial'
    """
    p = Path(target)
    return p.with_name(f".{p.name}.partial")


def distinct_outputs(
    inputs: Sequence[str | os.PathLike[str] | None],
    outputs: Sequence[str | os.PathLike[str] | None],
    *,
    what: str = "the input",
) -> None:
    """Raise ``ParameterError`` when an output, or the temporary file it is first written
    to (``partial_path``), is one of the inputs (it would destroy it; the message names
    the input as ``what``), or two outputs are the same file (one would replace the
    other). Paths are compared after resolving links. ``None`` entries (options not
    given) are skipped.

    Examples
    --------
    >>> distinct_outputs(["t.parquet"], ["paths.json", "inst.parquet"])
    >>> distinct_outputs(["t.parquet"], ["./t.parquet"])
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: ./t.parquet: output would overwrite the input; choose another name
    """
    sources = {Path(p).resolve() for p in inputs if p is not None}
    seen: set[Path] = set()
    for out in outputs:
        if out is None:
            continue
        target = Path(out).resolve()
        if target in sources or partial_path(target) in sources:
            raise ParameterError(f"{out}: output would overwrite {what}; choose another name")
        if target in seen:
            raise ParameterError(f"{out}: given for two outputs; choose another name for one")
        seen.add(target)


def parquet_output(path: str | os.PathLike[str]) -> None:
    """Raise ``ParameterError`` unless ``path`` names a Parquet trace (a verb that writes
    Parquet must not write it under a text trace's name).

    Examples
    --------
    >>> parquet_output("t.parquet")
    >>> parquet_output("t.txt")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: t.txt: this writes a Parquet trace: name it .parquet or .pq (...)
    """
    name = Path(path).name.lower()
    if not name.endswith((".parquet", ".pq")):
        raise ParameterError(
            f"{path}: this writes a Parquet trace: name it .parquet or .pq "
            "(wirepath convert makes text of it)"
        )
