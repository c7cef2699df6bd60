"""What a file given in the wrong place is, and which verb reads it.

A user who gives ``wirepath info`` a capture, or ``viz draw`` a trace, should be told
what the file is and where it goes, not only that it is not what the verb reads. The
readers call :func:`file_kind` when they refuse a file and add its answer to their one
error line. It looks at a few bytes (and a Parquet file's schema), never the whole file.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass

__all__ = ["CAPTURE", "INSTANCES", "PATHS", "RESULTS", "SPANS", "TRACE", "FileKind", "file_kind", "hint"]

_PCAP_MAGICS = frozenset(
    {b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a"}
)
_PARQUET_MAGIC = b"PAR1"
_GZIP_MAGIC = b"\x1f\x8b"
_JSON_HEAD = 1 << 16  # a paths file names its format in its first lines


@dataclass(frozen=True)
class FileKind:
    """What a file holds (``what``) and the verbs that take it (``verbs``, with ``FILE``
    standing for its name)."""

    what: str
    verbs: str

    def say(self, path: str | os.PathLike[str]) -> str:
        """``"a packet capture; make it a trace with wirepath capture pcap x.pcap ..."``."""
        return f"{self.what}; {self.verbs.replace('FILE', str(path))}"


CAPTURE = FileKind(
    "a packet capture", "make it a trace with `wirepath capture pcap FILE --out trace.parquet`"
)
TRACE = FileKind(
    "a trace", "read by `wirepath info`, `infer nesting`, `infer convolution`, `convert`, `merge`"
)
INSTANCES = FileKind(
    "an instances table (written by `infer nesting --instances`)",
    "read by `wirepath export FILE` and `wirepath report PATHS --instances FILE`",
)
RESULTS = FileKind(
    "a trend results file (in a store's results/)",
    "read by `wirepath trend analyze`, `trend check` and `trend dashboard` with `--store`",
)
PATHS = FileKind(
    "a paths file (written by `infer nesting` or `infer convolution`)",
    "read by `wirepath viz draw FILE`, `report FILE`, `eval FILE TRACE` and `viz diff`",
)
SPANS = FileKind(
    "tracing spans (Jaeger or OTLP JSON)", "make them a trace with `wirepath convert FILE trace.parquet`"
)


def file_kind(path: str | os.PathLike[str]) -> FileKind | None:
    """The kind of ``path`` when it is one wirepath knows (a capture, a trace, an
    instances table, trend results, a paths file, tracing spans); None otherwise, or
    when it cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x.pcap"
    >>> _ = p.write_bytes(bytes.fromhex("d4c3b2a1") + bytes(20))
    >>> file_kind(p).what
    'a packet capture'
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(_JSON_HEAD)
    except (OSError, ValueError):
        return None
    if head[:2] == _GZIP_MAGIC:
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 8)
        except (zlib.error, gzip.BadGzipFile):
            return None
    if head[:4] in _PCAP_MAGICS:
        return CAPTURE
    if head[:4] == _PARQUET_MAGIC:
        return _parquet_kind(path)
    text = head.lstrip()
    if text[:1] == b"{":
        if b'"wirepath.paths/' in text:
            return PATHS
        if b'"resourceSpans"' in text or (b'"data"' in text and b'"spans"' in text):
            return SPANS
    return None


def _parquet_kind(path: str | os.PathLike[str]) -> FileKind | None:
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception:
        return None
    if {"timestamp", "sender", "receiver", "op"} <= names:
        return TRACE
    if {"pair", "parent", "instance", "pattern"} <= names:
        return INSTANCES
    if {"test", "build", "trial", "value"} <= names:
        return RESULTS
    return None


def hint(path: str | os.PathLike[str], *, unless: FileKind | None = None) -> str:
    """``" but a packet capture; make it a trace with ..."``, or ``""`` when the
    file's kind is unknown or is ``unless`` (the kind the reader wanted)."""
    kind = file_kind(path)
    if kind is None or kind is unless:
        return ""
    return f" but {kind.say(path)}"
