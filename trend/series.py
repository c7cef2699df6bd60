"""Metric series in the store: one row per trial, in ``STORE/results/*.parquet``.

Columns (:data:`RESULTS_SCHEMA`): ``test`` (the series name), ``testbed``, ``build`` (the run:
a job or DUT build id), ``time`` (UTC), ``trial`` (0, 1, ... within the run), ``value``
(NaN: the trial failed), ``unit``, ``direction`` (``bigger-is-better`` for throughput,
``smaller-is-better`` for latency) and ``tags``. Each import writes one more file; when two
files hold the same (test, testbed, build), the later import replaces the earlier one.

A series is one (test, testbed); its runs are its builds in time order, each with its
trials.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import math
import os
import time as _time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tracefmt import (
    OutputFile,
    ParameterError,
    ParseError,
    Store,
    TraceFileError,
    format_instant_ns,
    make_dirs,
    sweep_temporaries,
    write_errors,
)
from tracefmt.configfile import load_json
from trend._files import MAX_RESULTS_BYTES, read_bytes
from trend.mdl import DIRECTIONS
from trend.numbers import IMPORT_COLUMNS, check_number

__all__ = [
    "IMPORT_COLUMNS",
    "RESULTS_SCHEMA",
    "Series",
    "import_results",
    "load_series",
    "parse_time_ns",
    "read_result_rows",
    "results_table",
    "write_results",
]

RESULTS_SCHEMA = pa.schema(
    [
        ("test", pa.string()),
        ("testbed", pa.string()),
        ("build", pa.string()),
        ("time", pa.timestamp("ns", tz="UTC")),
        ("trial", pa.int32()),
        ("value", pa.float64()),
        ("unit", pa.string()),
        ("direction", pa.string()),
        ("tags", pa.list_(pa.string())),
    ]
)
_REQUIRED = [c for c, d in IMPORT_COLUMNS.items() if d is None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The instants a timestamp[ns] column holds, less INT64_MIN: numpy and pandas read it as NaT.
_MIN_NS, _MAX_NS = -(2**63) + 1, 2**63 - 1


def parse_time_ns(text: Any) -> int:
    """An instant as nanoseconds since the epoch: ISO-8601 (UTC if no zone) or epoch seconds.

    Examples
    --------
    >>> parse_time_ns("2024-05-01T02:00:00Z")
    1714528800000000000
    >>> parse_time_ns(1714528800)
    1714528800000000000
    >>> parse_time_ns("2024-05-01T04:00:00.000001+02:00")
    1714528800000001000
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return _instant_ns(check_number(text, "time (epoch seconds)") * 1e9, text)
    s = str(text).strip()
    try:
        seconds = float(s)
    except ValueError:
        pass
    else:
        return _instant_ns(check_number(seconds, f"time {s!r} in epoch seconds") * 1e9, s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ParameterError(
            f"time {s!r} is neither ISO-8601 (2024-05-01T02:00:00Z) nor epoch seconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return _instant_ns((dt - _EPOCH) // timedelta(microseconds=1) * 1000, s)  # exact, no float seconds


def _instant_ns(ns: float | int, text: Any) -> int:
    """``ns`` as an int if a results file can hold it (int64 nanoseconds), else a ParameterError."""
    if not _MIN_NS <= ns <= _MAX_NS:
        raise ParameterError(
            f"time {str(text)!r} is out of range (from {format_instant_ns(_MIN_NS)} "
            f"to {format_instant_ns(_MAX_NS)})"
        )
    return round(ns)


_NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
_FAILED = ["", "nan", "fail", "failed"]


def _text(value: Any) -> str | None:
    """A JSON scalar as the text a CSV cell would hold (numbers round-trip exactly)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def _records_columns(
    records: Iterable[dict[str, Any]], source: str, lines: Iterable[int] | None = None
) -> tuple[dict[str, list[Any]], list[int]]:
    """Records (one trial each, or one run with ``values``) as columns of cell texts, and the
    line of every row: ``lines`` (one per record), else the record's number."""
    cols: dict[str, list[Any]] = {c: [] for c in [*IMPORT_COLUMNS, "time_ns"]}
    line_of: list[int] = []
    numbers = itertools.count(1) if lines is None else lines
    for line, rec in zip(numbers, records, strict=False):  # a count never ends
        if not isinstance(rec, dict):
            raise ParseError(source, line, "a result record must be an object")
        given = (
            set(rec) | ({"value"} if "values" in rec else set()) | ({"time"} if "time_ns" in rec else set())
        )
        missing = [c for c in _REQUIRED if c not in given]
        if missing:
            raise ParseError(
                source, line, f"missing column {missing[0]!r} (required: {', '.join(_REQUIRED)})"
            )
        if "values" in rec:
            trials = rec["values"]
            if not isinstance(trials, list) or not trials:
                raise ParseError(source, line, "values must be a non-empty list of trial values")
            cells = {"value": [_text(v) for v in trials], "trial": [str(k) for k in range(len(trials))]}
        else:
            cells = {"value": [_text(rec["value"])], "trial": [_text(rec.get("trial"))]}
        width = len(cells["value"])
        for c in cols:
            cols[c] += cells[c] if c in cells else [_text(rec.get(c))] * width
        line_of += [line] * width
    return cols, line_of


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _strings(col: pa.Array | None, n: int, default: str) -> pa.Array:
    """Trimmed strings; missing or empty cells take ``default``."""
    if col is None:
        return pa.array([default] * n, pa.string())
    col = pc.utf8_trim_whitespace(col.cast(pa.string()))
    return pc.if_else(pc.or_kleene(pc.is_null(col), pc.equal(col, "")).fill_null(True), default, col)


@dataclass(frozen=True)
class _Cells:
    """Import columns of cell texts (those some record gave), each row's line, the source."""

    arr: dict[str, pa.Array]
    line_of: np.ndarray | _DataLines
    source: str

    @property
    def n(self) -> int:
        return len(self.line_of)

    def line(self, row: int) -> int:
        return int(self.line_of[row])

    def fail(self, row: int | None, reason: str) -> None:
        """Raise a ParseError on the line of ``row``; nothing when ``row`` is None."""
        if row is not None:
            raise ParseError(self.source, self.line(row), reason)


def _cells(cols: dict[str, Any], line_of: np.ndarray | _DataLines, source: str) -> _Cells:
    """The columns as Arrow strings, without those no record gave; a ParseError when there
    are no rows or a required column is missing."""
    n = len(line_of)
    arr = {
        k: (v if isinstance(v, pa.Array) else pa.array(v, pa.string()))
        for k, v in cols.items()
        if v is not None
    }
    arr = {k: v for k, v in arr.items() if v.null_count < n}  # columns no record gave
    if n == 0:
        raise ParseError(source, 1, "no results (the file holds no records)")
    given = set(arr) | ({"time"} if "time_ns" in arr else set())
    missing = [c for c in _REQUIRED if c not in given]
    if missing:
        raise ParseError(
            source, int(line_of[0]), f"missing column {missing[0]!r} (required: {', '.join(_REQUIRED)})"
        )
    return _Cells(arr, line_of, source)


def _names(cells: _Cells) -> dict[str, pa.Array]:
    """The string columns: test and build (not empty), testbed, unit and a known direction."""
    arr, n = cells.arr, cells.n
    test, build = _strings(arr["test"], n, ""), _strings(arr["build"], n, "")
    cells.fail(
        _first(pc.or_(pc.equal(test, ""), pc.equal(build, "")).to_numpy(zero_copy_only=False)),
        "test and build must not be empty",
    )
    direction = _strings(arr.get("direction"), n, "bigger-is-better")
    names = {
        "test": test,
        "testbed": _strings(arr.get("testbed"), n, "default"),
        "build": build,
        "unit": _strings(arr.get("unit"), n, ""),
        "direction": direction,
    }
    bad = _first(pc.invert(pc.is_in(direction, pa.array(DIRECTIONS))).to_numpy(zero_copy_only=False))
    if bad is not None:
        cells.fail(bad, f"direction {direction[bad].as_py()!r} (must be one of {', '.join(DIRECTIONS)})")
    return names


def _values(cells: _Cells, test: pa.Array) -> np.ndarray:
    """The values: finite numbers >= 0; empty, nan or fail is a failed trial (NaN)."""
    raw = cells.arr["value"].cast(pa.string()).fill_null("")
    low = pc.utf8_lower(pc.utf8_trim_whitespace(raw))
    failed = pc.is_in(low, pa.array(_FAILED)).to_numpy(zero_copy_only=False)
    numeric = pc.match_substring_regex(raw, _NUMBER).to_numpy(zero_copy_only=False)
    bad = _first(~failed & ~numeric)
    if bad is not None:
        cells.fail(
            bad, f"value {raw[bad].as_py()!r} is not a number (empty, nan or fail marks a failed trial)"
        )
    value = pc.cast(
        pc.if_else(pa.array(failed), "nan", pc.utf8_trim_whitespace(raw)), pa.float64()
    ).to_numpy()
    bad = _first(~failed & ~np.isfinite(value))  # 1e400: a number, but beyond float64
    if bad is not None:
        cells.fail(
            bad,
            f"test {test[bad].as_py()!r}: value {raw[bad].as_py().strip()!r} is out of range "
            "(not a finite number)",
        )
    bad = _first(value < 0)
    if bad is not None:
        cells.fail(bad, f"value {value[bad]:g} is negative (measurements are >= 0)")
    return value


def _times_ns(cells: _Cells) -> np.ndarray:
    """The times as int64 nanoseconds: one parse per distinct text (a run's trials share theirs)."""
    if "time_ns" in cells.arr:
        return pc.cast(cells.arr["time_ns"], pa.int64()).to_numpy(zero_copy_only=False)
    t_col = cells.arr["time"].cast(pa.string()).fill_null("")
    uniq = pc.unique(t_col)
    parsed = np.empty(len(uniq), dtype=np.int64)
    for k, text in enumerate(uniq.to_pylist()):
        try:
            parsed[k] = parse_time_ns(text)
        except ParameterError as e:
            cells.fail(_first(pc.equal(t_col, text).to_numpy(zero_copy_only=False)), str(e))
    return parsed[pc.index_in(t_col, uniq).to_numpy()]


def _trial_numbers(cells: _Cells) -> np.ndarray:
    """The trial numbers given (-1 where a cell leaves it to the row order)."""
    n = cells.n
    trial_col = cells.arr.get("trial")
    trial_text = (
        pa.array([""] * n, pa.string())
        if trial_col is None
        else pc.utf8_trim_whitespace(trial_col.cast(pa.string()).fill_null(""))
    )
    auto = pc.equal(trial_text, "").to_numpy(zero_copy_only=False)
    is_int = pc.match_substring_regex(trial_text, r"^\d{1,9}$").to_numpy(zero_copy_only=False)  # int32
    bad = _first(~auto & ~is_int)
    if bad is not None:
        cells.fail(bad, f"trial {trial_text[bad].as_py()!r} is not an integer from 0 to 999,999,999")
    trial = np.full(n, -1, dtype=np.int32)
    trial[~auto] = pc.cast(pc.filter(trial_text, pa.array(~auto)), pa.int32()).to_numpy()
    return trial


def _tags(cells: _Cells) -> pa.Array:
    """The tag lists: ';'-separated, split once per distinct text."""
    tag_text = _strings(cells.arr.get("tags"), cells.n, "")
    tag_uniq = pc.unique(tag_text)
    tag_lists = pa.array(
        [[t.strip() for t in u.split(";") if t.strip()] for u in tag_uniq.to_pylist()], pa.list_(pa.string())
    )
    return tag_lists.take(pc.index_in(tag_text, tag_uniq))


#: The string columns of a results table, kept as codes into their distinct strings.
_NAMED = ("test", "testbed", "build", "unit", "direction")


@dataclass
class _Checked:
    """Rows checked, compactly: the string columns as codes into distinct values (a lab's
    file repeats each test name thousands of times), the rest as arrays; trials -1 where
    the row order numbers them. Batches of a streamed file are joined with :meth:`join`."""

    codes: dict[str, np.ndarray]
    strings: dict[str, pa.Array]
    time_ns: np.ndarray
    value: np.ndarray
    trial: np.ndarray
    tags: pa.ChunkedArray

    @classmethod
    def of(cls, cells: _Cells) -> _Checked:
        names = _names(cells)
        value = _values(cells, names["test"])
        time_ns = _times_ns(cells)
        trial = _trial_numbers(cells)
        encoded = {c: pc.dictionary_encode(names[c]) for c in _NAMED}
        return cls(
            {c: e.indices.to_numpy(zero_copy_only=False).astype(np.int32) for c, e in encoded.items()},
            {c: e.dictionary for c, e in encoded.items()},
            time_ns,
            value,
            trial,
            pa.chunked_array([_tags(cells)]),
        )

    @classmethod
    def join(cls, parts: list[_Checked]) -> _Checked:
        """The batches as one (emptied as they are joined, a column at a time, so that a
        file's rows are never held twice): each string column's codes into the distinct
        strings of all batches."""
        if len(parts) == 1:
            return parts[0]
        codes, strings = {}, {}
        for c in _NAMED:
            every = pa.concat_arrays([p.strings[c] for p in parts])
            uniq = pc.unique(every)
            where = pc.index_in(every, uniq).to_numpy(zero_copy_only=False).astype(np.int32)
            sizes = np.cumsum([0] + [len(p.strings[c]) for p in parts])
            codes[c] = np.concatenate(
                [where[sizes[k] : sizes[k + 1]][p.codes.pop(c)] for k, p in enumerate(parts)]
            )
            strings[c] = uniq

        def column(name: str) -> np.ndarray:
            out = np.concatenate([getattr(p, name) for p in parts])
            for p in parts:
                setattr(p, name, None)
            return out

        time_ns, value, trial = column("time_ns"), column("value"), column("trial")
        return cls(
            codes, strings, time_ns, value, trial, pa.chunked_array([c for p in parts for c in p.tags.chunks])
        )

    @property
    def n(self) -> int:
        return self.value.size

    def keys(self, *columns: str) -> np.ndarray:
        """Per row one integer that is equal exactly where its values of ``columns`` are:
        the codes combined (or, past 2**62 combinations, dense ids of the rows of codes)."""
        sizes = [max(len(self.strings[c]), 1) for c in columns]
        if math.prod(sizes) < 2**62:
            key = np.zeros(self.n, np.int64)
            for c, size in zip(columns, sizes, strict=True):
                key *= size
                key += self.codes[c]
            return key
        rows = np.stack([self.codes[c] for c in columns], axis=1)
        return np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)

    def distinct(self, *columns: str) -> int:
        """How many distinct values of ``columns`` the rows hold."""
        return int(np.unique(self.keys(*columns)).size)

    def number_trials(self, cells: _Cells) -> None:
        """Number the trials the row order numbers (within their run), and refuse a (run,
        trial) given twice, naming both lines (``cells`` of all rows, for the lines)."""
        run = self.keys("test", "testbed", "build")
        auto = self.trial < 0
        if auto.any():
            rows = np.flatnonzero(auto)
            order = rows[np.argsort(run[rows], kind="stable")]
            keys = run[order]
            starts = np.r_[0, np.flatnonzero(np.diff(keys)) + 1]
            rank = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
            self.trial[order] = rank
        # A row whose (run, trial) an earlier row has: in the stable order of (run, trial)
        # it follows one equal to it; the first such row of the file is reported.
        order = np.lexsort((self.trial, run))
        run = run[order]
        trial = self.trial[order]
        again = np.flatnonzero((run[1:] == run[:-1]) & (trial[1:] == trial[:-1])) + 1
        if again.size:
            at = int(again[np.argmin(order[again])])
            first = at
            while first > 0 and run[first - 1] == run[at] and trial[first - 1] == trial[at]:
                first -= 1
            dup, earlier = int(order[at]), int(order[first])
            name = {c: self.strings[c][int(self.codes[c][dup])].as_py() for c in ("test", "testbed", "build")}
            cells.fail(
                dup,
                f"duplicate: test {name['test']!r} testbed {name['testbed']!r} "
                f"build {name['build']!r} trial {self.trial[dup]} already given on line "
                f"{cells.line(earlier)}",
            )

    def table(self, lo: int = 0, hi: int | None = None) -> pa.Table:
        """Rows ``lo`` to ``hi`` as a results table."""
        hi = self.n if hi is None else hi
        cols = {c: self.strings[c].take(pa.array(self.codes[c][lo:hi])) for c in _NAMED}
        return pa.table(
            {
                "test": cols["test"],
                "testbed": cols["testbed"],
                "build": cols["build"],
                "time": pa.array(self.time_ns[lo:hi], pa.int64()).cast(RESULTS_SCHEMA.field("time").type),
                "trial": pa.array(self.trial[lo:hi], pa.int32()),
                "value": pa.array(self.value[lo:hi], pa.float64()),
                "unit": cols["unit"],
                "direction": cols["direction"],
                "tags": self.tags.slice(lo, hi - lo).combine_chunks(),
            }
        ).cast(RESULTS_SCHEMA)


def _checked_records(
    records: Iterable[Any], source: str, lines: Iterable[int] | None = None
) -> tuple[_Checked, _Cells]:
    """Records checked (every check vectorized), and their cells (for their lines)."""
    cols, line_of = _records_columns(records, source, lines)
    cells = _cells(cols, np.asarray(line_of, dtype=np.int64), source)
    return _Checked.of(cells), cells


def _numbered_table(checked: _Checked, cells: _Cells) -> pa.Table:
    """The results table of checked rows, their trials numbered (``cells``: all rows')."""
    checked.number_trials(cells)
    return checked.table()


def results_table(records: Iterable[dict[str, Any]], *, source: str = "<records>") -> pa.Table:
    """Check result records (dicts with the import columns) and build a results table.

    Parameters
    ----------
    records : iterable of dict
        One trial each (``value``), or one run each with ``values`` (a list of trials).
    source : str
        Named in error messages.

    Raises
    ------
    ParseError
        A missing column, a non-numeric or negative value, a bad time or direction, or the
        same (test, testbed, build, trial) twice; the message names the record.

    Examples
    --------
    >>> t = results_table([{"test": "ip4", "build": "b1", "time": 0, "values": [9.9, 10.1]}])
    >>> t.column("trial").to_pylist(), t.column("direction").to_pylist()
    ([0, 1], ['bigger-is-better', 'bigger-is-better'])
    """
    return _numbered_table(*_checked_records(records, source))


class _DataLines:
    """The line numbers of a CSV file's data rows ``first`` to ``first + n``, found only
    when an error needs one: the file is scanned again then, a few MiB at a time."""

    def __init__(self, source: str | bytes, first: int, n: int) -> None:
        self.source, self.first, self.n = source, first, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, row: int) -> int:
        return int(_data_lines(self.source)[self.first + row])


def _opened(source: str | bytes) -> BinaryIO:
    """A CSV source (a regular file's path, or the bytes of another kind of file) opened."""
    return io.BytesIO(source) if isinstance(source, bytes) else open(source, "rb")


@functools.lru_cache(maxsize=1)
def _data_lines(source: str | bytes) -> np.ndarray:
    """1-based line numbers of the non-blank lines after the header (the CSV reader skips
    blank lines)."""
    found: list[np.ndarray] = []
    line, ink = 1, False  # the line being read, and whether it has shown a non-blank byte
    with _opened(source) as f:
        while chunk := f.read(_SCAN_BYTES):
            buf = np.frombuffer(chunk, dtype=np.uint8)
            ends = np.flatnonzero(buf == 10)
            inked = np.flatnonzero(~np.isin(buf, (9, 10, 13, 32)))
            starts = np.r_[0, ends[:-1] + 1]
            has = np.searchsorted(inked, ends) - np.searchsorted(inked, starts) > 0
            if has.size:
                has[0] |= ink
                found.append(line + np.flatnonzero(has))
                line += ends.size
                ink = bool(inked.size and inked[-1] > ends[-1])
            else:
                ink |= bool(inked.size)
    if ink:
        found.append(np.array([line]))
    lines = np.concatenate(found) if found else np.zeros(0, np.int64)
    return lines[1:]  # past the header


#: Bytes a CSV file is parsed (and, for an error's line, scanned) at a time: memory is
#: bounded by this, not by the file.
_BLOCK_BYTES = 1 << 20
_SCAN_BYTES = 4 << 20
#: Rows a results file is written in at a time (a Parquet row group).
_ROW_GROUP = 1 << 18


def _csv_header(path: str, source: str | bytes) -> list[str]:
    """The header's column names, checked (a UTF-8 byte order mark dropped)."""
    with _opened(source) as f:
        first = f.readline(1 << 16).removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    if not first.strip():
        raise ParseError(path, 1, f"empty file (expected a header with {', '.join(_REQUIRED)})")
    header = [h.strip() for h in next(csv.reader([first]))]
    unknown = [h for h in header if h not in IMPORT_COLUMNS]
    if unknown:
        raise ParseError(path, 1, f"unknown column {unknown[0]!r} (columns: {', '.join(IMPORT_COLUMNS)})")
    return header


def _bad_csv_line(path: str, source: str | bytes, header: list[str]) -> ParseError:
    """The error of a CSV file pyarrow refused: its first row with the wrong number of
    fields, found the slow way, only now."""
    with _opened(source) as raw, io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if line > 1 and any(c.strip() for c in row) and len(row) != len(header):
                return ParseError(path, line, f"{len(row)} fields, the header has {len(header)}")
    return ParseError(path, 1, "not a CSV file this reader understands")


def _checked_rows(path: str | os.PathLike[str]) -> tuple[_Checked, _Cells]:
    """A results file checked, compactly, and the cells of all its rows (for their lines).
    A CSV file is parsed a block at a time (memory bounded by the block and the compact
    rows, not by the file); JSON is a document, read whole (up to MAX_RESULTS_BYTES)."""
    name = str(path)
    # A regular CSV file is parsed from disk a block at a time; anything else is read first
    # (up to MAX_RESULTS_BYTES: a pipe, a device, JSON), and a missing or unreadable file
    # gets read_bytes' message.
    source: str | bytes = name
    if name.endswith(".json") or not Path(name).is_file():
        source = read_bytes(path, "a results file (CSV or JSON)", limit=MAX_RESULTS_BYTES)
    if name.endswith(".json"):
        doc = load_json(source, name)
        records = doc.get("results") if isinstance(doc, dict) else doc
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ParseError(name, 1, 'JSON results must be a list of objects (or {"results": [...]})')
        return _checked_records(records, name)
    if name.endswith(_JSON_LINES):
        return _checked_json_lines(name, source)
    if not name.endswith(".csv"):
        raise ParameterError(f"{name}: result files are .csv, .json or .jsonl (JSON Lines)")
    header = _csv_header(name, source)
    parts, rows = [], 0
    try:
        with _opened(source) as f:
            reader = pacsv.open_csv(
                f,
                read_options=pacsv.ReadOptions(column_names=header, skip_rows=1, block_size=_BLOCK_BYTES),
                convert_options=pacsv.ConvertOptions(
                    column_types=dict.fromkeys(header, pa.string()), strings_can_be_null=False
                ),
            )
            for batch in reader:
                if batch.num_rows == 0:
                    continue
                cols = {c: batch.column(c) for c in header}
                cells = _cells(cols, _DataLines(source, rows, batch.num_rows), name)
                parts.append(_Checked.of(cells))
                rows += batch.num_rows
    except pa.ArrowInvalid:
        raise _bad_csv_line(name, source, header) from None
    # The blocks' text is gone: hand its memory back before the rows are joined.
    pa.default_memory_pool().release_unused()
    if not parts:
        raise ParseError(name, 2, "no results (the file holds no records)")
    return _Checked.join(parts), _Cells({}, _DataLines(source, 0, rows), name)


#: File names of JSON Lines: one record (an object) a line, read a block of lines at a time.
_JSON_LINES = (".jsonl", ".ndjson")
#: Records of a JSON Lines file checked at a time.
_JSON_BLOCK = 50_000


def _checked_json_lines(name: str, source: str | bytes) -> tuple[_Checked, _Cells]:
    """A JSON Lines results file checked a block of records at a time (memory bounded by
    the block and the compact rows, not by the file); blank lines are skipped."""
    parts, line_arrays = [], []

    def block(records: list[Any], lines: list[int]) -> None:
        checked, cells = _checked_records(records, name, lines)
        parts.append(checked)
        line_arrays.append(cells.line_of)

    records: list[Any] = []
    lines: list[int] = []
    with _opened(source) as f:
        for number, raw in enumerate(f, start=1):
            text = raw.removeprefix(b"\xef\xbb\xbf") if number == 1 else raw
            if not text.strip():
                continue
            try:
                records.append(json.loads(text))
            except (ValueError, UnicodeDecodeError) as e:
                raise ParseError(name, number, f"not a JSON object ({e})") from None
            lines.append(number)
            if len(records) == _JSON_BLOCK:
                block(records, lines)
                records, lines = [], []
    if records:
        block(records, lines)
    if not parts:
        raise ParseError(name, 1, "no results (the file holds no records)")
    return _Checked.join(parts), _Cells({}, np.concatenate(line_arrays), name)


def read_result_rows(path: str | os.PathLike[str]) -> pa.Table:
    """Read a CSV (header with :data:`IMPORT_COLUMNS`), JSON (a list of records) or JSON
    Lines (``.jsonl``, a record a line) result file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.csv"
    >>> _ = p.write_text("test,build,time,value\\nip4,b1,2024-05-01T02:00:00Z,10.5\\n")
    >>> read_result_rows(p).num_rows
    1
    """
    return _numbered_table(*_checked_rows(path))


def import_results(
    store: Store, path: str | os.PathLike[str], *, name: str = "import"
) -> tuple[Path, dict[str, int]]:
    """Check a results file and add it to the store as a new Parquet file, a block of rows
    at a time; returns its path and what it holds (series, runs, trials, failed trials).

    Nothing is written unless every row is good (the error names the first bad line).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "r.csv").write_text("test,build,time,value\\nip4,b1,0,10.5\\nip4,b1,0,fail\\n")
    >>> out, summary = import_results(Store.create(d / "store"), d / "r.csv")
    >>> summary
    {'series': 1, 'runs': 1, 'trials': 2, 'failed_trials': 1}
    """
    checked, cells = _checked_rows(path)
    checked.number_trials(cells)
    summary = {
        "series": checked.distinct("test", "testbed"),
        "runs": checked.distinct("test", "testbed", "build"),
        "trials": checked.n,
        "failed_trials": int(np.isnan(checked.value).sum()),
    }
    tables = (checked.table(lo, min(lo + _ROW_GROUP, checked.n)) for lo in range(0, checked.n, _ROW_GROUP))
    return write_results(store, tables, name=name), summary


def write_results(store: Store, table: pa.Table | Iterable[pa.Table], *, name: str = "import") -> Path:
    """Add a results table (or its parts, one row group each) to the store as a new
    Parquet file; returns its path.

    Examples
    --------
    >>> import tempfile
    >>> store = Store.create(tempfile.mkdtemp())
    >>> rows = results_table([{"test": "ip4", "build": "b1", "time": 0, "values": [10.0, 10.2]}])
    >>> write_results(store, rows).parent.name
    'results'
    >>> [(s.test, s.builds, s.values.tolist()) for s in load_series(store)]
    [('ip4', ('b1',), [10.1])]
    """
    parts = [table] if isinstance(table, pa.Table) else table
    make_dirs(store.results_dir)
    sweep_temporaries(store.results_dir)  # a killed import's: its name is no later one's
    stamp = _time.strftime("%Y%m%dT%H%M%S", _time.gmtime())
    # Written aside and linked in under a free name: a reader (check, analyze) never meets
    # half a file, even if this run is killed, and two imports at once never share a name.
    k = -1
    while True:
        k += 1
        path = store.results_dir / f"{stamp}-{k:04d}-{name}.parquet"
        if path.exists():
            continue
        out = OutputFile(path, exclusive=True)
        try:
            with write_errors(path):
                with pq.ParquetWriter(out.open(), RESULTS_SCHEMA) as writer:
                    for part in parts:
                        writer.write_table(part.select(RESULTS_SCHEMA.names).cast(RESULTS_SCHEMA))
                out.commit()
            return path
        except FileExistsError:
            continue  # another import took the name meanwhile
        finally:
            out.discard()


@dataclass(frozen=True)
class Series:
    """One test on one testbed: its runs (builds) in time order, each with its trials."""

    test: str
    testbed: str
    unit: str
    direction: str
    builds: tuple[str, ...]
    times_ns: np.ndarray
    trials: tuple[np.ndarray, ...]

    @property
    def runs(self) -> int:
        return len(self.builds)

    @property
    def failed(self) -> np.ndarray:
        """Runs all of whose trials failed."""
        return self.failed_trials == np.array([t.size for t in self.trials], dtype=np.int64)

    @property
    def failed_trials(self) -> np.ndarray:
        sizes = np.array([t.size for t in self.trials], dtype=np.int64)
        if not sizes.size:
            return sizes
        flat = np.isnan(np.concatenate(self.trials)).astype(np.int64)
        return np.add.reduceat(np.r_[flat, 0], np.cumsum(sizes) - sizes)[: sizes.size] * (sizes > 0)

    @property
    def values(self) -> np.ndarray:
        """The run values: the average of the trials that did not fail (NaN for a failed run)."""
        out = np.full(self.runs, np.nan)
        for k, t in enumerate(self.trials):
            ok = t[~np.isnan(t)]
            if ok.size:
                out[k] = ok.mean()
        return out


def _read_store_results(store: Store) -> pa.Table:
    files = sorted(store.results_dir.glob("*.parquet"))
    if not files:
        return RESULTS_SCHEMA.empty_table()
    parts = []
    for order, f in enumerate(files):
        try:
            # ParquetFile, not read_table: the latter loads pyarrow.dataset, and with it pandas (1 s).
            with pq.ParquetFile(f) as pf:
                t = pf.read()
        except (OSError, pa.ArrowInvalid) as e:
            raise TraceFileError(f"{f}: not a readable results file ({e})") from None
        missing = [c for c in RESULTS_SCHEMA.names if c not in t.column_names]
        if missing:
            raise TraceFileError(f"{f}: results file without column {missing[0]!r}")
        t = t.select(RESULTS_SCHEMA.names).cast(RESULTS_SCHEMA)
        parts.append(t.append_column("_file", pa.array(np.full(t.num_rows, order, np.int32))))
    return pa.concat_tables(parts)


def _check_stored_values(store: Store, table: pa.Table, values: np.ndarray) -> None:
    """Raise a TraceFileError naming the file, test, testbed and build of the first stored value
    that is infinite or negative (a store written by hand, or by an older import)."""
    bad = _first(np.isinf(values) | (values < 0))
    if bad is None:
        return
    row = {c: table.column(c)[bad].as_py() for c in ("test", "testbed", "build", "_file")}
    path = sorted(store.results_dir.glob("*.parquet"))[row["_file"]]
    raise TraceFileError(
        f"{path}: test {row['test']!r} testbed {row['testbed']!r} build {row['build']!r} holds the "
        f"value {values[bad]:g}, not a finite number >= 0 (import that build again with a valid value)"
    )


def load_series(store: Store | str | os.PathLike[str], *, tests: Sequence[str] | None = None) -> list[Series]:
    """Every series of the store (or those whose test name contains one of ``tests``).

    A (test, testbed, build) stored by several imports comes from the latest one. Runs are
    ordered by time, then build. See :func:`write_results` for an example.
    """
    if not isinstance(store, Store):
        if not Path(store, "results").is_dir():
            raise TraceFileError(f"{store}: not a wirepath store with results (no results/ directory)")
        store = Store(Path(store))
    table = _read_store_results(store)
    if tests:
        keep = np.zeros(table.num_rows, dtype=bool)
        names = table.column("test").to_numpy(zero_copy_only=False).astype(str)
        for t in tests:
            keep |= np.char.find(names, t) >= 0
        table = table.filter(pa.array(keep))
    if table.num_rows == 0:
        return []
    values = table.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    _check_stored_values(store, table, values)
    return _split_series(table, values)


class _Codes:
    """A string column as the ranks of its strings in sort order, and the strings."""

    def __init__(self, col: pa.ChunkedArray) -> None:
        enc = pc.dictionary_encode(col.combine_chunks())
        order = pc.array_sort_indices(enc.dictionary).to_numpy()
        self.strings = enc.dictionary.take(pa.array(order)).to_pylist()
        rank = np.empty(order.size, np.int64)
        rank[order] = np.arange(order.size)
        self.rank = rank[enc.indices.to_numpy(zero_copy_only=False)]


def _split_series(table: pa.Table, values: np.ndarray) -> list[Series]:
    """The rows cut into series (sorted by test, then testbed), each into runs ordered by
    time, then build, each run's trials by trial number; a (test, testbed, build) stored
    by several files is taken from the latest. Sorted on integer ranks of the strings, not
    the strings: a lab's store holds millions of rows."""
    test, testbed, build = (_Codes(table.column(c)) for c in ("test", "testbed", "build"))
    trial = table.column("trial").to_numpy()
    file = table.column("_file").to_numpy()
    order = np.lexsort((trial, file, build.rank, testbed.rank, test.rank))
    t, tb, b = test.rank[order], testbed.rank[order], build.rank[order]
    new_run = np.r_[True, (t[1:] != t[:-1]) | (tb[1:] != tb[:-1]) | (b[1:] != b[:-1])]
    if file.size and file.max() > file.min():
        # Per (test, testbed, build) only the rows of the latest file that holds it.
        f = file[order]
        latest = np.maximum.reduceat(f, np.flatnonzero(new_run))
        kept = f == latest[np.cumsum(new_run) - 1]
        order, t, tb, b = order[kept], t[kept], tb[kept], b[kept]
        new_run = np.r_[True, (t[1:] != t[:-1]) | (tb[1:] != tb[:-1]) | (b[1:] != b[:-1])]
    n = order.size
    run_starts = np.flatnonzero(new_run)
    t_ns = table.column("time").cast(pa.int64()).to_numpy()[order]
    run_time = np.minimum.reduceat(t_ns, run_starts)
    new_series = np.r_[True, (t[1:] != t[:-1]) | (tb[1:] != tb[:-1])]
    run_series = np.cumsum(new_series)[run_starts] - 1
    # Runs in series order, then time, then build.
    runs = np.lexsort((b[run_starts], run_time, run_series))
    # Every run's trials, the runs in their final order, in one array (each run a slice of it).
    counts = np.diff(np.r_[run_starts, n])[runs]
    within = np.arange(n) - np.repeat(np.cumsum(counts) - counts, counts)
    flat = values[order][np.repeat(run_starts[runs], counts) + within]
    cuts = np.r_[0, np.cumsum(counts)].tolist()
    run_trials = [flat[x:y] for x, y in itertools.pairwise(cuts)]
    run_build = [build.strings[k] for k in b[run_starts][runs].tolist()]
    run_time = run_time[runs]
    series_first = order[np.flatnonzero(new_series)]
    names = {
        c: table.column(c).take(pa.array(series_first)).to_pylist()
        for c in ("test", "testbed", "unit", "direction")
    }
    bounds = np.searchsorted(run_series[runs], np.arange(series_first.size + 1)).tolist()
    out = SeriesList(
        Series(
            test=names["test"][k],
            testbed=names["testbed"][k],
            unit=names["unit"][k],
            direction=names["direction"][k],
            builds=tuple(run_build[bounds[k] : bounds[k + 1]]),
            times_ns=run_time[bounds[k] : bounds[k + 1]],
            trials=tuple(run_trials[bounds[k] : bounds[k + 1]]),
        )
        for k in range(series_first.size)
    )
    out.flat = (np.diff(bounds).astype(np.int64), run_time, counts.astype(np.int32), flat)
    out.flat_of = [id(x) for x in out]
    return out


class SeriesList(list):
    """The series of a store as :func:`load_series` gives them, with their runs also flat
    (``flat``: runs per series, every run's time, trials per run, every trial), so that an
    analysis of all of them need not gather a million small arrays back into one."""

    flat: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    #: The series ``flat`` holds, by identity: a list changed in place (sorted, popped,
    #: an item replaced) no longer matches, and is packed from its series instead.
    flat_of: list[int] | None = None

    def flat_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """``flat`` while the list holds exactly the series it was made for, else None."""
        if self.flat is None or self.flat_of != [id(x) for x in self]:
            return None
        return self.flat
