"""Message traces in Parquet: whole-table and streaming reads and writes.

Files are zstd-compressed, timestamps and ids delta-encoded (sorted nanosecond times
shrink to a few bits each), node names dictionary-encoded. The file's key-value
metadata holds ``wirepath`` = JSON ``{"schema_version": 1, "provenance": {...}}``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracefmt._files import (
    existing_file,
    partial_path,
    publish,
    remove_quietly,
    writable_output,
    write_errors,
)
from tracefmt.errors import SchemaError, TraceFileError
from tracefmt.schema import CORE_COLUMNS, SCHEMA_VERSION, empty_trace, sort_trace, validate_trace

__all__ = [
    "DEFAULT_ROW_GROUP",
    "METADATA_KEY",
    "TraceMetadata",
    "TraceWriter",
    "iter_trace",
    "read_trace",
    "read_trace_metadata",
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
    are not parts: several traces side by side are not one.

    Examples
    --------
    >>> import tempfile
    >>> trace_parts(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    tracefmt.errors.TraceFileError: ...: a directory without trace parts (part-*.parquet files)
    """
    p = Path(path)
    if not p.is_dir():
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


class TraceWriter:
    """Write a trace to Parquet piece by piece, with bounded memory.

    The first table written fixes the schema; later ones are validated and must have
    the same columns. The file appears under its name only when the writer closes
    without error, so a failed run never leaves a half-written trace behind (and what
    was there before stays); a failed write (a full disk) raises one ``TraceFileError``
    naming the output. Provenance may be updated until then (counts known only at the end).

    Examples
    --------
    >>> import tempfile, os, pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([1, 2], pa.timestamp("ns")),
    ...     "sender": ["a", "b"], "receiver": ["b", "a"], "op": ["call", "return"],
    ...     "id": pa.array([9, 9], pa.uint64())})
    >>> path = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> with TraceWriter(path, provenance={"source": "doctest"}) as w:
    ...     w.write(t)
    ...     w.write(t)
    >>> read_trace(path).num_rows
    4
    """

    def __init__(
        self,
        path: PathLike,
        *,
        provenance: Mapping[str, Any] | None = None,
        row_group_size: int = DEFAULT_ROW_GROUP,
    ) -> None:
        self.path = writable_output(path)
        self.provenance: dict[str, Any] = dict(provenance or {})
        self.row_group_size = row_group_size
        self.rows = 0
        self._tmp = partial_path(self.path)
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

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
        with write_errors(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self._tmp,
                self._schema,
                compression="zstd",
                compression_level=3,
                use_dictionary=[n for n in schema.names if n not in delta],
                column_encoding=dict.fromkeys(delta, "DELTA_BINARY_PACKED"),
                write_statistics=["timestamp"],
                write_page_checksum=True,
            )

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        """Append messages (validated against the schema fixed by the first write)."""
        table = validate_trace(table)
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
        table = pa.concat_tables(self._pending).unify_dictionaries().combine_chunks()
        full = table.num_rows if final else table.num_rows - table.num_rows % self.row_group_size
        if full:
            self._writer.write_table(table.slice(0, full), row_group_size=self.row_group_size)
        rest = table.slice(full)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows

    def close(self) -> None:
        """Finish the file: flush, write provenance into the footer, move into place.
        If that fails (a full disk, Ctrl-C), the partial file is removed."""
        try:
            if self._writer is None:
                self._open_writer(empty_trace().schema)
            assert self._writer is not None
            with write_errors(self.path):
                self._flush(final=True)
                self._writer.add_key_value_metadata(_metadata_bytes(self.provenance))
                self._writer.close()
                self._writer = None
                publish(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the partial file; nothing appears at ``path`` (what was there stays)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            # Closing flushes what is buffered, which fails again on a full disk.
            with contextlib.suppress(OSError, pa.ArrowException):
                writer.close()
        remove_quietly(self._tmp)


def write_trace(
    table: pa.Table,
    path: PathLike,
    *,
    provenance: Mapping[str, Any] | None = None,
    row_group_size: int = DEFAULT_ROW_GROUP,
) -> None:
    """Validate a trace and write it to one Parquet file (zstd, row groups of ``row_group_size``).

    Parameters
    ----------
    table : pyarrow.Table
        The messages (see ``validate_trace`` for the coercions applied).
    path : str or path-like
        Output file; written atomically.
    provenance : mapping, optional
        Recorded in the file metadata: sources, offsets applied, drops.
    row_group_size : int
        Rows per Parquet row group.
    """
    with TraceWriter(path, provenance=provenance, row_group_size=row_group_size) as writer:
        writer.write(table)
