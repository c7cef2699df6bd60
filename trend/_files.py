"""Reading the trend verbs' input files: one clear error for a missing, unreadable or
endless file or non-UTF-8 text, and a UTF-8 byte order mark (as spreadsheet programs
write) dropped. The bound is :mod:`tracefmt.configfile`'s."""

from __future__ import annotations

import os

from tracefmt.configfile import MAX_CONFIG_BYTES, read_config_bytes, read_config_text

__all__ = ["MAX_RESULTS_BYTES", "read_bytes", "read_text"]

#: Results files are data, not configuration: a year of nightly results of thousands of
#: tests is a few hundred MiB of CSV.
MAX_RESULTS_BYTES = 1 << 30


def read_bytes(path: str | os.PathLike[str], what: str = "", *, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The file's bytes without a leading UTF-8 byte order mark, at most ``limit`` of them.

    ``what`` (e.g. ``"WDA config "``) names the expected content in the error message.
    """
    return read_config_bytes(path, what.strip() or "an input of this verb", limit=limit)


def read_text(path: str | os.PathLike[str], what: str = "", *, limit: int = MAX_CONFIG_BYTES) -> str:
    """The file as UTF-8 text (a leading byte order mark dropped); bad bytes name their line."""
    return read_config_text(path, what.strip() or "an input of this verb", limit=limit)
