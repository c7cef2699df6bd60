"""Message traces in Parquet: whole-table and streaming reads and writes, of one file
or of a dataset directory of parts.

Files are zstd-compressed, timestamps and ids delta-encoded (sorted nanosecond times
shrink to a few bits each), node names dictionary-encoded. The file's key-value
metadata holds ``wirepath`` = JSON ``{"schema_version": 1, "provenance": {...}}``.
A dataset is ``DIR/part-00000.parquet``, ``part-00001.parquet``, ... in time order,
each such a file, plus ``DIR/_common_metadata`` (the schema and metadata alone), as
DuckDB, pandas, Spark and Dask read a directory of Parquet files.
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracefmt._files import (
    OutputFile,
    SequentialFile,
    atomic_output,
    existing_file,
    is_directory,
    write_errors,
)
from tracefmt.errors import ParameterError, SchemaError, TraceFileError
from tracefmt.identify import TRACE, hint
from tracefmt.schema import CORE_COLUMNS, SCHEMA_VERSION, empty_trace, sort_trace, validate_trace
from tracefmt.units import UNIT_NS, format_instant_ns, parse_duration_ns

__all__ = [
    "COMMON_METADATA",
    "DEFAULT_ROW_GROUP",
    "MAX_PARTS",
    "METADATA_KEY",
    "Partitioning",
    "TraceMetadata",
    "TraceWriter",
    "iter_trace",
    "read_trace",
    "read_trace_metadata",
    "trace_parts",
    "write_trace",
]

METADATA_KEY = "wirepath"
DEFAULT_ROW_GROUP = 1 << 20

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TraceMetadata:
    """What a trace file says about itself.

    Attributes
    ----------
    path : str
        The file.
    messages : int
        Number of rows.
    row_groups : int
        Number of Parquet row groups.
    schema_version : int or None
        The trace schema version, None for Parquet files not written by wirepath.
    provenance : dict
        Sources, clock offsets applied, drops: whatever the writer recorded.
    schema : pyarrow.Schema
        The stored Arrow schema.
    """

    path: str
    messages: int
    row_groups: int
    schema_version: int | None
    provenance: dict[str, Any] = field(default_factory=dict)
    schema: pa.Schema | None = None


def _open(path: PathLike) -> pq.ParquetFile:
    p = existing_file(path, "a Parquet trace file")
    try:
        # Pages carry CRC-32 checksums (written by TraceWriter): a damaged page is an
        # error, never silently altered timestamps.
        return pq.ParquetFile(p, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(f"{p}: not a readable Parquet trace ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def trace_parts(path: PathLike) -> list[Path]:
    """The files a trace is read from: ``path`` itself, or, for a directory (a
    partitioned dataset such as the live agent's ``DIR/trace/``), its parts
    ``part-*.parquet`` in name order, which is time order (a part being written is
    hidden under another name until it is whole). Other Parquet files in a directory
    are not parts: several traces side by side are not one; nor is the schema file
    ``_common_metadata`` that ``TraceWriter`` writes beside them.

    Examples
    --------
    >>> import tempfile
    >>> trace_parts(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    tracefmt.errors.TraceFileError: ...: a directory without trace parts (part-*.parquet files)
    """
    p = Path(path)
    if not is_directory(p):
        return [p]
    parts = sorted(f for f in p.glob("part-*.parquet") if f.is_file())
    if not parts:
        raise TraceFileError(f"{p}: a directory without trace parts (part-*.parquet files)")
    return parts


def read_trace_metadata(path: PathLike) -> TraceMetadata:
    """Read a trace file's footer: row count, schema version and provenance.

    Of a dataset directory (``trace_parts``): the messages and row groups of all its
    parts, and the provenance of the last one.

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([5], pa.timestamp("ns")), "sender": ["a"],
    ...     "receiver": ["b"], "op": ["send"], "id": pa.array([None], pa.uint64())})
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> write_trace(t, path, provenance={"source": "doctest"})
    >>> read_trace_metadata(path).provenance
    {'source': 'doctest'}
    """
    parts = trace_parts(path)
    if len(parts) == 1 and parts[0] == Path(path):
        return _metadata(_open(path), path)
    metas = [_metadata(_open(f), f) for f in parts]
    versions = [m.schema_version for m in metas if m.schema_version is not None]
    return TraceMetadata(
        path=str(path),
        messages=sum(m.messages for m in metas),
        row_groups=sum(m.row_groups for m in metas),
        schema_version=max(versions) if versions else None,
        provenance=metas[-1].provenance,
        schema=metas[-1].schema,
    )


def _metadata(pf: pq.ParquetFile, path: PathLike) -> TraceMetadata:
    """The footer of an open file (see ``read_trace_metadata``)."""
    raw = (pf.metadata.metadata or {}).get(METADATA_KEY.encode())
    version, provenance = None, {}
    if raw is not None:
        try:
            doc = json.loads(raw)
            version, provenance = doc.get("schema_version"), doc.get("provenance", {})
        except (ValueError, AttributeError):
            raise TraceFileError(f"{path}: wirepath metadata is not valid JSON") from None
    return TraceMetadata(
        path=str(path),
        messages=pf.metadata.num_rows,
        row_groups=pf.metadata.num_row_groups,
        schema_version=version,
        provenance=provenance,
        schema=pf.schema_arrow,
    )


def _open_checked(path: PathLike) -> pq.ParquetFile:
    """Open a trace file, refusing one written by a newer wirepath."""
    pf = _open(path)
    meta = _metadata(pf, path)
    if "timestamp" not in meta.schema.names:
        # Another of wirepath's Parquet files (instances, trend results): say which.
        said = hint(path, unless=TRACE)
        if said:
            raise SchemaError(f"{path}: not a trace{said}")
    if meta.schema_version is not None and meta.schema_version > SCHEMA_VERSION:
        raise TraceFileError(
            f"{meta.path}: trace schema version {meta.schema_version} is newer than this "
            f"wirepath reads (up to {SCHEMA_VERSION}); upgrade wirepath"
        )
    return pf


def _projection(schema: pa.Schema, columns: Sequence[str] | None) -> list[str] | None:
    if columns is None:
        return None
    for name in columns:
        if name not in schema.names:
            raise SchemaError(f"no column {name!r} in this trace (it has {', '.join(schema.names)})")
    return list(dict.fromkeys([*CORE_COLUMNS, *columns]))


def read_trace(path: PathLike, *, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a whole trace file into memory, validated, one chunk per column.

    Parameters
    ----------
    path : str or path-like
        A Parquet trace, or a directory of trace parts (``trace_parts``), read as one.
    columns : sequence of str, optional
        Optional columns to read besides the core ones (default: all columns).

    Returns
    -------
    pyarrow.Table
        The validated trace; node dictionaries unified across row groups.

    Raises
    ------
    TraceFileError
        The file is missing, truncated or not Parquet.
    SchemaError
        The file's columns do not follow the trace schema.
    """
    parts = trace_parts(path)
    if len(parts) > 1 or parts[0] != Path(path):
        tables = [read_trace(f, columns=columns) for f in parts]
        try:
            joined = pa.concat_tables(tables)
        except pa.ArrowInvalid:
            raise SchemaError(f"{path}: its parts do not have the same columns") from None
        return validate_trace(sort_trace(joined.unify_dictionaries().combine_chunks()))
    pf = _open_checked(path)
    try:
        table = pf.read(columns=_projection(pf.schema_arrow, columns))
    except (pa.ArrowException, OSError) as exc:
        raise TraceFileError(f"{path}: cannot read Parquet data ({_reason(exc)})") from None
    table = validate_trace(table)
    if any(col.num_chunks > 1 for col in table.columns):
        table = table.unify_dictionaries().combine_chunks()
    return table


def iter_trace(
    path: PathLike, *, batch_size: int = DEFAULT_ROW_GROUP, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """Stream a trace as validated tables of at most ``batch_size`` rows each.

    Memory stays bounded by the batch size whatever the file size, so this is how
    traces larger than memory are processed.

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array(range(5), pa.timestamp("ns")),
    ...     "sender": ["a"] * 5, "receiver": ["b"] * 5, "op": ["send"] * 5,
    ...     "id": pa.array([None] * 5, pa.uint64())})
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> write_trace(t, path)
    >>> [b.num_rows for b in iter_trace(path, batch_size=2)]
    [2, 2, 1]
    """
    if batch_size <= 0:
        raise SchemaError(f"batch_size must be positive, not {batch_size}")
    for part in trace_parts(path):  # a dataset's parts are in time order, one after another
        pf = _open_checked(part)
        cols = _projection(pf.schema_arrow, columns)
        try:
            for batch in pf.iter_batches(batch_size=batch_size, columns=cols):
                yield validate_trace(batch)
        except (pa.ArrowException, OSError) as exc:
            raise TraceFileError(f"{part}: cannot read Parquet data ({_reason(exc)})") from None


def _metadata_bytes(provenance: Mapping[str, Any] | None) -> dict[bytes, bytes]:
    doc = {"schema_version": SCHEMA_VERSION, "provenance": dict(provenance or {})}
    return {METADATA_KEY.encode(): json.dumps(doc, sort_keys=True, default=str).encode()}


#: Most parts in a dataset: their names have five digits, and name order is time order.
MAX_PARTS = 100_000

#: What a dataset directory may hold besides nothing: its parts and its schema file.
_PART_GLOB = "part-*.parquet"
COMMON_METADATA = "_common_metadata"

_COUNT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kKMG]?)\s*$")
_COUNT_SCALE = {"": 1, "k": 1_000, "K": 1_000, "M": 1_000_000, "G": 1_000_000_000}


@dataclass(frozen=True)
class Partitioning:
    """How a trace is cut into the parts of a dataset: a number of messages per part,
    or a time span per part.

    Time parts cover ``[k * span_ns, (k + 1) * span_ns)`` nanoseconds since
    1970-01-01 UTC, so they are aligned to the wall clock (hour parts start on the
    hour); windows without messages have no part. Exactly one of the two is given.

    Attributes
    ----------
    messages : int or None
        Messages per part (the last part holds the rest).
    span_ns : int or None
        Nanoseconds of trace time per part.

    Examples
    --------
    >>> Partitioning.parse("5M")
    Partitioning(messages=5000000, span_ns=None)
    >>> Partitioning.parse("1h")
    Partitioning(messages=None, span_ns=3600000000000)
    >>> Partitioning.parse("5m")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: partition '5m' is ambiguous: write 5min for minutes or 5M for ...
    """

    messages: int | None = None
    span_ns: int | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.span_ns is None):
            raise ParameterError("a partitioning has either messages per part or a time span per part")
        value = self.messages if self.messages is not None else self.span_ns
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            what = "messages per part" if self.messages is not None else "span_ns per part"
            raise ParameterError(f"{what} must be a positive integer, not {value!r}")

    @classmethod
    def parse(cls, text: str) -> Partitioning:
        """Read a partitioning as people write it.

        A count of messages per part is an integer, optionally with ``K`` (thousand),
        ``M`` (million) or ``G`` (billion): ``5000000``, ``500K``, ``5M``, ``2.5M``.
        Anything else is a time span per part (``tracefmt.units.parse_duration_ns``,
        with a unit): ``30min``, ``1h``, ``10s``. A lowercase ``m`` is refused:
        ``5m`` would be minutes there and read as millions too easily.

        Examples
        --------
        >>> Partitioning.parse("500K").messages, Partitioning.parse("30min").span_ns
        (500000, 1800000000000)
        """
        m = _COUNT.match(text)
        if m is not None:
            count = Decimal(m.group(1)) * _COUNT_SCALE[m.group(2)]
            if count != count.to_integral_value() or count < 1:
                raise ParameterError(f"partition {text!r}: messages per part must be a whole number >= 1")
            return cls(messages=int(count))
        if re.fullmatch(r"\s*[\d.]+\s*m\s*", text):
            raise ParameterError(
                f"partition {text!r} is ambiguous: write {text.strip()[:-1]}min for minutes "
                f"or {text.strip()[:-1]}M for millions of messages"
            )
        invalid = ParameterError(
            f"invalid partition {text!r} (messages per part: 5000000, 500K, 5M; "
            "or a time span per part with a unit: 30min, 1h)"
        )
        if not re.search(r"[a-zµμ]\s*$", text):
            raise invalid
        try:
            span = parse_duration_ns(text)
        except ParameterError as exc:
            if str(exc).startswith("invalid duration"):
                raise invalid from None
            raise ParameterError(f"partition: {exc}") from None  # negative, too long
        if span < 1:
            raise ParameterError(f"partition {text!r}: a part must span at least 1 ns")
        return cls(span_ns=span)

    @classmethod
    def of(cls, value: Partitioning | str | None) -> Partitioning | None:
        """``value`` as a Partitioning: None stays None, a string is parsed (``parse``).

        Examples
        --------
        >>> Partitioning.of(None) is None, Partitioning.of("1K").messages
        (True, 1000)
        """
        if value is None or isinstance(value, Partitioning):
            return value
        if isinstance(value, str):
            return cls.parse(value)
        raise ParameterError(
            f"partition must be a Partitioning or a string such as '1h' or '5M', not {type(value).__name__}"
        )

    def describe(self) -> str:
        """The size of a part in words.

        Examples
        --------
        >>> Partitioning(messages=5_000_000).describe(), Partitioning.parse("90min").describe()
        ('5,000,000 messages', '90 min')
        """
        if self.messages is not None:
            return f"{self.messages:,} messages"
        assert self.span_ns is not None
        unit = next(u for u in ("h", "min", "s", "ms", "us", "ns") if self.span_ns % UNIT_NS[u] == 0)
        return f"{self.span_ns // UNIT_NS[unit]:,} {unit}"


def _is_dataset_file(path: Path) -> bool:
    return path.is_file() and (path.name == COMMON_METADATA or fnmatch.fnmatchcase(path.name, _PART_GLOB))


def _check_dataset_target(path: Path) -> None:
    """Raise unless a dataset may be written at ``path``: nothing there, an empty
    directory, or a dataset (only parts and its schema file), which it replaces."""
    if path.is_dir():
        other = next((f for f in sorted(path.iterdir()) if not _is_dataset_file(f)), None)
        if other is not None:
            raise TraceFileError(
                f"{path}: holds {other.name}, which is not part of a trace dataset; "
                "give a new or empty directory (only a dataset is replaced by one)"
            )
    elif path.exists() or path.is_symlink():
        raise TraceFileError(f"{path}: is a file (a dataset is a directory; give a directory name)")


class _DatasetWriter:
    """The parts of a partitioned trace, written into a hidden sibling directory of
    their own (an ``OutputFile``) and put in place whole by ``close`` (see ``TraceWriter``)."""

    def __init__(self, path: PathLike, partitioning: Partitioning, row_group_size: int) -> None:
        if not str(path):
            raise ParameterError("no output directory named (give a directory name)")
        self.path = Path(path)
        _check_dataset_target(self.path)
        self._out = OutputFile(self.path, directory=True)
        self.partitioning = partitioning
        self.row_group_size = row_group_size
        self._part: TraceWriter | None = None
        self._part_rows = 0
        self._window: int | None = None
        self._last_ns: int | None = None
        self._types: list[tuple[str, pa.DataType]] | None = None
        self._schema: pa.Schema | None = None
        # Each finished part and the metadata it was written with: one that differs from
        # the final provenance (counts known only at the end) is rewritten by close.
        self._done: list[tuple[Path, dict[bytes, bytes]]] = []
        self._closed = False

    @property
    def parts(self) -> int:
        return len(self._done) + (self._part is not None)

    def _check(self, table: pa.Table) -> np.ndarray:
        """The table's times, after checking its columns and time order against what came before."""
        types = [(f.name, f.type) for f in table.schema]
        if self._types is None:
            self._types, self._schema = types, table.schema.remove_metadata()
        elif types != self._types:
            raise SchemaError(
                f"columns {[f'{n}: {t}' for n, t in types]} differ from the first write's "
                f"{[f'{n}: {t}' for n, t in self._types]} (every part has the same schema)"
            )
        ts = table["timestamp"].cast(pa.int64()).to_numpy()
        if not len(ts):
            return ts
        back = np.flatnonzero(ts[1:] < ts[:-1])
        prev, cur = (self._last_ns, int(ts[0])) if not len(back) else (int(ts[back[0]]), int(ts[back[0] + 1]))
        if prev is not None and cur < prev:
            raise SchemaError(
                f"{self.path}: messages are not in time order ({format_instant_ns(prev)} before "
                f"{format_instant_ns(cur)}); a dataset's parts follow each other in time: "
                "sort the trace first (wirepath convert --sort)"
            )
        self._last_ns = int(ts[-1])
        return ts

    def write(self, table: pa.Table, provenance: Mapping[str, Any]) -> None:
        """Append validated messages, starting a new part wherever the partitioning says."""
        ts = self._check(table)
        n = len(ts)
        if self.partitioning.messages is not None:
            per_part, start = self.partitioning.messages, 0
            while start < n:  # one turn per part
                if self._part is None or self._part_rows >= per_part:
                    self._next_part(provenance)
                take = min(n - start, per_part - self._part_rows)
                self._append(table.slice(start, take))
                start += take
            return
        assert self.partitioning.span_ns is not None
        windows = ts // self.partitioning.span_ns  # floor: times before 1970 too
        cuts = [0, *(np.flatnonzero(windows[1:] != windows[:-1]) + 1).tolist(), n]
        for lo, hi in itertools.pairwise(cuts):  # one turn per window
            if hi > lo:
                if self._part is None or int(windows[lo]) != self._window:
                    self._next_part(provenance)
                    self._window = int(windows[lo])
                self._append(table.slice(lo, hi - lo))

    def _append(self, table: pa.Table) -> None:
        assert self._part is not None
        self._part._append(table)
        self._part_rows += table.num_rows

    def widen(self, schema: pa.Schema) -> None:
        """Go on with the columns of ``schema``: the part being written is widened now,
        the finished ones when the dataset closes."""
        if self._types is None:
            return
        self._types = [(f.name, f.type) for f in schema]
        self._schema = schema
        if self._part is not None:
            self._part._widen(schema)

    def _next_part(self, provenance: Mapping[str, Any]) -> None:
        if self._part is not None:
            self._finish_part(provenance)
        if len(self._done) >= MAX_PARTS:
            raise ParameterError(
                f"{self.path}: more than {MAX_PARTS:,} parts of {self.partitioning.describe()}; "
                "choose larger parts"
            )
        part = self._out.open() / f"part-{len(self._done):05d}.parquet"
        self._part = TraceWriter(part, provenance=provenance, row_group_size=self.row_group_size)
        self._part_rows = 0

    def _finish_part(self, provenance: Mapping[str, Any]) -> None:
        part, self._part = self._part, None
        assert part is not None
        part.provenance = dict(provenance)
        part.close()
        self._done.append((part.path, _metadata_bytes(provenance)))

    def _rewrite(self, path: Path, provenance: Mapping[str, Any]) -> None:
        """Write a finished part again with other provenance, a row group at a time."""
        with (
            _open(path) as pf,
            TraceWriter(path, provenance=provenance, row_group_size=self.row_group_size) as w,
        ):
            for i in range(pf.num_row_groups):
                rows = pf.read_row_group(i)
                w._append(with_fields(rows, self._schema) if self._schema is not None else rows)

    def close(self, provenance: Mapping[str, Any]) -> None:
        """Finish the last part, bring every part's provenance up to date, write the
        schema file and put the directory in place."""
        if self._closed:  # a second close must not publish an empty dataset over this one
            return
        try:
            if self._part is None and not self._done:
                self._next_part(provenance)  # no messages: one empty part has the columns
                if self._schema is not None:
                    self._append(self._schema.empty_table())
            self._finish_part(provenance)
            final = _metadata_bytes(provenance)
            for path, meta in self._done:
                if meta != final or (
                    self._schema is not None and pq.read_schema(path).names != self._schema.names
                ):
                    self._rewrite(path, provenance)
            schema = self._schema if self._schema is not None else empty_trace().schema
            with write_errors(self.path):
                # Spark and Dask take the schema from here without opening a part.
                with atomic_output(self._out.open() / COMMON_METADATA) as common:
                    pq.write_metadata(schema.with_metadata(final), common)
                _check_dataset_target(self.path)  # nothing else appeared there meanwhile
                self._out.commit()
            self._closed = True
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        part, self._part = self._part, None
        if part is not None:
            part.abort()
        self._out.discard()


#: Columns nearly unique per request: a dictionary page would repeat them in every row group.
_NEAR_UNIQUE = frozenset({"trace_id", "span_id", "request_id"})


def as_listed(col: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
    """A string column (or dictionary of strings) as a dictionary<int32, string> that lists
    its non-null values in order, repeats and all: no hashing, for values nearly all
    different (trace ids), which a dictionary page would not shrink anyway.

    Examples
    --------
    >>> d = as_listed(pa.array(["a", None, "b", "a"]))
    >>> d.indices.to_pylist(), d.dictionary.to_pylist()
    ([0, None, 1, 2], ['a', 'b', 'a'])
    """
    if isinstance(col, pa.ChunkedArray) and pa.types.is_dictionary(col.type) and col.num_chunks:
        # The chunks' dictionaries one after the other, each chunk's indices shifted.
        indices, values, at = [], [], 0
        for chunk in col.chunks:
            indices.append(pc.add(chunk.indices.cast(pa.int32()), pa.scalar(at, pa.int32())))
            values.append(chunk.dictionary.cast(pa.string()))
            at += len(chunk.dictionary)
        return pa.DictionaryArray.from_arrays(pa.concat_arrays(indices), pa.concat_arrays(values))
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)
    idx = np.cumsum(valid, dtype=np.int64) - 1
    indices = pa.array(idx.astype(np.int32), pa.int32(), mask=~valid)
    return pa.DictionaryArray.from_arrays(indices, col.drop_null().cast(pa.string()))


def with_fields(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s columns in the order and types of ``schema``, nulls for those it lacks.

    Examples
    --------
    >>> t = with_fields(pa.table({"a": [1]}), pa.schema([("a", pa.int64()), ("b", pa.string())]))
    >>> t.column_names, t["b"].null_count
    (['a', 'b'], 1)
    """
    n = table.num_rows
    cols = [table[f.name] if f.name in table.column_names else pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(cols, schema=schema.with_metadata(table.schema.metadata))


class TraceWriter:
    """Write a trace to Parquet piece by piece, with bounded memory: one file, or a
    dataset of parts.

    The first table written fixes the schema; later ones are validated and must have
    the same columns. The file appears under its name only when the writer closes
    without error, so a failed run never leaves a half-written trace behind (and what
    was there before stays); a failed write (a full disk) raises one ``TraceFileError``
    naming the output. Provenance may be updated until then (counts known only at the end).

    With ``partition``, ``path`` is a directory: the messages, which must come in time
    order, are cut into ``part-00000.parquet``, ``part-00001.parquet``, ... (each a
    trace file with the same schema, schema version and provenance; a part written
    before the provenance changed is written again at the end), plus
    ``_common_metadata`` (the schema and metadata, for Spark and Dask). The parts are
    written into a hidden sibling directory, which replaces ``path`` only once whole:
    the dataset appears complete or not at all, and a dataset already there stays
    until then. A directory holding anything else is refused.

    Parameters
    ----------
    path : str or path-like
        The file, or with ``partition`` the dataset directory.
    provenance : mapping, optional
        Recorded in the file metadata: sources, offsets applied, drops.
    row_group_size : int
        Rows per Parquet row group.
    partition : Partitioning or str, optional
        Write a dataset with parts of this many messages or this time span
        (``Partitioning.parse``: ``"5M"``, ``"1h"``); None writes one file.
    may_add : sequence of str
        Optional or user columns a write may bring after the first (the rows before
        have nulls there: what was written is written again, once per such column) or
        leave out (nulls). A capture learns only as it goes whether a column such as
        ``trace_id`` has any value; a trace without one does not get it.

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([1, 2], pa.timestamp("ns")),
    ...     "sender": ["a", "b"], "receiver": ["b", "a"], "op": ["call", "return"],
    ...     "id": pa.array([9, 9], pa.uint64())})
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> with TraceWriter(path, provenance={"source": "doctest"}) as w:
    ...     w.write(t)
    ...     w.write(t.slice(1))
    >>> read_trace(path).num_rows
    3
    >>> ds = os.path.join(tempfile.mkdtemp(), "t")
    >>> with TraceWriter(ds, partition="2") as w:
    ...     w.write(t)
    ...     w.write(t.slice(1))
    >>> sorted(os.listdir(ds)), read_trace(ds).num_rows
    (['_common_metadata', 'part-00000.parquet', 'part-00001.parquet'], 3)
    """

    def __init__(
        self,
        path: PathLike,
        *,
        provenance: Mapping[str, Any] | None = None,
        row_group_size: int = DEFAULT_ROW_GROUP,
        partition: Partitioning | str | None = None,
        may_add: Sequence[str] = (),
    ) -> None:
        self.partition = Partitioning.of(partition)
        self.may_add = frozenset(may_add)
        self._known: pa.Schema | None = None  # the columns so far (with may_add)
        self._dataset: _DatasetWriter | None = None
        self._out: OutputFile | None = None
        if self.partition is not None:
            self._dataset = _DatasetWriter(path, self.partition, row_group_size)
            self.path = self._dataset.path
        else:
            self._out = OutputFile(path)
            self.path = self._out.path
        self.provenance: dict[str, Any] = dict(provenance or {})
        self.row_group_size = row_group_size
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._sink: SequentialFile | None = None  # a FIFO or device written into
        self._schema: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._closed = False

    @property
    def parts(self) -> int:
        """Files written so far: the parts of a dataset, 1 for one file."""
        return self._dataset.parts if self._dataset is not None else 1

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _open_writer(self, schema: pa.Schema) -> None:
        # Integer columns (times, ids, counts) delta-encode far better than dictionaries.
        delta = [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)]
        self._schema = schema.remove_metadata()
        assert self._out is not None
        with write_errors(self.path):
            where: Path | SequentialFile = self._out.open()
            if self._out.direct:
                where = self._sink = SequentialFile(where)
            self._writer = pq.ParquetWriter(
                where,
                self._schema,
                compression="zstd",
                # Random ids compress no better at level 3, and take twice as long there.
                compression_level={n: 1 if n in _NEAR_UNIQUE else 3 for n in schema.names},
                use_dictionary=[n for n in schema.names if n not in delta and n not in _NEAR_UNIQUE],
                column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
                write_statistics=["timestamp"],
                write_page_checksum=True,
            )

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        """Append messages (validated against the schema fixed by the first write)."""
        table = validate_trace(table)
        if self.may_add:
            table = self._conform(table)
        if self._dataset is not None:
            self._dataset.write(table, self.provenance)
            self.rows += table.num_rows
            return
        self._append(table)

    def _conform(self, table: pa.Table) -> pa.Table:
        """``table`` with the columns so far: those of ``may_add`` it lacks as nulls; the
        ones it brings first added to the trace (:meth:`_widen`)."""
        if self._known is None:
            self._known = table.schema.remove_metadata()
            return table
        new = [f for f in table.schema if f.name not in self._known.names]
        if any(f.name not in self.may_add for f in new):
            return table  # refused where it is written, naming the columns
        if new:
            fields = [*self._known, *new]
            self._known = validate_trace(pa.schema(fields).empty_table()).schema
            if self._dataset is not None:
                self._dataset.widen(self._known)
            else:
                self._widen(self._known)
        return with_fields(table, self._known)

    def _widen(self, schema: pa.Schema) -> None:
        """Go on with the columns of ``schema``: what is written already is written again
        with nulls in the new ones (a row group at a time)."""
        self._pending = [with_fields(t, schema) for t in self._pending]
        if self._writer is None:
            return  # nothing open yet: the next write opens with this schema
        if self._sink is not None:
            raise SchemaError(
                f"{self.path}: column(s) {[n for n in schema.names if n not in self._schema.names]} "
                "appeared after the first rows went into a pipe or device, which cannot be written "
                "again: write to a file"
            )
        assert self._out is not None
        assert self._out.tmp is not None
        with write_errors(self.path):
            self._writer.close()
            self._writer = None
            narrow = self._out.tmp.with_name(self._out.tmp.name + ".narrow")
            os.replace(self._out.tmp, narrow)
            try:
                self._open_writer(schema)
                assert self._writer is not None
                pf = pq.ParquetFile(narrow)
                try:
                    for i in range(pf.num_row_groups):
                        self._writer.write_table(with_fields(pf.read_row_group(i), schema))
                finally:
                    pf.close()
            finally:
                narrow.unlink(missing_ok=True)

    def _append(self, table: pa.Table) -> None:
        """Append a validated table to the file."""
        if self._writer is None:
            self._open_writer(table.schema)
        assert self._schema is not None
        if table.schema.names != self._schema.names:
            raise SchemaError(
                f"columns {table.schema.names} differ from the first write's {self._schema.names}"
            )
        table = table.replace_schema_metadata(None)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        # Buffer small writes so row groups stay near row_group_size.
        if self._pending_rows >= self.row_group_size:
            with write_errors(self.path):
                self._flush()

    def _flush(self, final: bool = False) -> None:
        """Write whole row groups; keep the remainder pending unless this is the end."""
        if not self._pending:
            return
        assert self._writer is not None
        # One contiguous chunk per column: pages then span the row group, which compresses
        # and reads far better than one page run per small input piece.
        table = pa.concat_tables(self._pending)
        for i, name in enumerate(table.column_names):
            if name in _NEAR_UNIQUE:  # unifying their dictionaries would hash every value again
                table = table.set_column(i, table.schema.field(i), as_listed(table[name]))
        table = table.unify_dictionaries().combine_chunks()
        full = table.num_rows if final else table.num_rows - table.num_rows % self.row_group_size
        if full:
            self._writer.write_table(table.slice(0, full), row_group_size=self.row_group_size)
        rest = table.slice(full)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> None:
        """Finish the file: flush, write provenance into the footer, move into place.
        If that fails (a full disk, Ctrl-C), the partial file is removed."""
        if self._dataset is not None:
            self._dataset.close(self.provenance)
            return
        if self._closed:  # a second close must not publish an empty trace over this one
            return
        try:
            if self._writer is None:
                self._open_writer(empty_trace().schema)
            assert self._writer is not None
            with write_errors(self.path):
                self._flush(final=True)
                self._writer.add_key_value_metadata(_metadata_bytes(self.provenance))
                self._writer.close()
                self._writer = None
                if self._sink is not None:
                    self._sink.close()
                assert self._out is not None
                self._out.commit()
            self._closed = True
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the partial file; nothing appears at ``path`` (what was there stays)."""
        if self._dataset is not None:
            self._dataset.abort()
            return
        writer, self._writer = self._writer, None
        if writer is not None:
            # Closing flushes what is buffered, which fails again on a full disk.
            with contextlib.suppress(OSError, pa.ArrowException):
                writer.close()
        if self._sink is not None:
            with contextlib.suppress(OSError):
                self._sink.close()
        if self._out is not None:
            self._out.discard()


def write_trace(
    table: pa.Table,
    path: PathLike,
    *,
    provenance: Mapping[str, Any] | None = None,
    row_group_size: int = DEFAULT_ROW_GROUP,
    partition: Partitioning | str | None = None,
) -> None:
    """Validate a trace and write it to one Parquet file (zstd, row groups of
    ``row_group_size``), or with ``partition`` to a dataset directory of parts.

    Parameters
    ----------
    table : pyarrow.Table
        The messages (see ``validate_trace`` for the coercions applied).
    path : str or path-like
        Output file, or with ``partition`` the dataset directory; written atomically.
    provenance : mapping, optional
        Recorded in the file metadata (of every part): sources, offsets applied, drops.
    row_group_size : int
        Rows per Parquet row group.
    partition : Partitioning or str, optional
        Parts of this many messages or this time span (``"5M"``, ``"1h"``, see
        ``TraceWriter``); the messages are sorted by time first (stable), as the parts
        of a dataset follow each other in time.

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> hour = 3_600_000_000_000
    >>> t = pa.table({"timestamp": pa.array([0, hour - 1, hour, 3 * hour], pa.timestamp("ns")),
    ...     "sender": ["a"] * 4, "receiver": ["b"] * 4, "op": ["send"] * 4,
    ...     "id": pa.array([None] * 4, pa.uint64())})
    >>> ds = os.path.join(tempfile.mkdtemp(), "t")
    >>> write_trace(t, ds, partition="1h")
    >>> [read_trace(p).num_rows for p in trace_parts(ds)]
    [2, 1, 1]
    """
    if partition is not None:
        table = sort_trace(validate_trace(table))
    with TraceWriter(
        path, provenance=provenance, row_group_size=row_group_size, partition=partition
    ) as writer:
        writer.write(table)
