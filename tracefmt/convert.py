"""Reading and writing a trace in whichever form its file name says: Parquet or text.

``convert_trace`` also reads Jaeger and OTLP span files (told by their content), with
ground-truth columns (``tracefmt.spans``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracefmt._files import distinct_outputs, is_directory
from tracefmt.errors import ParameterError
from tracefmt.identify import hint
from tracefmt.parquet import Partitioning, TraceWriter, iter_trace, read_trace, read_trace_metadata
from tracefmt.schema import sort_trace
from tracefmt.spans import SPAN_AT, SpanStats, read_jaeger, read_otlp, span_format
from tracefmt.text import TextStats, iter_text_trace, read_text_trace, write_text_trace

__all__ = [
    "TRACE_SUFFIXES",
    "ConvertReport",
    "convert_trace",
    "iter_any_trace",
    "read_any_trace",
    "trace_format",
]

PathLike = str | os.PathLike[str]

#: File name endings and the form they select.
TRACE_SUFFIXES: dict[str, str] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".txt": "text",
    ".txt.gz": "text",
    ".trace": "text",
    ".trace.gz": "text",
}


def trace_format(path: PathLike) -> str:
    """``"parquet"`` or ``"text"``, from the file name; ``"parquet"`` for a directory of
    trace parts.

    Examples
    --------
    >>> trace_format("run1.txt.gz")
    'text'
    >>> trace_format("run1.csv")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: run1.csv: unknown trace file type (name it .parquet, .pq, ...)
    """
    is_dir = is_directory(path)
    if is_dir and any(Path(path).glob("part-*.parquet")):
        return "parquet"  # a dataset of trace parts (tracefmt.trace_parts)
    fmt = _name_format(path)
    if fmt is not None:
        return fmt
    if is_dir:
        raise ParameterError(f"{path}: a directory without trace parts (part-*.parquet files)")
    said = hint(path)
    if said:
        raise ParameterError(f"{path}: not a trace{said}")
    raise ParameterError(f"{path}: unknown trace file type (name it {', '.join(TRACE_SUFFIXES)})")


def _name_format(path: PathLike) -> str | None:
    """The form a file name says (``TRACE_SUFFIXES``), None when it says none."""
    name = Path(path).name.lower()
    return next(
        (TRACE_SUFFIXES[s] for s in sorted(TRACE_SUFFIXES, key=len, reverse=True) if name.endswith(s)), None
    )


def iter_any_trace(
    path: PathLike, *, skip_bad: bool = False, stats: TextStats | None = None
) -> Iterator[pa.Table]:
    """Stream a trace file of either form as validated tables."""
    if trace_format(path) == "parquet":
        yield from iter_trace(path)
    else:
        yield from iter_text_trace(path, skip_bad=skip_bad, stats=stats)


def read_any_trace(path: PathLike, *, columns: Sequence[str] | None = None) -> pa.Table:
    """Read a whole trace file of either form (by its name) as one validated table;
    ``columns`` limits a Parquet trace's optional columns, as in ``read_trace``.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> p = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = p.write_text("0.001 call c s 1\\n0.002 return s c 1\\n")
    >>> read_any_trace(p).num_rows
    2
    """
    if trace_format(path) == "parquet":
        return read_trace(path, columns=columns)
    return read_text_trace(path)


def _reporting(tables: Iterator[pa.Table], on_progress: Callable[[int], None]) -> Iterator[pa.Table]:
    done = 0
    for table in tables:
        yield table
        done += table.num_rows
        on_progress(done)


@dataclass(frozen=True)
class ConvertReport:
    """What ``convert_trace`` did: message counts and skipped lines (or spans).

    ``spans`` is None for a trace input; for a span file it is ``SpanStats.to_json()``:
    the format, whose times stamp the messages (``at``), and what was read, merged
    and skipped. ``parts`` is the number of files of a dataset target, None for one file.
    """

    source: str
    target: str
    messages: int
    lines: int = 0
    skipped: int = 0
    hashed_ids: int = 0
    sorted: bool = False
    examples: list[str] = field(default_factory=list)
    spans: dict[str, Any] | None = None
    parts: int | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return asdict(self)

    def span_lines(self) -> list[str]:
        """What a span file held and what became of it, as text lines (none for a trace input).

        Examples
        --------
        >>> counts = SpanStats(format="jaeger", traces=1, spans=3, rpcs=2, requests=1, client_sides=1)
        >>> report = ConvertReport("s.json", "t.parquet", messages=4, spans=counts.to_json())
        >>> print("\\n".join(report.span_lines()))
        from 3 jaeger spans in 1 traces: 2 RPCs in 1 requests, with truth columns
        stamped at the callee: the server span's times, each on its callee's clock
        1 client spans merged with their server side
        """
        st = self.spans
        if st is None:
            return []
        if st["at"] == "caller":
            stamped = f"the client span's times ({st['caller_stamped']:,} RPCs), else the server span's"
        else:
            stamped = "the server span's times, each on its callee's clock"
        lines = [
            f"from {st['spans']:,} {st['format']} spans in {st['traces']:,} traces: {st['rpcs']:,} RPCs "
            f"in {st['requests']:,} requests, with truth columns",
            f"stamped at the {st['at']}: {stamped}",
        ]
        merged = []
        if st["client_sides"]:
            merged.append(f"{st['client_sides']:,} client spans merged with their server side")
        if st["local"]:
            merged.append(f"{st['local']:,} spans within a service (not RPCs)")
        if merged:
            lines.append("; ".join(merged))
        if st["orphans"]:
            lines.append(f"{st['orphans']:,} spans whose parent is not in the file became roots")
        if st["duplicates"]:
            lines.append(f"skipped {st['duplicates']:,} duplicate spans (same trace and span id)")
        return lines


def convert_trace(
    source: PathLike,
    target: PathLike,
    *,
    skip_bad: bool = False,
    sort: bool = False,
    on_progress: Callable[[int], None] | None = None,
    at: str | None = None,
    partition: Partitioning | str | None = None,
) -> ConvertReport:
    """Convert a trace between text and Parquet (or re-encode one), chosen by file names,
    or write it as a Parquet dataset of parts.

    Streams with bounded memory unless ``sort`` is asked for, which reads the whole
    trace. Message order, names, ops and ids are kept exactly. A Jaeger or OTLP JSON
    source (told by its content, see ``span_format``) becomes a sorted trace with
    ground-truth columns (``read_jaeger``, ``read_otlp``), read whole.

    Parameters
    ----------
    source : str or path-like
        ``.parquet``/``.pq``, ``.txt``/``.txt.gz``/``.trace``, or Jaeger/OTLP JSON.
    target : str or path-like
        ``.parquet``/``.pq`` or ``.txt``/``.txt.gz``/``.trace`` (text keeps only the
        core columns).
    skip_bad : bool
        Skip malformed text lines or spans (counted in the report) instead of failing.
    sort : bool
        Sort messages by timestamp (stable), e.g. before ``merge_traces``.
    on_progress : callable, optional
        Called with the number of messages converted so far, after each chunk.
    at : {"callee", "caller"}, optional
        For span files only: stamp RPCs with the server span's times (the default) or
        the client span's.
    partition : Partitioning or str, optional
        Write ``target`` as a dataset directory of parts of this many messages or this
        time span (``"5M"``, ``"1h"``; ``TraceWriter``); the messages must be in time
        order (or ``sort``).

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> d = tempfile.mkdtemp()
    >>> _ = pathlib.Path(d, "t.txt").write_text("2 send a b -\\n1 send b a 5\\n")
    >>> convert_trace(os.path.join(d, "t.txt"), os.path.join(d, "t.parquet"), sort=True).messages
    2
    >>> report = convert_trace(os.path.join(d, "t.parquet"), os.path.join(d, "ds"), partition="1")
    >>> report.parts, sorted(os.listdir(os.path.join(d, "ds")))
    (2, ['_common_metadata', 'part-00000.parquet', 'part-00001.parquet'])
    """
    partition = Partitioning.of(partition)
    if partition is not None:
        _dataset_target(source, target)
    spans_fmt = span_format(source)
    if spans_fmt is not None:
        return _convert_spans(source, target, spans_fmt, at or SPAN_AT[0], skip_bad, on_progress, partition)
    src_fmt = trace_format(source)
    dst_fmt = "parquet" if partition is not None else trace_format(target)
    if at is not None:
        raise ParameterError(f"{source}: 'at' applies to Jaeger or OTLP span files, not a {src_fmt} trace")
    distinct_outputs([source], [target])
    return _convert_messages(source, target, src_fmt, dst_fmt, sort, skip_bad, on_progress, partition)


def _convert_messages(
    source: PathLike,
    target: PathLike,
    src_fmt: str,
    dst_fmt: str,
    sort: bool,
    skip_bad: bool,
    on_progress: Callable[[int], None] | None,
    partition: Partitioning | None,
) -> ConvertReport:
    """Convert a trace file (text or Parquet) once the arguments are checked."""
    stats = TextStats()
    tables = _source_tables(source, src_fmt, sort=sort, skip_bad=skip_bad, stats=stats)
    if on_progress is not None:
        tables = _reporting(tables, on_progress)
    provenance = _provenance(source, src_fmt, sort=sort)
    parts = None
    if dst_fmt == "parquet":
        messages, parts = _write_parquet(tables, target, provenance, partition, stats)
    else:
        messages = write_text_trace(tables, target)
    return ConvertReport(
        source=str(source),
        target=str(target),
        messages=messages,
        lines=stats.lines,
        skipped=stats.skipped,
        hashed_ids=stats.hashed_ids,
        sorted=sort,
        examples=stats.examples,
        parts=parts,
    )


def _source_tables(
    source: PathLike, src_fmt: str, *, sort: bool, skip_bad: bool, stats: TextStats
) -> Iterator[pa.Table]:
    """The source's tables: streamed, or (``sort``) read whole now and sorted."""
    if not sort:
        return iter_any_trace(source, skip_bad=skip_bad, stats=stats)
    table = read_trace(source) if src_fmt == "parquet" else None
    if table is None:
        parts = list(iter_any_trace(source, skip_bad=skip_bad, stats=stats))
        table = pa.concat_tables(parts).unify_dictionaries() if parts else None
    return iter([sort_trace(table)] if table is not None else [])


def _provenance(source: PathLike, src_fmt: str, *, sort: bool) -> dict[str, Any]:
    """What the converted trace records of where it came from (the source's own, too)."""
    provenance: dict[str, Any] = {"source": str(source)}
    if src_fmt == "parquet":
        provenance.update(read_trace_metadata(source).provenance)
    else:
        provenance["converted_from"] = "text"
    if sort:  # known now: a dataset's parts written before a change are written again
        provenance["sorted"] = True
    return provenance


def _write_parquet(
    tables: Iterator[pa.Table],
    target: PathLike,
    provenance: dict[str, Any],
    partition: Partitioning | None,
    stats: TextStats,
) -> tuple[int, int | None]:
    """Write the tables as Parquet (one file, or a dataset of parts); returns the
    messages written and the parts (None for one file)."""
    with TraceWriter(target, provenance=provenance, partition=partition) as writer:
        for table in tables:
            writer.write(table)
        # Counts are final only once the input is consumed.
        if stats.skipped:
            writer.provenance["skipped_lines"] = stats.skipped
        if stats.hashed_ids:
            writer.provenance["hashed_ids"] = stats.hashed_ids
    return writer.rows, (writer.parts if partition is not None else None)


def _dataset_target(source: PathLike, target: PathLike) -> None:
    """Refuse a dataset target that is text by name, or holds the source (replacing
    the directory would delete it)."""
    if _name_format(target) == "text":
        raise ParameterError(f"{target}: a dataset is Parquet; name it without a text suffix (.txt, .trace)")
    src, dst = Path(source).resolve(), Path(target).resolve()
    if dst == src or dst in src.parents:
        raise ParameterError(f"{target}: the dataset would replace the input {source}; choose another name")


def _convert_spans(
    source: PathLike,
    target: PathLike,
    fmt: str,
    at: str,
    skip_bad: bool,
    on_progress: Callable[[int], None] | None,
    partition: Partitioning | None = None,
) -> ConvertReport:
    dst_fmt = "parquet" if partition is not None else trace_format(target)
    distinct_outputs([source], [target])
    stats = SpanStats()
    reader = read_jaeger if fmt == "jaeger" else read_otlp
    table = reader(source, at=at, skip_bad=skip_bad, stats=stats)
    counts = stats.to_json()
    del counts["examples"]
    if dst_fmt == "parquet":
        provenance = {"source": str(source), "converted_from": fmt, "spans": counts}
        with TraceWriter(target, provenance=provenance, partition=partition) as writer:
            writer.write(table)
        parts = writer.parts if partition is not None else None
    else:
        parts = None
        write_text_trace(table, target)
    if on_progress is not None:
        on_progress(table.num_rows)
    return ConvertReport(
        source=str(source),
        target=str(target),
        messages=table.num_rows,
        skipped=stats.skipped,
        sorted=True,
        examples=stats.examples,
        spans=counts,
        parts=parts,
    )
