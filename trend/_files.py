"""Reading the trend verbs' input files: one clear error for a missing file or non-UTF-8 text,
and a UTF-8 byte order mark (as spreadsheet programs write) dropped."""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from tracefmt import ParseError, TraceFileError

__all__ = ["read_bytes", "read_text"]


def read_bytes(path: str | os.PathLike[str], what: str = "") -> bytes:
    """The file's bytes without a leading UTF-8 byte order mark.

    ``what`` (e.g. ``"WDA config "``) is put before the path in the error message.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TraceFileError(f"cannot read {what}{path}: {e.strerror or e}") from None
    return data.removeprefix(codecs.BOM_UTF8)


def read_text(path: str | os.PathLike[str], what: str = "") -> str:
    """The file as UTF-8 text (a leading byte order mark dropped); bad bytes name their line."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ParseError(str(path), line, f"not UTF-8 text (byte 0x{data[e.start]:02x})") from None
