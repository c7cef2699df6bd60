"""The message-trace schema, its Parquet store, the text form, merging and summaries,
and span files (Jaeger, OTLP) as traces with ground truth.

Every other wirepath package takes a validated Arrow table from here.
"""

from tracefmt._files import (
    DISK_FULL,
    atomic_output,
    distinct_outputs,
    parquet_output,
    partial_path,
    publish,
    write_atomic,
    write_error,
)
from tracefmt.convert import (
    TRACE_SUFFIXES,
    ConvertReport,
    convert_trace,
    iter_any_trace,
    read_any_trace,
    trace_format,
)
from tracefmt.display import printable
from tracefmt.errors import (
    MissingToolError,
    ParameterError,
    ParseError,
    SchemaError,
    TraceFileError,
    WirepathError,
)
from tracefmt.merge import (
    DEFAULT_DEDUP_WINDOW_NS,
    MergeInput,
    MergeReport,
    load_names,
    merge_traces,
    rename_nodes,
)
from tracefmt.parquet import (
    Partitioning,
    TraceMetadata,
    TraceWriter,
    iter_trace,
    read_trace,
    read_trace_metadata,
    trace_parts,
    write_trace,
)
from tracefmt.points import point_timestamps
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
from tracefmt.signals import sigterm_as_interrupt
from tracefmt.spans import SPAN_AT, SPAN_FORMATS, SpanStats, read_jaeger, read_otlp, read_spans, span_format
from tracefmt.store import STORE_DIRS, Store
from tracefmt.summary import TraceSummary, summarize_trace
from tracefmt.text import TextStats, format_text_lines, iter_text_trace, read_text_trace, write_text_trace
from tracefmt.units import format_duration_ns, format_instant_ns, parse_duration_ns

__all__ = [
    "CORE_COLUMNS",
    "DEFAULT_DEDUP_WINDOW_NS",
    "DISK_FULL",
    "OPS",
    "OPTIONAL_FIELDS",
    "OP_CALL",
    "OP_RETURN",
    "OP_SEND",
    "SCHEMA_VERSION",
    "SPAN_AT",
    "SPAN_FORMATS",
    "STORE_DIRS",
    "TRACE_SCHEMA",
    "TRACE_SUFFIXES",
    "ConvertReport",
    "MergeInput",
    "MergeReport",
    "MissingToolError",
    "ParameterError",
    "ParseError",
    "Partitioning",
    "SchemaError",
    "SpanStats",
    "Store",
    "TextStats",
    "TraceFileError",
    "TraceMetadata",
    "TraceSummary",
    "TraceWriter",
    "WirepathError",
    "atomic_output",
    "convert_trace",
    "distinct_outputs",
    "empty_trace",
    "format_duration_ns",
    "format_instant_ns",
    "format_text_lines",
    "iter_any_trace",
    "iter_text_trace",
    "iter_trace",
    "load_names",
    "merge_traces",
    "op_codes",
    "parquet_output",
    "parse_duration_ns",
    "partial_path",
    "point_timestamps",
    "printable",
    "publish",
    "read_any_trace",
    "read_jaeger",
    "read_otlp",
    "read_spans",
    "read_text_trace",
    "read_trace",
    "read_trace_metadata",
    "rename_nodes",
    "sigterm_as_interrupt",
    "sort_trace",
    "span_format",
    "summarize_trace",
    "trace_format",
    "trace_parts",
    "validate_trace",
    "write_atomic",
    "write_error",
    "write_text_trace",
    "write_trace",
]
