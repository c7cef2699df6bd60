"""The text form of a trace: ``timestamp op sender receiver id``, one message a line.

- ``timestamp``: seconds with any number of decimals (kept exactly, to the
  nanosecond; finer digits are dropped) or an ISO-8601 instant (``Z`` or an offset;
  without one it is taken as UTC).
- ``op``: ``call``, ``return`` or ``send``.
- ``sender``, ``receiver``: node names, any token without whitespace or ``#``.
- ``id``: a decimal integer below 2**64, ``-`` for none, or any other token, which is
  mapped to a stable 64-bit value (FNV-1a of its UTF-8 bytes).
- ``#`` starts a comment; blank lines are ignored. Files ending in ``.gz`` are
  decompressed on the fly.

Parsing is vectorized over chunks of the file (numpy over the bytes), so memory is
bounded by the chunk size and speed does not depend on a Python loop per line.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# tracefmt's own private tokenizer (the design keeps a package's internals in _private modules).
from tracefmt import _tokens
from tracefmt._files import atomic_output, existing_file
from tracefmt.errors import ParseError, SchemaError, TraceFileError
from tracefmt.schema import NAT_NS, OPS, TS_TYPE, empty_trace, validate_trace

__all__ = [
    "TEXT_HEADER",
    "TextStats",
    "format_text_lines",
    "iter_text_trace",
    "read_text_trace",
    "write_text_trace",
]

TEXT_HEADER = "# timestamp op sender receiver id\n"
DEFAULT_CHUNK_BYTES = 8 << 20
_FIELDS = 5
_MAX_EXAMPLES = 5

PathLike = str | os.PathLike[str]


@dataclass
class TextStats:
    """What reading a text trace found.

    Attributes
    ----------
    lines : int
        Lines read, comments and blank lines included.
    messages : int
        Messages kept.
    skipped : int
        Bad lines skipped (only with ``skip_bad``).
    hashed_ids : int
        Ids that were not decimal integers and were mapped to 64-bit hashes.
    examples : list of str
        The first few skipped lines' errors, ``path:line: reason``.
    """

    lines: int = 0
    messages: int = 0
    skipped: int = 0
    hashed_ids: int = 0
    examples: list[str] = field(default_factory=list)


# Reasons a line is rejected, checked in this order.
_R_FIELDS, _R_UTF8, _R_TS, _R_OP = 1, 2, 3, 4


def _reason(code: int, tokens: list[str], count: int) -> str:
    if code == _R_FIELDS:
        return f"expected 5 fields (timestamp op sender receiver id), got {count}"
    if code == _R_UTF8:
        return "not valid UTF-8 text"
    if code == _R_TS:
        return (
            f"invalid timestamp {tokens[0]!r} (seconds such as 12.345 or ISO-8601 such as "
            "2024-05-01T12:00:00.123Z, from 1677-09-21T00:12:43.145224193Z to "
            "2262-04-11T23:47:16.854775807Z)"
        )
    return f"unknown op {tokens[1]!r} (must be one of {', '.join(OPS)})"


def _iso_ns(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """ISO-8601 strings to UTC nanoseconds (a zone-less instant is taken as UTC)."""
    arr = pa.array(values, pa.string())
    zoned = pc.match_substring_regex(arr, r"(Z|[+-]\d\d:?\d\d)$").to_numpy(zero_copy_only=False)
    ns = np.zeros(len(values), np.int64)
    ok = np.zeros(len(values), bool)
    for mask, ts_type in ((zoned, TS_TYPE), (~zoned, pa.timestamp("ns"))):
        idx = np.flatnonzero(mask)
        try:
            ns[idx] = arr.take(idx).cast(ts_type).cast(pa.int64()).to_numpy(zero_copy_only=False)
            ok[idx] = True
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # Some are invalid: find which, one by one (only on this error path).
        for i in idx:
            try:
                ns[i] = pa.scalar(values[i]).cast(ts_type).cast(pa.int64()).as_py()
                ok[i] = True
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass
    return ns, ok


@dataclass(frozen=True)
class _Fields:
    """The five fields of every usable line of a chunk, compacted into one buffer.

    ``data`` holds the tokens' bytes (after ``_tokens.PAD`` bytes of padding), ``lo`` and
    ``hi`` each token's byte range in it (five a row, in field order), ``strings`` the
    same tokens as one Arrow string array; ``rows`` counts the lines.
    """

    data: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    strings: pa.StringArray
    rows: int

    @classmethod
    def of(
        cls, buf: np.ndarray, tok: _tokens.Tokens, usable: np.ndarray, line_of_token: np.ndarray
    ) -> _Fields:
        """The fields of the ``usable`` lines of ``buf``; the other lines' bytes are masked out."""
        keep_tok = usable[line_of_token]
        start, end = tok.start[keep_tok], tok.end[keep_tok]
        mask = tok.mask
        if not keep_tok.all():
            line_start = np.concatenate([[0], tok.line_end[:-1] + 1])
            drop = ~usable & (tok.per_line > 0)
            mask = mask & ~_tokens.mask_ranges(buf.size, line_start[drop], tok.line_end[drop])
        data, offsets = _tokens.compact(buf, mask, start, end)
        lo, hi = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
        binary = pa.Array.from_buffers(
            pa.binary(), lo.size, [None, pa.py_buffer(offsets), pa.py_buffer(data[_tokens.PAD :])]
        )
        return cls(data, lo, hi, binary.view(pa.string()), int(np.count_nonzero(usable)))

    def bounds(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Byte ranges ``[lo, hi)`` of field ``k`` of every row."""
        return self.lo[k::_FIELDS], self.hi[k::_FIELDS]

    def column(self, k: int) -> pa.Array:
        """Field ``k`` of every row as strings."""
        return self.strings.take(pa.array(np.arange(k, self.rows * _FIELDS, _FIELDS)))

    def timestamps(self) -> tuple[np.ndarray, np.ndarray]:
        """Nanoseconds of every row (seconds, else ISO-8601) and its fault (``_R_TS`` or 0)."""
        ts_ns, ts_ok = _tokens.parse_seconds_ns(self.data, *self.bounds(0))
        if not ts_ok.all():
            redo = np.flatnonzero(~ts_ok)
            values = self.strings.take(pa.array(redo * _FIELDS)).to_pylist()
            iso_ns, iso_ok = _iso_ns(values)
            ts_ns[redo], ts_ok[redo] = iso_ns, iso_ok
        ts_ok &= ts_ns != NAT_NS  # numpy's and pandas' missing time: not an instant of a trace
        return ts_ns, np.where(ts_ok, 0, _R_TS)

    def op_index(self) -> np.ndarray:
        """The op of every row as its index in ``OPS``, -1 for an unknown op."""
        op = pc.dictionary_encode(self.column(1))
        op_code = pc.index_in(op.dictionary, value_set=pa.array(OPS)).fill_null(-1)
        if not self.rows:
            return np.zeros(0, np.int64)
        return op_code.to_numpy(zero_copy_only=False)[op.indices.to_numpy(zero_copy_only=False)]

    def ids(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every row's id (uint64), whether it is ``-`` (none) and whether it was hashed
        (not a decimal integer: FNV-1a of its bytes)."""
        id_lo, id_hi = self.bounds(4)
        ids, numeric = _tokens.parse_uint(self.data, id_lo, id_hi)
        dash = (id_hi - id_lo == 1) & (self.data[id_lo + _tokens.PAD] == ord("-"))
        hashed = ~numeric & ~dash
        if hashed.any():
            ids[hashed] = _tokens.fnv1a64(self.data, id_lo[hashed], id_hi[hashed])
        return ids, dash, hashed


class _ChunkParser:
    """Parses one chunk of whole lines into a trace table; pure, so chunks run in threads."""

    def __init__(self, path: str, skip_bad: bool) -> None:
        self.path = path
        self.skip_bad = skip_bad

    def parse(self, buf: np.ndarray, first_line: int) -> tuple[pa.Table | None, TextStats]:
        """The chunk's messages (None if it has none) and what reading it found."""
        stats = TextStats()
        tok = _tokens.tokenize(buf)
        stats.lines = tok.line_end.size
        line_of_token = np.repeat(np.arange(tok.line_end.size), tok.per_line)
        bad = np.where((tok.per_line != _FIELDS) & (tok.per_line != 0), _R_FIELDS, 0)
        if (buf >= 0x80).any():
            self._check_utf8(buf, tok, line_of_token, bad)
        # Lines that become rows: five fields, valid UTF-8.
        usable = (tok.per_line == _FIELDS) & (bad == 0)
        row_line = np.flatnonzero(usable)
        fields = _Fields.of(buf, tok, usable, line_of_token)
        ts_ns, row_bad = fields.timestamps()
        op_idx = fields.op_index()
        row_bad = np.where((row_bad == 0) & (op_idx < 0), _R_OP, row_bad)
        ids, dash, hashed = fields.ids()
        # Line-level verdicts: a line is bad for the first reason found.
        bad[row_line] = np.where(bad[row_line] != 0, bad[row_line], row_bad)
        bad_lines = np.flatnonzero(bad)
        if bad_lines.size:
            self._report(bad_lines, bad, tok, buf, first_line, stats)
        good_rows = bad[row_line] == 0
        stats.hashed_ids = int((hashed & good_rows).sum())
        if not fields.rows:
            return None, stats
        table = pa.table(
            {
                "timestamp": pa.array(ts_ns, pa.int64()).cast(TS_TYPE),
                "sender": pc.dictionary_encode(fields.column(2)),
                "receiver": pc.dictionary_encode(fields.column(3)),
                "op": pa.DictionaryArray.from_arrays(
                    pa.array(np.maximum(op_idx, 0).astype(np.int8)), pa.array(OPS)
                ),
                "id": pa.array(ids, pa.uint64(), mask=dash),
            }
        )
        if not good_rows.all():
            table = table.filter(pa.array(good_rows))
        stats.messages = table.num_rows
        return (validate_trace(table) if table.num_rows else None), stats

    def _check_utf8(
        self, buf: np.ndarray, tok: _tokens.Tokens, line_of_token: np.ndarray, bad: np.ndarray
    ) -> None:
        high = np.flatnonzero(buf >= 0x80)
        # Only tokens near a high byte can be invalid UTF-8; decode just those.
        t = np.unique(np.searchsorted(tok.end, high, side="right"))
        for i in t[t < tok.start.size]:
            try:
                bytes(buf[tok.start[i] : tok.end[i]]).decode("utf-8")
            except UnicodeDecodeError:
                line = line_of_token[i]
                if bad[line] == 0:
                    bad[line] = _R_UTF8

    def _report(
        self,
        bad_lines: np.ndarray,
        bad: np.ndarray,
        tok: _tokens.Tokens,
        buf: np.ndarray,
        first_line: int,
        stats: TextStats,
    ) -> None:
        line_start = np.concatenate([[0], tok.line_end[:-1] + 1])

        def message(i: int) -> str:
            text = bytes(buf[line_start[i] : tok.line_end[i]]).decode("utf-8", "replace")
            words = text.split("#", 1)[0].split()
            return f"{self.path}:{first_line + i + 1}: {_reason(int(bad[i]), words, len(words))}"

        if not self.skip_bad:
            raise ParseError(
                self.path, first_line + int(bad_lines[0]) + 1, message(int(bad_lines[0])).split(": ", 1)[1]
            )
        stats.skipped = bad_lines.size
        stats.examples = [message(int(i)) for i in bad_lines[:_MAX_EXAMPLES]]


def _open_input(path: PathLike) -> pa.NativeFile:
    p = existing_file(path, "a text trace")
    try:
        return pa.input_stream(str(p), compression="detect")
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(f"{p}: cannot open ({exc})") from None


def iter_text_trace(
    path: PathLike,
    *,
    skip_bad: bool = False,
    stats: TextStats | None = None,
    chunk_bytes: int | None = None,
) -> Iterator[pa.Table]:
    """Stream a text trace as validated tables, one per chunk of ``chunk_bytes``.

    Parameters
    ----------
    path : str or path-like
        The text file (``.gz`` is decompressed).
    skip_bad : bool
        Skip malformed lines (counted in ``stats``) instead of raising.
    stats : TextStats, optional
        Filled in as the file is read.
    chunk_bytes : int, optional
        Bytes parsed at a time; memory is a small multiple of this. By default up to
        8 MiB, smaller for small files so that every core gets a share.

    Raises
    ------
    ParseError
        A malformed line, when ``skip_bad`` is False: ``trace.txt:12: unknown op 'cal'
        (must be one of call, return, send)``.
    TraceFileError
        The file is missing or unreadable.

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> path = os.path.join(tempfile.mkdtemp(), "t.txt")
    >>> _ = pathlib.Path(path).write_text("1.5 call client web 1\\n1.75 return web client 1\\n")
    >>> [t.num_rows for t in iter_text_trace(path)]
    [2]
    """
    stats = stats if stats is not None else TextStats()
    parser = _ChunkParser(str(path), skip_bad)
    workers = min(os.cpu_count() or 1, 4)
    pending: deque[Future[tuple[pa.Table | None, TextStats]]] = deque()
    # Chunks are parsed in threads (numpy releases the GIL) and yielded in file order,
    # with at most `workers + 1` chunks in memory.
    with _open_input(path) as stream, ThreadPoolExecutor(workers) as pool:
        if chunk_bytes is None:
            size = DEFAULT_CHUNK_BYTES if str(path).endswith(".gz") else Path(path).stat().st_size
            chunk_bytes = int(np.clip(size // (2 * workers) + 1, 1 << 20, DEFAULT_CHUNK_BYTES))
        for chunk, first_line in _chunks(stream, path, chunk_bytes):
            if chunk is not None:
                pending.append(pool.submit(parser.parse, np.frombuffer(chunk, np.uint8), first_line))
            while pending and (chunk is None or len(pending) > workers):
                table = _add_stats(stats, pending.popleft())
                if table is not None:
                    yield table


def _chunks(stream: pa.NativeFile, path: PathLike, chunk_bytes: int) -> Iterator[tuple[bytes | None, int]]:
    """Blocks of whole lines (each ending in a newline) with the number of lines before
    them; ``(None, lines)`` at the end of the file."""
    first_line = 0
    carry = b""
    while True:
        try:
            block = stream.read(chunk_bytes)
        except (pa.ArrowException, OSError, EOFError) as exc:
            raise TraceFileError(f"{path}: read failed after line {first_line} ({exc})") from None
        last = not block
        if first_line == 0 and not carry and block.startswith(b"\xef\xbb\xbf"):
            block = block[3:]  # a UTF-8 byte-order mark, as some editors write
        block = carry + block
        cut = len(block) if last else block.rfind(b"\n") + 1
        carry = block[cut:]
        if cut:
            chunk = block[:cut] if block.endswith(b"\n", 0, cut) else block[:cut] + b"\n"
            yield chunk, first_line
            first_line += chunk.count(b"\n")
        if last:
            yield None, first_line
            return


def _add_stats(stats: TextStats, future: Future[tuple[pa.Table | None, TextStats]]) -> pa.Table | None:
    """A parsed chunk's table, its counts added to ``stats``."""
    table, part = future.result()
    stats.lines += part.lines
    stats.messages += part.messages
    stats.skipped += part.skipped
    stats.hashed_ids += part.hashed_ids
    stats.examples.extend(part.examples[: _MAX_EXAMPLES - len(stats.examples)])
    return table


def read_text_trace(path: PathLike, *, skip_bad: bool = False, stats: TextStats | None = None) -> pa.Table:
    """Read a whole text trace into one validated table (see ``iter_text_trace``).

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> path = os.path.join(tempfile.mkdtemp(), "t.txt")
    >>> _ = pathlib.Path(path).write_text("# a comment\\n0.000000001 send a b -\\n")
    >>> t = read_text_trace(path)
    >>> t["timestamp"].cast("int64").to_pylist(), t["id"].to_pylist()
    ([1], [None])
    """
    tables = list(iter_text_trace(path, skip_bad=skip_bad, stats=stats))
    if not tables:
        return empty_trace()
    return pa.concat_tables(tables).unify_dictionaries().combine_chunks()


def _check_text_safe(name: str, col: pa.ChunkedArray | pa.Array) -> None:
    # Only names in use matter: a dictionary may hold entries no row refers to.
    values = (
        col.dictionary.take(pc.unique(col.indices)) if isinstance(col, pa.DictionaryArray) else pc.unique(col)
    )
    bad = pc.match_substring_regex(values, r"[\s#]|^$")
    if pc.any(bad).as_py():
        value = values.filter(bad)[0].as_py()
        raise SchemaError(
            f"{name} {value!r} cannot be written to the text form "
            "(names there must be non-empty, without whitespace or '#'); write Parquet instead"
        )


def format_text_lines(table: pa.Table) -> pa.Buffer:
    """Format a validated trace as text lines (UTF-8 bytes, each ending in a newline).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = validate_trace(pa.table({"timestamp": pa.array([-1_500_000_000], pa.timestamp("ns")),
    ...     "sender": ["a"], "receiver": ["b"], "op": ["send"], "id": pa.array([None], pa.uint64())}))
    >>> format_text_lines(t).to_pybytes()
    b'-1.500000000 send a b -\\n'
    """
    table = table.combine_chunks()
    if table.num_rows == 0:
        return pa.py_buffer(b"")
    ns = table["timestamp"].cast(pa.int64()).to_numpy()
    # |ns| as uint64: np.abs of -2**63 would overflow.
    mag = np.where(ns < 0, (-(ns + 1)).astype(np.uint64) + np.uint64(1), ns.astype(np.uint64))
    giga = np.uint64(1_000_000_000)
    sec = pc.cast(pa.array(mag // giga), pa.string())
    frac = pc.utf8_lpad(pc.cast(pa.array(mag % giga), pa.string()), 9, "0")
    sign = pa.array(np.where(ns < 0, "-", ""))
    ts = pc.binary_join_element_wise(pc.binary_join_element_wise(sign, sec, ""), frac, ".")
    cols = []
    for name in ("sender", "receiver"):
        chunk = table[name].chunk(0)
        _check_text_safe(name, chunk)
        cols.append(chunk.dictionary_decode() if isinstance(chunk, pa.DictionaryArray) else chunk)
    op = table["op"].chunk(0).dictionary_decode()
    ids = pc.fill_null(pc.cast(table["id"].chunk(0), pa.string()), "-")
    lines = pc.binary_join_element_wise(ts, op, cols[0], cols[1], ids, pa.scalar("", pa.string()), " ")
    # Each line now ends in " "; swap it for the newline in the raw bytes.
    offsets = np.frombuffer(lines.buffers()[1], np.int32, lines.offset + len(lines) + 1)[lines.offset :]
    data = np.frombuffer(lines.buffers()[2], np.uint8)[offsets[0] : offsets[-1]].copy()
    data[offsets[1:] - offsets[0] - 1] = 10
    return pa.py_buffer(data)


def write_text_trace(tables: pa.Table | Iterable[pa.Table], path: PathLike) -> int:
    """Write a trace (or a stream of trace tables) in the text form; returns the message count.

    The output is written under a temporary name and moved into place when complete.
    A name containing whitespace or ``#`` cannot be represented and raises ``SchemaError``.
    """
    p = Path(path)
    parts = [tables] if isinstance(tables, pa.Table) else tables
    rows = 0
    gzip = "gzip" if p.suffix == ".gz" else None
    with atomic_output(p) as tmp, pa.output_stream(str(tmp), compression=gzip) as out:
        out.write(TEXT_HEADER.encode())
        for table in parts:
            table = validate_trace(table)
            out.write(format_text_lines(table))
            rows += table.num_rows
    return rows
