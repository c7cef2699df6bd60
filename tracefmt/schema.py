"""The message-trace schema: one row per message, as an Arrow table.

The core columns are ``timestamp, sender, receiver, op, id``; the optional ones are
written when the source knows them. Ground-truth columns of synthetic traces start
with ``true_`` and user columns with ``x_``; inference never reads either.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt.errors import SchemaError

__all__ = [
    "CORE_COLUMNS",
    "KEY_COLUMNS",
    "NODE_TYPE",
    "OPS",
    "OPTIONAL_FIELDS",
    "OP_CALL",
    "OP_RETURN",
    "OP_SEND",
    "SCHEMA_VERSION",
    "TRACE_SCHEMA",
    "TS_TYPE",
    "empty_trace",
    "op_codes",
    "sort_trace",
    "validate_trace",
]

SCHEMA_VERSION = 1
OPS: tuple[str, ...] = ("call", "return", "send")
OP_CALL, OP_RETURN, OP_SEND = 0, 1, 2

TS_TYPE = pa.timestamp("ns", tz="UTC")
NODE_TYPE = pa.dictionary(pa.int32(), pa.string())
OP_TYPE = pa.dictionary(pa.int8(), pa.string())

TRACE_SCHEMA = pa.schema(
    [
        pa.field("timestamp", TS_TYPE, nullable=False),
        pa.field("sender", NODE_TYPE, nullable=False),
        pa.field("receiver", NODE_TYPE, nullable=False),
        pa.field("op", OP_TYPE, nullable=False),
        pa.field("id", pa.uint64(), nullable=True),
    ]
)
CORE_COLUMNS: tuple[str, ...] = tuple(TRACE_SCHEMA.names)

#: Optional columns, in the order they are stored after the core ones.
OPTIONAL_FIELDS: tuple[pa.Field, ...] = (
    pa.field("bytes", pa.uint64()),  # payload bytes of the message
    pa.field("flow", pa.uint64()),  # connection id
    pa.field("proto", NODE_TYPE),  # http, dns, redis, ..., tcp, udp
    pa.field("label", NODE_TYPE),  # e.g. "GET /cart"
    pa.field("status", NODE_TYPE),  # a return's status where its protocol gives one: "200", "503"
    pa.field("point", NODE_TYPE),  # capture point that saw the message
    # Request identity the message carried on the wire (docs/files.md, "Request keys"):
    pa.field("trace_id", NODE_TYPE),  # 32 lowercase hex digits: W3C traceparent, B3, Jaeger, grpc-trace-bin
    pa.field("span_id", NODE_TYPE),  # 16 lowercase hex digits: the sending span's id in the same header
    pa.field("request_id", NODE_TYPE),  # an opaque request id header's value: X-Request-ID, X-Correlation-ID
    # The connection a captured message travelled on (docs/files.md, "Back to the packets"):
    pa.field("src_ip", NODE_TYPE),  # the sender's address as captured: "10.0.0.1", "fe80::1"
    pa.field("src_port", pa.uint16()),
    pa.field("dst_ip", NODE_TYPE),
    pa.field("dst_port", pa.uint16()),
    pa.field("stream", pa.uint32()),  # the connection's number, as tshark's tcp.stream or udp.stream
)
#: The optional columns that say which request a message belongs to (``infer.keys``).
KEY_COLUMNS: tuple[str, ...] = ("trace_id", "request_id")
_OPTIONAL = {f.name: f for f in OPTIONAL_FIELDS}
_FREE_PREFIXES = ("true_", "x_")
_STRINGS = (pa.string(), pa.large_string())


def _allowed_columns() -> str:
    names = ", ".join((*CORE_COLUMNS, *_OPTIONAL))
    return f"{names}; ground-truth columns start with true_, user columns with x_"


def _count_nulls(col: pa.ChunkedArray) -> int:
    return col.null_count


def _as_dictionary(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if pa.types.is_dictionary(t) and t.value_type in _STRINGS:
        if t == NODE_TYPE:
            return col
        return pc.cast(col, NODE_TYPE)
    if t in _STRINGS:
        return pc.cast(col, NODE_TYPE)
    raise SchemaError(f"column {name!r} has type {t} (must be a string or dictionary<string>)")


def _as_uint64(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    return _as_unsigned(name, col, pa.uint64())


def _as_unsigned(name: str, col: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    """``col`` as the unsigned integer type ``to``; a value it cannot hold is an error."""
    t = col.type
    if t == to:
        return col
    if not pa.types.is_integer(t):
        raise SchemaError(f"column {name!r} has type {t} (must be {to}, or a non-negative integer)")
    if pa.types.is_signed_integer(t) and len(col) and (pc.min(col).as_py() or 0) < 0:
        bad = pc.min(col).as_py()
        raise SchemaError(f"column {name!r} holds negative value {bad} (must be non-negative)")
    top = (1 << to.bit_width) - 1
    if to.bit_width < 64 and len(col) and (pc.max(col).as_py() or 0) > top:
        bad = pc.max(col).as_py()
        raise SchemaError(f"column {name!r} holds {bad}, more than {to} holds (at most {top:,})")
    return pc.cast(col, to)


def _as_timestamp(col: pa.ChunkedArray) -> pa.ChunkedArray:
    t = col.type
    if not pa.types.is_timestamp(t):
        raise SchemaError(
            f"column 'timestamp' has type {t} (must be timestamp[ns, tz=UTC]; "
            "tz-naive timestamps are taken as UTC)"
        )
    if t == TS_TYPE:
        return col
    # A tz-naive or other-zone timestamp holds the same instant count since the epoch.
    return pc.cast(col.cast(pa.timestamp(t.unit, tz="UTC")), TS_TYPE)


def _canonical_op(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Re-encode ``op`` so that its dictionary is exactly ``OPS``: code 0 call, 1 return, 2 send."""
    t = col.type
    if not (t in _STRINGS or (pa.types.is_dictionary(t) and t.value_type in _STRINGS)):
        raise SchemaError(f"column 'op' has type {t} (must be dictionary<string> of call, return, send)")
    value_set = pa.array(OPS)
    chunks = []
    for chunk in col.chunks:
        values = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
        codes = pc.index_in(values, value_set=value_set)
        unknown = pc.and_(pc.is_null(codes), pc.is_valid(values))
        if pc.any(unknown).as_py():
            bad = values.filter(unknown)[0].as_py()
            raise SchemaError(f"unknown op {bad!r} (must be one of {', '.join(OPS)})")
        if pa.types.is_dictionary(chunk.type):
            codes = codes.take(chunk.indices)
        chunks.append(pa.DictionaryArray.from_arrays(codes.cast(pa.int8()), value_set))
    return pa.chunked_array(chunks, type=OP_TYPE)


def validate_trace(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """Check a table against the trace schema and return it in canonical form.

    Lossless coercions are applied: plain strings become dictionaries, any timestamp
    unit becomes nanoseconds (tz-naive is taken as UTC), non-negative integers become
    ``uint64``, and ``op`` is re-encoded so that its dictionary is exactly ``OPS``.
    Columns are ordered core, optional, then ``true_*``/``x_*`` as given. Schema
    metadata is kept.

    Parameters
    ----------
    table : pyarrow.Table or pyarrow.RecordBatch
        The messages.

    Returns
    -------
    pyarrow.Table
        The same messages, in canonical types.

    Raises
    ------
    SchemaError
        A column is missing, unknown or mistyped, an op is unknown, or a required
        value is null. The message names the column and what is allowed.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = pa.table({"timestamp": pa.array([1, 2], pa.timestamp("us")),
    ...               "sender": ["a", "b"], "receiver": ["b", "a"],
    ...               "op": ["call", "return"], "id": pa.array([7, 7], pa.int64())})
    >>> validate_trace(t).schema.field("op").type
    DictionaryType(dictionary<values=string, indices=int8, ordered=0>)
    >>> validate_trace(t.drop_columns(["op"]))
    Traceback (most recent call last):
    ...
    tracefmt.errors.SchemaError: missing column 'op' (a trace needs timestamp, sender, receiver, op, id)
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise SchemaError(f"a trace must be a pyarrow Table, not {type(table).__name__}")
    _check_names(table.column_names)
    cols = _core_columns(table)
    fields = list(TRACE_SCHEMA)
    for f in OPTIONAL_FIELDS:
        if f.name in table.column_names:
            if pa.types.is_unsigned_integer(f.type):
                cols[f.name] = _as_unsigned(f.name, table[f.name], f.type)
            else:
                cols[f.name] = _as_dictionary(f.name, table[f.name])
            fields.append(f)
    for name in table.column_names:
        if name.startswith(_FREE_PREFIXES):
            cols[name] = table[name]
            fields.append(table.schema.field(name))
    schema = pa.schema(fields, metadata=table.schema.metadata)
    return pa.Table.from_arrays([cols[f.name] for f in fields], schema=schema)


def _check_names(names: list[str]) -> None:
    """Raise unless every core column is there and every column is allowed, once."""
    for name in CORE_COLUMNS:
        if name not in names:
            raise SchemaError(f"missing column {name!r} (a trace needs {', '.join(CORE_COLUMNS)})")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise SchemaError(f"column {name!r} appears twice")
        seen.add(name)
        if name not in CORE_COLUMNS and name not in _OPTIONAL and not name.startswith(_FREE_PREFIXES):
            raise SchemaError(f"unknown column {name!r} (allowed: {_allowed_columns()})")


def _core_columns(table: pa.Table) -> dict[str, pa.ChunkedArray]:
    """The core columns in canonical types; nulls refused where every message needs a value."""
    cols: dict[str, pa.ChunkedArray] = {}
    cols["timestamp"] = _as_timestamp(table["timestamp"])
    cols["sender"] = _as_dictionary("sender", table["sender"])
    cols["receiver"] = _as_dictionary("receiver", table["receiver"])
    cols["op"] = _canonical_op(table["op"])
    cols["id"] = _as_uint64("id", table["id"])
    for name in ("timestamp", "sender", "receiver", "op"):
        nulls = _count_nulls(cols[name])
        if nulls:
            raise SchemaError(f"column {name!r} has {nulls} null values (every message needs one)")
    _check_not_nat(cols["timestamp"])
    return cols


#: The int64 that numpy, pandas and most Arrow tools read as a missing time (NaT).
NAT_NS = -(2**63)


def _check_not_nat(col: pa.ChunkedArray) -> None:
    """Refuse the oldest int64 instant: other tools would read it as no time at all."""
    if len(col) and pc.min(col.cast(pa.int64())).as_py() == NAT_NS:
        raise SchemaError(
            "column 'timestamp' holds -9223372036.854775808 (1677-09-21T00:12:43.145224192Z), "
            "which numpy and pandas read as a missing time (NaT): the oldest timestamp a trace "
            "holds is 1677-09-21T00:12:43.145224193Z"
        )


def empty_trace(extra: Iterable[pa.Field] = ()) -> pa.Table:
    """A trace with no messages and the core columns (plus ``extra`` fields).

    Examples
    --------
    >>> empty_trace().num_rows
    0
    """
    schema = pa.schema([*TRACE_SCHEMA, *extra])
    return schema.empty_table()


def sort_trace(table: pa.Table) -> pa.Table:
    """Sort messages by timestamp; messages with equal timestamps keep their order.

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = validate_trace(pa.table({"timestamp": pa.array([2, 1], pa.timestamp("ns")),
    ...     "sender": ["a", "b"], "receiver": ["b", "a"], "op": ["send", "send"],
    ...     "id": pa.array([None, None], pa.uint64())}))
    >>> sort_trace(t)["sender"].to_pylist()
    ['b', 'a']
    """
    ts = table["timestamp"]
    if len(ts) < 2:
        return table
    ns = ts.cast(pa.int64()).to_numpy()
    if bool(np.all(ns[1:] >= ns[:-1])):
        return table
    return table.take(np.argsort(ns, kind="stable"))


def op_codes(table: pa.Table) -> np.ndarray:
    """The ``op`` column of a validated trace as int8 codes (``OP_CALL``, ``OP_RETURN``, ``OP_SEND``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = validate_trace(pa.table({"timestamp": pa.array([1, 2], pa.timestamp("ns")),
    ...     "sender": ["a", "b"], "receiver": ["b", "a"], "op": ["call", "return"],
    ...     "id": pa.array([1, 1], pa.uint64())}))
    >>> op_codes(t).tolist()
    [0, 1]
    """
    col = table["op"]
    if col.num_chunks == 0:
        return np.empty(0, np.int8)
    return np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in col.chunks]).astype(np.int8)
