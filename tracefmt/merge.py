"""Merging traces from several capture points into one, in time order.

Each input is streamed, shifted by its clock offset and renamed through a names map;
a k-way merge emits messages up to the earliest "horizon" (the smallest last
timestamp among the inputs' buffered batches), so memory stays bounded by the
batch size times the number of inputs.

A message seen at several capture points is kept once, as first seen. Rows of one key
(sender, receiver, op, id) form a cluster while consecutive rows are at most the
window apart; in a cluster the k-th row of each input is taken as the same message,
and rows more than the window after its first sighting are kept as messages of their
own. Two rows of one input are never copies of each other.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracefmt._files import distinct_outputs, existing_file, parquet_output
from tracefmt.configfile import load_toml, read_config_text
from tracefmt.errors import ParameterError, ParseError, SchemaError
from tracefmt.parquet import TraceMetadata, TraceWriter, iter_trace, read_trace_metadata
from tracefmt.schema import CORE_COLUMNS, NODE_TYPE, OPTIONAL_FIELDS

__all__ = [
    "DEFAULT_DEDUP_WINDOW_NS",
    "MergeInput",
    "MergeReport",
    "load_names",
    "merge_traces",
    "rename_nodes",
]

PathLike = str | os.PathLike[str]
DEFAULT_DEDUP_WINDOW_NS = 1_000_000  # mirrored copies of one packet arrive within microseconds
_BATCH = 1 << 18


@dataclass(frozen=True)
class MergeInput:
    """One trace to merge.

    Attributes
    ----------
    path : str
        A Parquet trace, sorted by timestamp.
    offset_ns : int
        Added to every timestamp of this input (its clock's correction).
    point : str or None
        Capture point name written to the ``point`` column where the input has none;
        defaults to the file name without suffix.
    """

    path: str
    offset_ns: int = 0
    point: str | None = None


@dataclass(frozen=True)
class MergeReport:
    """What ``merge_traces`` did; also recorded in the merged file's provenance."""

    output: str
    messages: int
    duplicates_removed: int
    dedup_window_ns: int | None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report."""
        return asdict(self)


def load_names(path: PathLike) -> dict[str, str]:
    """Read a names file: TOML mapping an address or alias to a node name.

    Either top-level keys or a ``[names]`` table::

        [names]
        "10.0.0.5:8080" = "WS1"
        "10.0.0.6" = "DB1"

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> p = os.path.join(tempfile.mkdtemp(), "names.toml")
    >>> _ = pathlib.Path(p).write_text('"10.0.0.5" = "WS1"\\n')
    >>> load_names(p)
    {'10.0.0.5': 'WS1'}
    """
    p = existing_file(path, "a TOML names file")
    try:
        doc = load_toml(read_config_text(p, "a TOML names file"), str(p))
    except ParseError as exc:
        raise ParameterError(f"{p}: not a valid TOML names file ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError(f"{p}: not a valid TOML names file ({exc})") from None
    table = doc.get("names", doc) if isinstance(doc.get("names"), dict) else doc
    names: dict[str, str] = {}
    for key, value in table.items():
        if not isinstance(value, str) or not value:
            raise ParameterError(f'{p}: name for {key!r} must be a non-empty string, e.g. "{key}" = "WS1"')
        names[key] = value
    return names


def rename_nodes(table: pa.Table, names: Mapping[str, str]) -> pa.Table:
    """Rename nodes in ``sender`` and ``receiver`` through ``names`` (unknown names stay).

    Only the dictionaries are rewritten, so the cost does not grow with message count.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from tracefmt.schema import validate_trace
    >>> t = validate_trace(pa.table({"timestamp": pa.array([1], pa.timestamp("ns")),
    ...     "sender": ["10.0.0.5"], "receiver": ["c"], "op": ["send"],
    ...     "id": pa.array([None], pa.uint64())}))
    >>> rename_nodes(t, {"10.0.0.5": "WS1"})["sender"].to_pylist()
    ['WS1']
    """
    if not names:
        return table
    for name in ("sender", "receiver"):
        chunks = []
        for chunk in table[name].chunks:
            values = chunk.dictionary.to_pylist()
            renamed = pa.array([names.get(v, v) for v in values], pa.string())
            # Two addresses may map to one name: re-encode so the dictionary stays unique.
            chunks.append(pc.dictionary_encode(renamed.take(chunk.indices)))
        col = pa.chunked_array(chunks, type=NODE_TYPE)
        table = table.set_column(table.schema.get_field_index(name), name, col)
    return table


class _Input:
    """A buffered, shifted, renamed view of one input trace."""

    def __init__(self, index: int, spec: MergeInput, names: Mapping[str, str], columns: list[pa.Field]):
        self.index = index
        self.spec = spec
        self.names = names
        self.columns = columns
        self.point = spec.point or Path(spec.path).name.split(".")[0]
        self.rows = 0
        self.last_ns = 0
        self.buf: pa.Table | None = None
        self.ts: np.ndarray = np.zeros(0, np.int64)
        self._batches: Iterator[pa.Table] = iter_trace(spec.path, batch_size=_BATCH)
        self.exhausted = False

    def refill(self) -> None:
        while self.buf is None or self.buf.num_rows == 0:
            batch = next(self._batches, None)
            if batch is None:
                self.exhausted = True
                self.buf, self.ts = None, np.zeros(0, np.int64)
                return
            self._load(batch)

    def _load(self, batch: pa.Table) -> None:
        ts = batch["timestamp"].cast(pa.int64()).to_numpy() + np.int64(self.spec.offset_ns)
        if ts.size:
            # Compared, not subtracted: the difference of two timestamps far apart overflows.
            before = np.concatenate([[ts[0] if self.rows == 0 else self.last_ns], ts[:-1]])
            back = np.flatnonzero(ts < before)
            if back.size:
                raise SchemaError(
                    f"{self.spec.path}: not sorted by timestamp at message {self.rows + int(back[0]) + 1} "
                    "(merge needs time-sorted inputs: wirepath convert --sort IN OUT)"
                )
            self.last_ns = int(ts[-1])
        self.rows += batch.num_rows
        batch = rename_nodes(batch, self.names)
        cols = {}
        for f in self.columns:
            if f.name == "timestamp":
                cols[f.name] = pa.array(ts, pa.int64())
            elif f.name == "point" and "point" not in batch.column_names:
                cols[f.name] = pa.array([self.point] * batch.num_rows, pa.string())
            elif f.name in batch.column_names:
                col = batch[f.name].combine_chunks()
                cols[f.name] = col.dictionary_decode() if isinstance(col, pa.DictionaryArray) else col
            else:
                cols[f.name] = pa.nulls(batch.num_rows, f.type)
        cols["_src"] = pa.array(np.full(batch.num_rows, self.index, np.int32))
        cols["_verdict"] = pa.array(np.full(batch.num_rows, _UNDECIDED, np.int8))
        self.buf, self.ts = pa.table(cols), ts

    def take_upto(self, horizon: int) -> pa.Table | None:
        if self.buf is None:
            return None
        n = int(np.searchsorted(self.ts, horizon, side="right"))
        if n == 0:
            return None
        head = self.buf.slice(0, n)
        self.buf, self.ts = self.buf.slice(n), self.ts[n:]
        return head


def _output_columns(metas: Sequence[TraceMetadata]) -> list[pa.Field]:
    """Working columns of the merge: the union of the inputs', dictionaries as plain strings."""

    def plain(t: pa.DataType) -> pa.DataType:
        return t.value_type if pa.types.is_dictionary(t) else t

    present: dict[str, pa.Field] = {}
    for meta in metas:
        schema = meta.schema
        assert schema is not None
        for f in schema:
            present.setdefault(f.name, f)
    fields = [
        pa.field("timestamp", pa.int64()),
        *(pa.field(n, plain(present[n].type)) for n in CORE_COLUMNS[1:]),
    ]
    # Every merged message says where it was seen.
    fields += [
        pa.field(f.name, plain(f.type)) for f in OPTIONAL_FIELDS if f.name in present or f.name == "point"
    ]
    fields += [pa.field(n, plain(f.type)) for n, f in present.items() if n.startswith(("true_", "x_"))]
    return fields


_MAX_OPEN_ROWS = 1 << 20  # a run of one key this long is decided without waiting for more
_UNDECIDED, _KEEP, _COPY = -1, 0, 1  # a held row's verdict, once its cluster is decided


@dataclass(frozen=True)
class _Clusters:
    """Runs of one key (sender, receiver, op, id): rows at most a window apart."""

    order: np.ndarray  # row indices, grouped by cluster, each cluster in time order
    cluster: np.ndarray  # cluster number of each row (in ``order``)
    first_ts: np.ndarray  # per cluster
    last_ts: np.ndarray


def _clusters(table: pa.Table, window_ns: int) -> _Clusters:
    codes = [
        pc.dictionary_encode(table[name].combine_chunks()).indices.to_numpy()
        for name in ("sender", "receiver", "op")
    ]
    ident = table["id"].combine_chunks()
    id_null = ident.is_null().to_numpy(zero_copy_only=False)
    id_val = ident.fill_null(0).to_numpy()
    ts = table["timestamp"].to_numpy()
    src = table["_src"].to_numpy()
    order = np.lexsort((src, ts, id_val, id_null, codes[2], codes[1], codes[0]))
    n = order.size
    new = np.ones(n, bool)
    if n > 1:
        same = np.ones(n - 1, bool)
        for k in (*codes, id_null, id_val):
            ks = k[order]
            same &= ks[1:] == ks[:-1]
        t = ts[order]
        new[1:] = ~same | (t[1:] - t[:-1] > window_ns)
    cluster = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n) - 1
    t = ts[order]
    return _Clusters(order, cluster, t[starts], t[ends])


def _copies(table: pa.Table, cl: _Clusters, decide: np.ndarray, window_ns: int) -> np.ndarray:
    """Rows (of clusters marked in ``decide``) that are copies of a message seen elsewhere.

    In a cluster, the k-th row from each input is taken to be the same message: the
    earliest of them is kept, the others within the window after it are copies. Two
    rows from one input are never copies of each other, and a burst of one key seen
    at several points keeps as many messages as the input that saw most of them.
    """
    order, cluster = cl.order, cl.cluster
    src = table["_src"].to_numpy()[order]
    ts = table["timestamp"].to_numpy()[order]
    by_src = np.lexsort((ts, src, cluster))
    c, s = cluster[by_src], src[by_src]
    group_start = np.ones(c.size, bool)
    group_start[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
    idx = np.arange(c.size)
    rank_sorted = idx - np.maximum.accumulate(np.where(group_start, idx, 0))
    rank = np.empty_like(rank_sorted)
    rank[by_src] = rank_sorted
    pick = np.lexsort((src, ts, rank, cluster))
    c2, r2, t2 = cluster[pick], rank[pick], ts[pick]
    first = np.ones(c2.size, bool)
    first[1:] = (c2[1:] != c2[:-1]) | (r2[1:] != r2[:-1])
    idx2 = np.arange(c2.size)
    kept_ts = t2[np.maximum.accumulate(np.where(first, idx2, 0))]
    copy_sorted = np.zeros(c2.size, bool)
    # A copy lies within the window of the message it repeats; a farther one is its own.
    copy_sorted[pick] = ~first & (t2 - kept_ts <= window_ns)
    copy = np.zeros(table.num_rows, bool)
    copy[order] = copy_sorted & decide[cluster]
    return copy


def merge_traces(
    inputs: Sequence[PathLike | MergeInput],
    output: PathLike,
    *,
    names: Mapping[str, str] | None = None,
    dedup_window_ns: int | None = DEFAULT_DEDUP_WINDOW_NS,
    on_progress: Callable[[int], None] | None = None,
) -> MergeReport:
    """Merge time-sorted Parquet traces into one, streaming, with bounded memory.

    Parameters
    ----------
    inputs : sequence of path or MergeInput
        The traces; a plain path has no clock offset.
    output : str or path-like
        The merged Parquet trace; its provenance records what was applied.
    names : mapping, optional
        Node renames (address or alias -> name), e.g. from ``load_names``.
    dedup_window_ns : int or None
        Window for removing a message seen at two capture points; None keeps all.
    on_progress : callable, optional
        Called with the number of messages written so far.

    Returns
    -------
    MergeReport

    Raises
    ------
    SchemaError
        An input is not sorted by timestamp.
    TraceFileError
        An input is missing or unreadable.
    """
    specs = [s if isinstance(s, MergeInput) else MergeInput(str(s)) for s in inputs]
    if not specs:
        raise ParameterError("merge needs at least one input trace")
    if dedup_window_ns is not None and dedup_window_ns < 0:
        raise ParameterError(f"dedup window must be >= 0, not {dedup_window_ns} ns")
    names = dict(names or {})
    distinct_outputs([spec.path for spec in specs], [output], what="an input")
    parquet_output(output)
    metas = [read_trace_metadata(spec.path) for spec in specs]
    columns = _output_columns(metas)
    streams = [_Input(i, spec, names, columns) for i, spec in enumerate(specs)]
    with TraceWriter(output) as writer:
        removed = _write_merged(writer, streams, dedup_window_ns, on_progress)
        report = MergeReport(
            output=str(output),
            messages=writer.rows,
            duplicates_removed=removed,
            dedup_window_ns=dedup_window_ns,
            inputs=[_input_report(s, meta) for s, meta in zip(streams, metas, strict=True)],
            renamed={k: v for k, v in names.items()},
        )
        writer.provenance["merge"] = report.to_json()
    return report


def _input_report(stream: _Input, meta: TraceMetadata) -> dict[str, Any]:
    """What the merge took from one input (``MergeReport.inputs``)."""
    return {
        "path": stream.spec.path,
        "messages": stream.rows,
        "offset_ns": stream.spec.offset_ns,
        "point": stream.point,
        "provenance": meta.provenance,
    }


def _write_merged(
    writer: TraceWriter,
    streams: list[_Input],
    window_ns: int | None,
    on_progress: Callable[[int], None] | None,
) -> int:
    """Write the inputs' messages in time order, each seen at several points once (none
    dropped when ``window_ns`` is None); returns the copies removed."""
    removed = 0
    hold: pa.Table | None = None  # rows whose clusters may still grow
    while (step := _next_round(streams)) is not None:
        parts, horizon = step
        batch = pa.concat_tables(parts if hold is None else [hold, *parts])
        # Time order; equal times by input, each input keeping its own order.
        batch = batch.take(np.lexsort((batch["_src"].to_numpy(), batch["timestamp"].to_numpy())))
        if window_ns is None:
            writer.write(_finish(batch))
        else:
            # Rows still to come are no earlier than the horizon: clusters that ended
            # a window before it are complete; the others wait for the next round.
            copies, hold = _emit_decided(writer, batch, window_ns, horizon - window_ns)
            removed += copies
        if on_progress is not None:
            on_progress(writer.rows)
    if hold is not None and hold.num_rows:
        removed += _emit_decided(writer, hold, window_ns, None)[0]
        if on_progress is not None:
            on_progress(writer.rows)
    return removed


def _next_round(streams: list[_Input]) -> tuple[list[pa.Table], int] | None:
    """The buffered rows of every input up to the horizon, and the horizon; None once
    every input is exhausted."""
    for s in streams:
        if not s.exhausted and (s.buf is None or s.buf.num_rows == 0):
            s.refill()
    live = [s for s in streams if s.buf is not None and s.buf.num_rows]
    if not live:
        return None
    bounded = [int(s.ts[-1]) for s in live if not s.exhausted]
    # Inputs with more to read bound the horizon; finished ones do not.
    horizon = min(bounded) if bounded else max(int(s.ts[-1]) for s in live)
    return [p for p in (s.take_upto(horizon) for s in live) if p is not None], horizon


def _emit_decided(
    writer: TraceWriter, pool: pa.Table, window_ns: int, done_ns: int | None
) -> tuple[int, pa.Table]:
    """Write the rows of ``pool`` that are decided; returns (copies removed, rows held).

    A cluster is decided when it ended before ``done_ns`` (all clusters when None) or
    has grown past ``_MAX_OPEN_ROWS``. Rows are written only up to the first row of an
    undecided cluster, so the output stays in time order; the rest is held back with
    its verdict, so a cluster is never judged again on part of its rows.
    """
    verdict = pool["_verdict"].to_numpy().copy()
    open_rows = np.flatnonzero(verdict == _UNDECIDED)
    cut = None
    if open_rows.size:
        sub = pool.take(open_rows)
        cl = _clusters(sub, window_ns)
        sizes = np.bincount(cl.cluster)
        decide = (
            np.ones(sizes.size, bool)
            if done_ns is None
            else (cl.last_ts < done_ns) | (sizes > _MAX_OPEN_ROWS)
        )
        copy = _copies(sub, cl, decide, window_ns)
        decided = np.zeros(sub.num_rows, bool)
        decided[cl.order] = decide[cl.cluster]
        verdict[open_rows] = np.where(decided, np.where(copy, _COPY, _KEEP), _UNDECIDED)
        if (~decide).any():
            cut = int(cl.first_ts[~decide].min())
    ts = pool["timestamp"].to_numpy()
    ready = np.ones(pool.num_rows, bool) if cut is None else ts < cut
    out = ready & (verdict == _KEEP)
    if out.any():
        writer.write(_finish(pool.filter(pa.array(out))))
    held = pool.set_column(pool.schema.get_field_index("_verdict"), "_verdict", pa.array(verdict))
    return int((ready & (verdict == _COPY)).sum()), held.filter(pa.array(~ready))


def _finish(batch: pa.Table) -> pa.Table:
    """Back from the merge's working columns to trace columns."""
    batch = batch.drop_columns(["_src", "_verdict"])
    ts = batch["timestamp"].cast(pa.timestamp("ns", tz="UTC"))
    batch = batch.set_column(0, "timestamp", ts)
    assert batch.column_names[: len(CORE_COLUMNS)] == list(CORE_COLUMNS)
    return batch
