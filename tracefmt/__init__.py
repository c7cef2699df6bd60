"""The message-trace schema, its Parquet store, the text form, merging and summaries.

Every other wirepath package takes a validated Arrow table from here.
"""

from tracefmt.errors import (
    MissingToolError,
    ParameterError,
    ParseError,
    SchemaError,
    TraceFileError,
    WirepathError,
)
from tracefmt.parquet import (
    TraceMetadata,
    TraceWriter,
    iter_trace,
    read_trace,
    read_trace_metadata,
    write_trace,
)
from tracefmt.schema import (
    CORE_COLUMNS,
    OP_CALL,
    OP_RETURN,
    OP_SEND,
    OPS,
    OPTIONAL_FIELDS,
    SCHEMA_VERSION,
    TRACE_SCHEMA,
    empty_trace,
    op_codes,
    sort_trace,
    validate_trace,
)
from tracefmt.units import format_duration_ns, parse_duration_ns

__all__ = [
    "CORE_COLUMNS",
    "OPS",
    "OPTIONAL_FIELDS",
    "OP_CALL",
    "OP_RETURN",
    "OP_SEND",
    "SCHEMA_VERSION",
    "TRACE_SCHEMA",
    "MissingToolError",
    "ParameterError",
    "ParseError",
    "SchemaError",
    "TraceFileError",
    "TraceMetadata",
    "TraceWriter",
    "WirepathError",
    "empty_trace",
    "format_duration_ns",
    "iter_trace",
    "op_codes",
    "parse_duration_ns",
    "read_trace",
    "read_trace_metadata",
    "sort_trace",
    "validate_trace",
    "write_trace",
]
