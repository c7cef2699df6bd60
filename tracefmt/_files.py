"""Checks shared by every reader of an input file."""

from __future__ import annotations

import os
from pathlib import Path

from tracefmt.errors import TraceFileError


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
